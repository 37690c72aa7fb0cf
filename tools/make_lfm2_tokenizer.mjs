// A small tokenizer of LFM 2's kind for tests/data/lfm2/tokenizer/, and what transformers.js
// makes of it. The published LFM2 / LFM2.5 tokenizer cannot be had offline; this one has the
// same shape: a byte-level BPE tokenizer.json (a Split pre-tokenizer, then byte-level symbols),
// LFM's special tokens at their ids (<|pad|> 0, <|startoftext|> 1, <|endoftext|> 2, the
// fill-in-the-middle markers 3-5, <|im_start|> 6, <|im_end|> 7, the tool markers 8-13), and
// a ChatML-style chat template of our own that opens with the bos token, puts the system
// prompt and an optional JSON tool list (between <|tool_list_start|> and <|tool_list_end|>)
// first, wraps tool results in <|tool_response_start|> / <|tool_response_end|>, and ends each
// turn with <|im_end|>. Its merges are learned here from the tokenizer fixture strings, so the
// vocabulary (under 1000 ids) fits the tiny checkpoints' 65536 rows.
//
// expected.json holds transformers.js's encodings (with and without special tokens), decodings
// and rendered chat templates, the reference prism's tokenizer tests compare with.
//
// Usage (after scripts/setup.sh installed the npm packages):
//   node tools/make_lfm2_tokenizer.mjs [third_party/npm/node_modules] [tests/data/lfm2/tokenizer]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { BYTE_LEVEL_CHARS, byteLevel, learnMerges } from './handmade_tokenizers.mjs';
import { FIXTURE_STRINGS, CONVERSATIONS } from './tokenizer_fixture_inputs.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const npmDir = path.resolve(process.argv[2] ?? path.join(root, 'third_party/npm/node_modules'));
const outDir = path.resolve(process.argv[3] ?? path.join(root, 'tests/data/lfm2/tokenizer'));

const SPECIAL_TOKENS = [
  '<|pad|>', '<|startoftext|>', '<|endoftext|>', '<|fim_pre|>', '<|fim_mid|>', '<|fim_suf|>',
  '<|im_start|>', '<|im_end|>', '<|tool_list_start|>', '<|tool_list_end|>',
  '<|tool_call_start|>', '<|tool_call_end|>', '<|tool_response_start|>', '<|tool_response_end|>',
];
// Letters, numbers of up to three digits, other symbols, line breaks and spaces, with the
// contractions apart (the pattern of the Llama 3 family's byte-level tokenizers).
const SPLIT_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const MERGES = 2000;

const CHAT_TEMPLATE = [
  '{{- bos_token -}}',
  '{%- set ns = namespace(system="") -%}',
  '{%- if messages and messages[0]["role"] == "system" -%}',
  '{%- set ns.system = messages[0]["content"] -%}',
  '{%- endif -%}',
  '{%- if tools -%}',
  '{%- set tool_list = "List of tools: <|tool_list_start|>" + (tools | tojson) + "<|tool_list_end|>" -%}',
  '{%- set ns.system = (ns.system + "\\n" + tool_list) if ns.system else tool_list -%}',
  '{%- endif -%}',
  '{%- if ns.system -%}',
  '{{- "<|im_start|>system\\n" + ns.system + "<|im_end|>\\n" -}}',
  '{%- endif -%}',
  '{%- for message in messages -%}',
  '{%- if not (loop.first and message["role"] == "system") -%}',
  '{%- set content = message["content"] if message["content"] is string else "" -%}',
  '{%- if message["role"] == "tool" -%}',
  '{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}',
  '{%- endif -%}',
  '{{- "<|im_start|>" + message["role"] + "\\n" + content + "<|im_end|>\\n" -}}',
  '{%- endif -%}',
  '{%- endfor -%}',
  '{%- if add_generation_prompt -%}',
  '{{- "<|im_start|>assistant\\n" -}}',
  '{%- endif -%}',
].join('\n');

// Conversations of LFM's kind beside the shared ones (those meant for other templates left out).
const LFM_CONVERSATIONS = [
  ...CONVERSATIONS.filter((c) => !c.only),
  {
    name: 'tools',
    messages: [
      { role: 'system', content: 'You can look things up.' },
      { role: 'user', content: 'What is the status of candidate 12345?' },
      { role: 'assistant', content: '<|tool_call_start|>[get_status(id="12345")]<|tool_call_end|>Checking.' },
      { role: 'tool', content: '{"id": "12345", "status": "interview"}' },
      { role: 'assistant', content: 'An interview is scheduled.' },
    ],
    tools: [{ name: 'get_status', description: 'Status of a candidate',
      parameters: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] } }],
  },
];

function makeTokenizer() {
  const splitter = new RegExp(SPLIT_PATTERN.replace('(?i:', '(?:'), 'gu');
  const words = FIXTURE_STRINGS.flatMap((t) => t.match(splitter) ?? []).map(byteLevel);
  const merges = learnMerges(words, MERGES);
  const vocab = {};
  for (const s of [...SPECIAL_TOKENS, ...BYTE_LEVEL_CHARS]) vocab[s] = Object.keys(vocab).length;
  for (const [a, b] of merges) if (!((a + b) in vocab)) vocab[a + b] = Object.keys(vocab).length;
  const special = (content, id) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: true,
  });
  const bos = SPECIAL_TOKENS[1];
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: SPECIAL_TOKENS.map(special),
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: SPLIT_PATTERN }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ] },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { [bos]: { id: bos, ids: [1], tokens: [bos] } },
    },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab, merges: merges.map(([a, b]) => `${a} ${b}`),
    },
  };
}

function tokenizerConfig() {
  const decoder = {};
  SPECIAL_TOKENS.forEach((content, id) => {
    decoder[id] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false,
      special: true };
  });
  return {
    added_tokens_decoder: decoder,
    bos_token: '<|startoftext|>',
    eos_token: '<|im_end|>',
    pad_token: '<|pad|>',
    chat_template: CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    model_max_length: 128000,
    tokenizer_class: 'PreTrainedTokenizerFast',
  };
}

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(makeTokenizer()) + '\n');
fs.writeFileSync(path.join(outDir, 'tokenizer_config.json'),
  JSON.stringify(tokenizerConfig(), null, 2) + '\n');

const { env, AutoTokenizer } = await import(
  path.join(npmDir, '@huggingface/transformers/dist/transformers.node.mjs'));
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(outDir) + '/';
const tokenizer = await AutoTokenizer.from_pretrained(path.basename(outDir));
const cases = FIXTURE_STRINGS.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const withSpecial = tokenizer.encode(text, { add_special_tokens: true });
  return {
    text, ids, ids_with_special: withSpecial,
    decoded: ids.length ? tokenizer.decode(ids) : '',
    decoded_skip_special: tokenizer.decode(withSpecial, { skip_special_tokens: true }),
  };
});
const chats = [];
for (const c of LFM_CONVERSATIONS) {
  for (const addGenerationPrompt of [false, true]) {
    const rendered = tokenizer.apply_chat_template(c.messages, {
      tokenize: false, add_generation_prompt: addGenerationPrompt, tools: c.tools,
    });
    chats.push({ name: c.name, messages: c.messages, ...(c.tools ? { tools: c.tools } : {}),
      kwargs: {}, add_generation_prompt: addGenerationPrompt, rendered });
  }
}
fs.writeFileSync(path.join(outDir, 'expected.json'), JSON.stringify({
  source: 'transformers.js@3.8.1', cases, chats }) + '\n');
console.log(`wrote ${path.relative(root, outDir)}/: ${Object.keys(makeTokenizer().model.vocab).length} tokens`);
