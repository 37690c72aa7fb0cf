// Decode and prefill steps at Llama 3.2 1B's shapes on any platform (bench/llm_steps.h). Needs
// no checkpoint; `llm` is the side-by-side with llama.cpp on a real one.
#include <cstdio>

#include "bench/bench.h"
#include "bench/llm_steps.h"
#include "prism/models/llama.h"

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

const Register kLlmShapes{
    "llm-shapes", "Llama 3.2 1B-shaped decode and prefill steps, on --platform", llm_shapes_bench};

}  // namespace
}  // namespace prism::bench
