// The llama.cpp side of `prism-bench llm`: runs a GGUF model through node-llama-cpp's prebuilt
// CPU llama.cpp and prints what prism measures on its side, one `key value...` line each:
//   prefill_tok_s  <512-token prompt into an empty cache, tokens/s, median of --prefill-runs>
//   decode_tok_s   <median tokens/s of the --decode greedy steps after that prompt>
//   greedy_long    <the greedy ids after the long prompt: its first, then the decode steps>
//   greedy_short   <SHORT_STEPS greedy ids after the SHORT prompt>
//   forced_short   <the most likely next id at each of those steps when fed FORCED instead:
//                   prism's greedy ids, so one flipped near-tie does not change all that follow>
// usage: node llm_llamacpp_peer.mjs NPM_NODE_MODULES MODEL.gguf THREADS PROMPT_IDS DECODE
//        SHORT_IDS SHORT_STEPS PREFILL_RUNS FORCED_IDS      (id lists comma separated)
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npm, model, threadsArg, promptArg, decodeArg, shortArg, shortStepsArg, runsArg, forcedArg] =
  process.argv.slice(2);
if (!forcedArg) {
  console.error("usage: llm_llamacpp_peer.mjs NPM MODEL THREADS PROMPT DECODE SHORT STEPS RUNS FORCED");
  process.exit(2);
}
const ids = (s) => s.split(",").map(Number);
const prompt = ids(promptArg), short = ids(shortArg), forced = ids(forcedArg);
const threads = Number(threadsArg), decode = Number(decodeArg);
const shortSteps = Number(shortStepsArg), runs = Number(runsArg);

const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(npm, "node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({
  gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error,
});
const loaded = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
const context = await loaded.createContext({
  contextSize: 1024, batchSize: prompt.length, threads: { ideal: threads, min: threads },
  sequences: 1,
});
const sequence = context.getSequence();
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const now = () => Number(process.hrtime.bigint()) / 1e9;

// Greedy ids after `tokens`, with the seconds each new token took.
async function greedy(tokens, steps) {
  const out = [], seconds = [];
  let t = now();
  for await (const token of sequence.evaluate(tokens, { temperature: 0 })) {
    const done = now();
    out.push(token);
    seconds.push(done - t);
    t = done;
    if (out.length === steps) break;
  }
  return { out, seconds };
}

const prefill = [];
for (let r = 0; r < runs; ++r) {
  await sequence.clearHistory();
  const start = now();
  await sequence.evaluateWithoutGeneratingNewTokens(prompt);
  prefill.push(prompt.length / (now() - start));
}
// The first new token comes after the prompt's prefill: decode steps are the ones after it.
await sequence.clearHistory();
const long = await greedy(prompt, decode + 1);
await sequence.clearHistory();
const shortRun = await greedy(short, shortSteps);
await sequence.clearHistory();
const input = [...short, ...forced.slice(0, shortSteps - 1)].map((token, i) =>
  i < short.length - 1 ? token : [token, { generateNext: { probabilities: true } }]);
const outputs = await sequence.controlledEvaluate(input);
const forcedNext = outputs.slice(short.length - 1).map((o) =>
  [...o.next.probabilities.entries()].reduce((a, b) => (b[1] > a[1] ? b : a))[0]);

console.log("prefill_tok_s", median(prefill).toFixed(2));
console.log("decode_tok_s", (1 / median(long.seconds.slice(1))).toFixed(3));
console.log("greedy_long", long.out.join(","));
console.log("greedy_short", shortRun.out.join(","));
console.log("forced_short", forcedNext.join(","));
await context.dispose();
await loaded.dispose();
await llama.dispose();
