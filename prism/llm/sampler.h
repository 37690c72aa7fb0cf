// Picks the next token from logits: greedy, or sampling with temperature, top-k, top-p and
// min-p, with a repetition penalty over the tokens seen so far.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace prism::llm {

struct SamplerOptions {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: all
  double top_p = 1;
  double min_p = 0;
  double repetition_penalty = 1;  // > 1 discourages tokens already seen
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options);
  // `history`: the tokens so far (for the repetition penalty).
  int32_t next(std::span<const float> logits, std::span<const int32_t> history);

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
};

}  // namespace prism::llm
