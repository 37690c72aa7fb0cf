// Decode and prefill steps at Qwen3.5-0.8B's shapes on any platform (bench/llm_steps.h).
#include <cstdio>

#include "bench/bench.h"
#include "bench/llm_steps.h"
#include "prism/models/qwen3_5.h"

namespace prism::bench {

models::Qwen3_5Config qwen3_5_0_8b() {
  models::Qwen3_5Config c;
  c.vocab_size = 248320;
  c.hidden_size = 1024;
  c.intermediate_size = 3584;
  for (int i = 0; i < 24; ++i) {  // three linear-attention layers, then one full-attention
    c.layers.push_back((i + 1) % 4 ? models::Qwen3_5Config::Layer::linear_attention
                                   : models::Qwen3_5Config::Layer::full_attention);
  }
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rotary_dim = 64;
  c.rope_theta = 1e7;
  c.linear_key_heads = 16;
  c.linear_value_heads = 16;
  c.linear_key_dim = 128;
  c.linear_value_dim = 128;
  c.conv_kernel = 4;
  c.max_positions = 262144;
  c.tie_word_embeddings = true;
  c.mtp_layers = 1;  // its multi-token prediction head (bench/mtp_bench.cpp)
  c.prefix = "model.language_model.";
  return c;
}

namespace {

void qwen3_5_bench() {
  llm_steps_bench("Qwen3.5 0.8B shapes", [](DType dtype) {
    return std::make_unique<models::Qwen3_5>(qwen3_5_0_8b(), dtype);
  });
}

const Register kQwen3_5{"qwen3_5", "Qwen3.5 0.8B-shaped decode and prefill", qwen3_5_bench};

}  // namespace
}  // namespace prism::bench
