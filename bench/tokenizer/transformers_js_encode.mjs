// The peer of prism-bench-tokenizer: encodes the same text with transformers.js and prints one
// JSON line with the time of each run and a hash of the ids (so that the two can be compared).
//   node transformers_js_encode.mjs NPM_DIR TOKENIZER_DIR TEXT_FILE RUNS
import fs from 'node:fs';
import path from 'node:path';

const [npmDir, tokenizerDir, textFile, runsArg] = process.argv.slice(2);
const { env, AutoTokenizer } = await import(
  path.join(npmDir, '@huggingface/transformers/dist/transformers.node.mjs'));
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(tokenizerDir)) + '/';
const tokenizer = await AutoTokenizer.from_pretrained(path.basename(path.resolve(tokenizerDir)));
const text = fs.readFileSync(textFile, 'utf8');

const seconds = [];
let ids = [];
for (let run = 0; run < Number(runsArg); ++run) {
  const start = process.hrtime.bigint();
  ids = tokenizer.encode(text, { add_special_tokens: false });
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
}
// FNV-1a over the ids, as the C++ side computes it.
let hash = 0xcbf29ce484222325n;
for (const id of ids) {
  hash ^= BigInt(id);
  hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
}
console.log(JSON.stringify({ seconds, ids: ids.length, hash: hash.toString(16) }));
