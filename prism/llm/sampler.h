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
  // Speculative decoding's check of a guessed token `draft` (one a drafter proposed with
  // certainty): keeps it with the probability next() would pick it, else draws a token from
  // the rest of next()'s distribution. So the token returned follows next()'s distribution,
  // whatever the guess; greedy, the guess is kept when it is the most likely token. `kept`
  // says whether the returned token is the guess.
  int32_t check(std::span<const float> logits, std::span<const int32_t> history, int32_t draft,
                bool& kept);
  bool greedy() const { return o_.temperature == 0; }

 private:
  // next()'s candidates, most likely first, in order_, and their probabilities (not
  // normalized) in p_; greedy, the most likely alone.
  void candidates(std::span<const float> logits, std::span<const int32_t> history);
  // A candidate drawn by p_, skipping index `skip` (or none).
  int32_t draw(size_t skip);

  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
  std::vector<double> p_;
};

}  // namespace prism::llm
