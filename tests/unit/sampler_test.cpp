// The sampler's adjustments of the logits before it picks: Hugging Face's repetition penalty
// (once per distinct token of the history), OpenAI's frequency and presence penalties (the
// answer's tokens only) and logit biases, each on a case where a wrong rule picks another
// token; and options out of range refused.
#include "prism/llm/sampler.h"

#include <gtest/gtest.h>

#include <vector>

#include "prism/core/error.h"

namespace prism {
namespace {

int32_t greedy(llm::SamplerOptions o, const std::vector<float>& logits,
               const std::vector<int32_t>& history, size_t prompt_tokens = 0) {
  llm::Sampler s(std::move(o));
  s.start_generation(prompt_tokens);
  return s.next(logits, history);
}

TEST(Sampler, GreedyTakesTheLargestLogitTheLowerIdAmongEquals) {
  EXPECT_EQ(greedy({}, {0.5f, 2.0f, -1.0f, 2.0f}, {}), 1);
}

// transformers' RepetitionPenaltyLogitsProcessor gathers the logits of the history's ids and
// scatters them back penalized: a token that occurs three times is penalized once. Divided
// once, token 0's 3.0 (positive) stays above 2.4; divided twice it would fall below. Negative
// logits are multiplied, also once.
TEST(Sampler, RepetitionPenaltyOncePerDistinctToken) {
  const llm::SamplerOptions o{.repetition_penalty = 1.2};
  EXPECT_EQ(greedy(o, {3.0f, 2.4f}, {0, 0, 0}), 0);
  EXPECT_EQ(greedy(o, {3.0f, 2.55f}, {0}), 1);  // 3.0 / 1.2 = 2.5
  EXPECT_EQ(greedy(o, {-1.0f, -1.3f}, {0, 0, 0}), 0);
  // Token 0 twice, token 1 once: -1.2 against -1.38 (multiplied twice, token 0's -1.44).
  EXPECT_EQ(greedy(o, {-1.0f, -1.15f}, {0, 1, 0}), 0);
}

// OpenAI's frequency penalty: logit - count * penalty, count the answer's occurrences (those
// after start_generation's prompt), not the prompt's.
TEST(Sampler, FrequencyPenaltyCountsTheAnswerAlone) {
  const llm::SamplerOptions o{.frequency_penalty = 0.6};
  const std::vector<float> logits{3.0f, 2.0f};
  EXPECT_EQ(greedy(o, logits, {0, 0}, 2), 0);        // in the prompt alone: 3.0
  EXPECT_EQ(greedy(o, logits, {0, 0, 0}, 2), 0);     // once in the answer: 2.4
  EXPECT_EQ(greedy(o, logits, {0, 0, 0, 0}, 2), 1);  // twice: 1.8
  EXPECT_EQ(greedy(o, logits, {0, 0}, 0), 1);        // no prompt: twice, 1.8
  // Negative: the answer's tokens come back.
  EXPECT_EQ(greedy({.frequency_penalty = -1.5}, {1.0f, 2.0f}, {7, 0}, 1), 0);
}

// The presence penalty is taken once, however often the answer has the token.
TEST(Sampler, PresencePenaltyOnceWhateverTheCount) {
  const std::vector<float> logits{3.0f, 2.0f};
  EXPECT_EQ(greedy({.presence_penalty = 0.9}, logits, {0, 0, 0}, 1), 0);  // 2.1, not 1.2
  EXPECT_EQ(greedy({.presence_penalty = 1.1}, logits, {0}, 0), 1);        // 1.9
  EXPECT_EQ(greedy({.presence_penalty = 1.1}, logits, {0}, 1), 0);        // the prompt's
  // With the frequency penalty: 3.0 - 2 * 0.3 - 0.5 = 1.9.
  EXPECT_EQ(greedy({.frequency_penalty = 0.3, .presence_penalty = 0.5}, logits, {0, 0}), 1);
  EXPECT_EQ(greedy({.frequency_penalty = 0.3, .presence_penalty = 0.3}, logits, {0, 0}), 0);
}

TEST(Sampler, LogitBiasAddsToTheLogits) {
  EXPECT_EQ(greedy({.logit_bias = {{1, 1.5f}}}, {3.0f, 2.0f}, {}), 1);
  EXPECT_EQ(greedy({.logit_bias = {{0, -100.0f}}}, {3.0f, 2.0f, -50.0f}, {}), 1);
  // An id past these logits changes nothing.
  EXPECT_EQ(greedy({.logit_bias = {{9, 100.0f}}}, {3.0f, 2.0f}, {}), 0);
  // Before the penalties, as llama.cpp's chain of samplers has it: token 1 biased up to 3.0,
  // then halved to 1.5, under token 0's 1.8 (halved first, 2.0).
  EXPECT_EQ(greedy({.repetition_penalty = 2, .logit_bias = {{1, 1.0f}}}, {1.8f, 2.0f}, {1}), 0);
}

// Sampling at a temperature sees the same adjusted logits: a token banned by a bias never
// comes, and the tokens the penalty pushes down come less often.
TEST(Sampler, SamplingDrawsFromTheAdjustedLogits) {
  llm::Sampler s(
      {.temperature = 1, .presence_penalty = 2, .logit_bias = {{2, -100.0f}}, .seed = 3});
  s.start_generation(0);
  int zeros = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t t = s.next(std::vector<float>{1.0f, 1.0f, 5.0f}, std::vector<int32_t>{0});
    ASSERT_NE(t, 2);
    zeros += t == 0;
  }
  // p(0) = e^-1 / (e^-1 + e^1) = 0.119.
  EXPECT_NEAR(zeros / 4000.0, 0.119, 0.02);
}

TEST(Sampler, OptionsOutOfRangeAreRefused) {
  EXPECT_THROW(llm::Sampler({.frequency_penalty = 2.5}), Error);
  EXPECT_THROW(llm::Sampler({.presence_penalty = -3}), Error);
  EXPECT_THROW(llm::Sampler({.logit_bias = {{1, 101.0f}}}), Error);
  EXPECT_THROW(llm::Sampler({.logit_bias = {{-1, 1.0f}}}), Error);
  EXPECT_THROW(llm::Sampler({.repetition_penalty = 0}), Error);
}

}  // namespace
}  // namespace prism
