// Decode and prefill steps at LFM2.5-1.2B's shapes on any platform (bench/llm_steps.h).
#include <cstdio>

#include "bench/bench.h"
#include "bench/llm_steps.h"
#include "prism/models/lfm2.h"

namespace prism::bench {
namespace {

// LiquidAI/LFM2.5-1.2B's config.json, as parsed: 10 convolution and 6 attention layers.
models::Lfm2Config lfm25_1_2b() {
  using Layer = models::Lfm2Config::Layer;
  constexpr Layer C = Layer::conv, A = Layer::attention;
  models::Lfm2Config c;
  c.vocab_size = 65536;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;  // block_ff_dim 12288, auto-adjusted
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.max_positions = 128000;
  c.conv_kernel = 3;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  c.layers = {C, C, A, C, C, A, C, C, A, C, A, C, A, C, A, C};
  return c;
}

void lfm2_bench() {
  llm_steps_bench("LFM2.5 1.2B shapes",
                  [](DType dtype) { return std::make_unique<models::Lfm2>(lfm25_1_2b(), dtype); });
}

const Register kLfm2{"llm-lfm2", "LFM2.5 1.2B-shaped decode and prefill", lfm2_bench};

}  // namespace
}  // namespace prism::bench
