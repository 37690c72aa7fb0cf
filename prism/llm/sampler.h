// Picks the next token from logits: greedy, or sampling with temperature, top-k, top-p and
// min-p, after biases given per token and penalties for the tokens seen so far.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace prism::llm {

struct SamplerOptions {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: all
  double top_p = 1;
  double min_p = 0;
  // Hugging Face's: each distinct token of the history (prompt and answer) has a positive
  // logit divided by it and a negative one multiplied; > 1 discourages repeats.
  double repetition_penalty = 1;
  // OpenAI's: logit -= count * frequency_penalty + (count > 0) * presence_penalty, count the
  // times the token was generated so far (the prompt's tokens do not count). In [-2, 2].
  double frequency_penalty = 0;
  double presence_penalty = 0;
  // Added to these tokens' logits before anything else (OpenAI's logit_bias; -100 bans one).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options);
  // The generation starts after the first `prompt_tokens` of the histories given from now
  // on: the frequency and presence penalties count the tokens after them (0 before this is
  // called: every token of the history counts).
  void start_generation(size_t prompt_tokens) { prompt_tokens_ = prompt_tokens; }
  // `history`: the tokens so far, the prompt's then those generated (for the penalties).
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
  // The biases and penalties, on the logits in scratch_.
  void adjust(std::span<const int32_t> history);
  // A candidate drawn by p_, skipping index `skip` (or none).
  int32_t draw(size_t skip);

  SamplerOptions o_;
  size_t prompt_tokens_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  // adjust()'s, per token id: seen in the history, and generated how many times (all zero
  // between calls); and the ids it set.
  std::vector<uint8_t> seen_;
  std::vector<int32_t> count_;
  std::vector<int32_t> touched_;
  std::vector<int32_t> order_;
  std::vector<double> p_;
};

}  // namespace prism::llm
