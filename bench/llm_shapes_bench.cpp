// Decode and prefill steps at Llama 3.2 1B's shapes on any platform (bench/llm_steps.h). Needs
// no checkpoint; `llm` is the side-by-side with llama.cpp on a real one.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/llm_steps.h"
#include "prism/llm/engine.h"
#include "prism/models/llama.h"
#include "prism/runtime/sharded.h"

namespace prism::bench {
namespace {

models::LlamaConfig llama_1b() {
  models::LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_layers = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.max_positions = 131072;
  c.rope_theta = 500000;
  c.tie_word_embeddings = true;
  return c;
}

void llm_shapes_bench() {
  llm_steps_bench("Llama 3.2 1B shapes",
                  [](DType dtype) { return std::make_unique<models::Llama>(llama_1b(), dtype); });
}

// Continuous batching's decoding step (CausalLM::decode_batch): one token for each of B
// conversations in one forward pass, every weight read once per step. Total tokens/s at 1, 4
// and 16 conversations (each at position 512 of a 1024-position cache), and the ratio to one.
void decode_batch_bench() {
  Platform& target = platform();
  models::Llama model(llama_1b(), DType::bf16);
  const int64_t seqlen = 1024;
  const std::vector<models::StateSpec> specs = model.state_specs(seqlen);
  std::printf("Llama 3.2 1B shapes, bf16, batched decoding on %s\n",
              target.devices().at(0).name.c_str());
  std::printf("%-14s %12s %14s %10s\n", "conversations", "step ms", "total tok/s", "vs one");
  double one = 0;
  for (int64_t batch : {1, 4, 16}) {
    ShardedExecutable exe = llm::compile_decode_batch(target, model, batch, seqlen, Mesh());
    Platform& on = *exe.devices()[0];
    std::vector<NamedBuffers> weights(1);
    for (const auto& p : exe.parameters()) weights[0].emplace(p.name, on.allocate(p.shape));
    weights = exe.prepare(std::move(weights));
    std::vector<Buffer> states;
    for (int64_t i = 0; i < batch; ++i) {
      for (const models::StateSpec& s : specs) states.push_back(on.allocate(s.shape));
    }
    const Shape rows(DType::i32, {{"b", batch}});
    const HostBuffer at = HostBuffer::from<int32_t>(rows, std::vector<int32_t>(batch, 512));
    const double seconds = median_seconds([&] {
      std::vector<std::vector<Buffer>> in{{on.upload(HostBuffer(rows)), on.upload(at)}};
      in[0].insert(in[0].end(), states.begin(), states.end());
      std::vector<std::vector<Buffer>> out = exe.call(weights, in);
      states.assign(out[0].begin() + 1, out[0].end());
      out[0][0].to_host();
    });
    const double tok_s = static_cast<double>(batch) / seconds;
    if (batch == 1) one = tok_s;
    std::printf("%-14lld %12.1f %14.1f %9.2fx\n", static_cast<long long>(batch), seconds * 1e3,
                tok_s, tok_s / one);
  }
}

const Register kDecodeBatch{"decode-batch",
                            "Llama 3.2 1B-shaped batched decoding: total tokens/s at 1, 4, 16 "
                            "conversations",
                            decode_batch_bench};

const Register kLlmShapes{
    "llm-shapes", "Llama 3.2 1B-shaped decode and prefill steps, on --platform", llm_shapes_bench};

}  // namespace
}  // namespace prism::bench
