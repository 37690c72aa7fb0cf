// Speculative decoding: prompt lookup's guesses, the rejection rule's distribution, the
// engine's every-token logits and rewinds (KV caches, recurrent and convolution states), and
// generation with guesses that are partly wrong giving plain greedy decoding's ids.
#include "prism/llm/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "prism/backends/registry.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::argmax;
using testing::max_diff;

constexpr const char* kModels[] = {"llama/tiny-f32", "qwen3_5/tiny-bf16-untied",
                                   "lfm2/tiny-bf16-untied"};

llm::EngineOptions options() {
  llm::EngineOptions o;
  o.seqlen = 96;
  o.load.report = false;
  return o;
}

std::string path_of(const char* dir) { return std::string(PRISM_TEST_DATA) + "/" + dir; }

TEST(PromptLookup, TheLongestEndingThatOccurredBefore) {
  llm::PromptLookup lookup;
  using Ids = std::vector<int32_t>;
  // Ending {1, 2} occurred at the start; {2} alone more recently: the longer one wins.
  EXPECT_EQ(lookup.draft(Ids{1, 2, 7, 3, 2, 8, 1, 2}, 2, 0), (Ids{7, 3}));
  // The latest earlier occurrence, and no further than the conversation goes.
  EXPECT_EQ(lookup.draft(Ids{5, 9, 5, 6, 5}, 4, 0), (Ids{6, 5}));
  EXPECT_EQ(lookup.draft(Ids{1, 2, 3, 4, 1, 2}, 3, 0), (Ids{3, 4, 1}));
  EXPECT_EQ(lookup.draft(Ids{1, 2, 3, 4, 1, 2}, 1, 0), (Ids{3}));
  EXPECT_TRUE(lookup.draft(Ids{1, 2, 3, 4}, 3, 0).empty());
  EXPECT_TRUE(lookup.draft(Ids{1, 2, 1}, 0, 0).empty());
  EXPECT_TRUE(lookup.draft(Ids{7}, 3, 0).empty());
  EXPECT_TRUE(lookup.draft(Ids{}, 3, 0).empty());
  // n-grams of two tokens at least: a lone repeated token is no match.
  EXPECT_TRUE(llm::PromptLookup(3, 2).draft(Ids{4, 9, 4}, 2, 0).empty());
  EXPECT_EQ(testing::error_of([] { llm::PromptLookup(1, 2); }),
            "prompt lookup: n-grams of 2 to 1 tokens make no sense");
  EXPECT_EQ(testing::error_of([] { llm::make_drafter("oracle", "llm"); }),
            "llm: --speculate=oracle is not one of none, lookup, draft, mtp");
  EXPECT_EQ(llm::make_drafter("none", "llm"), nullptr);
  EXPECT_EQ(testing::error_of([] { llm::make_drafter("draft", "llm"); }),
            "llm: --speculate=draft needs --draft-model=URI");
}

// Pearson's statistic of `counts` against probabilities `p` over `n` draws.
double chi_square(const std::map<int32_t, int>& counts, const std::map<int32_t, double>& p, int n) {
  double x2 = 0;
  for (const auto& [token, q] : p) {
    const double expected = q * n, got = counts.contains(token) ? counts.at(token) : 0;
    x2 += (got - expected) * (got - expected) / expected;
  }
  for (const auto& [token, c] : counts) {
    if (!p.contains(token)) x2 += 1e9;  // a token the distribution never gives
  }
  return x2;
}

// The rejection rule keeps the sampler's distribution whatever the guess: a likely one, an
// unlikely one, one top-k cuts off. 20000 draws of 4 candidates: chi-square with 3 degrees of
// freedom below 16.27 (p = 0.001; the seed is fixed, so the test is deterministic).
TEST(SamplerCheck, KeepsTheDistribution) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 1.2f, 0.9f, -3.0f};
  llm::SamplerOptions o{.temperature = 0.8, .top_k = 4, .seed = 7};
  std::map<int32_t, double> p;  // the top 4 by logit, softmax at 0.8
  double sum = 0;
  for (int32_t t : {1, 3, 4, 0}) sum += p[t] = std::exp(logits[t] / 0.8);
  for (auto& [t, q] : p) q /= sum;
  for (int32_t draft : {1, 4, 2, 5}) {
    SCOPED_TRACE(draft);
    llm::Sampler sampler(o);
    std::map<int32_t, int> counts;
    int kept = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      bool same = false;
      const int32_t t = sampler.check(logits, {}, draft, same);
      EXPECT_EQ(same, t == draft);
      kept += same;
      ++counts[t];
    }
    EXPECT_LT(chi_square(counts, p, n), 16.27);
    const double want_kept = p.contains(draft) ? p[draft] : 0;
    EXPECT_NEAR(static_cast<double>(kept) / n, want_kept, 0.02);
  }
  // Greedy: the guess is kept when it is the most likely token, else that token comes.
  llm::Sampler greedy({});
  bool same = false;
  EXPECT_EQ(greedy.check(logits, {}, 1, same), 1);
  EXPECT_TRUE(same);
  EXPECT_EQ(greedy.check(logits, {}, 3, same), 1);
  EXPECT_FALSE(same);
}

// feed_every's rows are the logits feed() gives one token at a time.
TEST(EngineFeedEvery, RowsAreEachTokensLogits) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    const std::vector<int32_t> prompt{1, 9906, 11, 1268}, more{40, 1093, 279, 3363, 13};
    llm::Engine one(path_of(dir), get_platform("cpu"), options());
    std::vector<std::vector<float>> want{one.feed(prompt)};
    for (int32_t t : more) want.push_back(one.feed(std::vector<int32_t>{t}));

    llm::Engine e(path_of(dir), get_platform("cpu"), options());
    std::vector<float> first = e.feed(std::span(prompt).first(3));
    std::vector<int32_t> tokens{prompt.back()};
    tokens.insert(tokens.end(), more.begin(), more.end());
    const std::vector<float> rows = e.feed_every(tokens);
    const size_t vocab = want[0].size();
    ASSERT_EQ(rows.size(), tokens.size() * vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::vector<float> row(rows.begin() + i * vocab, rows.begin() + (i + 1) * vocab);
      EXPECT_EQ(argmax(row), argmax(want[i])) << "row " << i;
      EXPECT_LT(max_diff(row, want[i]), 2e-2) << "row " << i;
    }
    EXPECT_EQ(e.position(), static_cast<int64_t>(prompt.size() + more.size()));
  }
}

// A rewind forgets the tokens past it: what follows is what a conversation that never had
// them gives. Models with recurrent or convolution states go back as far as the start of the
// last feed_every only.
TEST(EngineRewind, ForgetsTheTokensPastIt) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    const std::vector<int32_t> prompt{1, 9906, 11, 1268}, guesses{40, 1093, 279, 3363};
    llm::Engine plain(path_of(dir), get_platform("cpu"), options());
    std::vector<int32_t> kept = prompt;
    kept.insert(kept.end(), {40, 1093, 500});
    const std::vector<float> want = plain.feed(kept);
    const std::vector<float> want_next = plain.feed(std::vector<int32_t>{17});

    llm::Engine e(path_of(dir), get_platform("cpu"), options());
    e.feed(prompt);
    e.feed_every(guesses);
    EXPECT_EQ(e.position(), 8);
    e.rewind(0, 7);  // keeps 40, 1093, 279
    e.rewind(0, 6);  // and then only 40, 1093
    EXPECT_EQ(e.position(), 6);
    const std::vector<float> got = e.feed(std::vector<int32_t>{500});
    EXPECT_EQ(argmax(got), argmax(want));
    EXPECT_LT(max_diff(got, want), 2e-2);
    EXPECT_EQ(e.position(), 7);
    EXPECT_LT(max_diff(e.feed(std::vector<int32_t>{17}), want_next), 2e-2);

    EXPECT_EQ(testing::error_of([&] { e.rewind(0, 9); }),
              "llm: cannot rewind to position 9: the conversation is at 8");
    const bool recurrent = std::string(dir).find("llama") == std::string::npos;
    if (recurrent) {  // states kept from before feed_every only, and only until the next feed
      EXPECT_EQ(testing::error_of([&] { e.rewind(0, 3); }),
                "llm: cannot rewind to position 3: the states are kept back to the start of the "
                "last feed_every only (8)");
      e.feed_every(std::vector<int32_t>{5, 6});
      EXPECT_EQ(testing::error_of([&] { e.rewind(0, 7); }),
                "llm: cannot rewind to position 7: the states are kept back to the start of the "
                "last feed_every only (8)");
    } else {  // KV caches alone: anywhere back
      e.rewind(0, 3);
      EXPECT_EQ(e.position(), 3);
    }
    e.reset();
    EXPECT_EQ(e.position(), 0);
  }
}

// Guesses that follow a known continuation but go wrong at a place that moves from call to
// call: the first guess, a later one, none.
class Oracle : public llm::Drafter {
 public:
  explicit Oracle(std::vector<int32_t> truth) : truth_(std::move(truth)) {}
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int) override {
    std::vector<int32_t> out;
    const int64_t wrong = calls_++ % (count + 1);
    for (int64_t i = 0; i < count; ++i) {
      const size_t at = history.size() + static_cast<size_t>(i);
      if (at >= truth_.size()) break;
      out.push_back(i == wrong ? (truth_[at] == 5 ? 6 : 5) : truth_[at]);
    }
    return out;
  }

 private:
  std::vector<int32_t> truth_;
  int calls_ = 0;
};

TEST(Generator, GuessesGivePlainGreedyIds) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    const std::vector<int32_t> prompt{1, 9906, 11, 1268, 40, 1093};
    llm::Engine e(path_of(dir), get_platform("cpu"), options());
    llm::Sampler sampler({});
    std::vector<int32_t> plain_context;
    llm::Generator plain(e, sampler, plain_context);
    plain_context = prompt;
    std::vector<int32_t> want;
    for (int i = 0; i < 30; ++i) want.push_back(plain.next());
    plain.stop();

    for (int64_t k : {1, 3, 6}) {
      SCOPED_TRACE(k);
      e.reset();
      std::vector<int32_t> truth = prompt;
      truth.insert(truth.end(), want.begin(), want.end());
      Oracle oracle(truth);
      std::vector<int32_t> context = prompt;
      llm::Generator g(e, sampler, context, {.drafter = &oracle, .draft_tokens = k});
      std::vector<int32_t> got;
      for (int i = 0; i < 30; ++i) got.push_back(g.next());
      EXPECT_EQ(got, want);
      EXPECT_GT(g.stats().accepted, 0);
      EXPECT_LT(g.stats().accepted, g.stats().drafted);
      // The engine ran ahead; stop() takes it back to the 36 tokens taken (the last not run).
      g.stop();
      EXPECT_LE(e.position(), 36);
      EXPECT_GE(e.position(), 35);
      EXPECT_EQ(context.size(), 36u);
    }
  }
}

// Guesses from a known continuation, all right, or all wrong.
class Fixed : public llm::Drafter {
 public:
  Fixed(std::vector<int32_t> truth, bool right) : truth_(std::move(truth)), right_(right) {}
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int) override {
    std::vector<int32_t> out;
    for (size_t at = history.size(); at < truth_.size() && std::ssize(out) < count; ++at) {
      out.push_back(right_ ? truth_[at] : (truth_[at] == 5 ? 6 : 5));
    }
    return out;
  }

 private:
  std::vector<int32_t> truth_;
  bool right_;
};

// Steps guess less after guesses that failed: fewer at a time, then none for a while.
TEST(Generator, GuessesLessWhenTheyFail) {
  const std::vector<int32_t> prompt{1, 9906, 11, 1268};
  llm::Engine e(path_of("llama/tiny-f32"), get_platform("cpu"), options());
  llm::Sampler sampler({});
  std::vector<int32_t> context = prompt, want;
  llm::Generator plain(e, sampler, context);
  for (int i = 0; i < 60; ++i) want.push_back(plain.next());
  plain.stop();
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), want.begin(), want.end());
  for (bool right : {true, false}) {
    SCOPED_TRACE(right);
    e.reset();
    context = prompt;
    Fixed guesses(truth, right);
    llm::Generator g(e, sampler, context, {.drafter = &guesses, .draft_tokens = 6});
    std::vector<int32_t> got;
    for (int i = 0; i < 60; ++i) got.push_back(g.next());
    g.stop();
    EXPECT_EQ(got, want);
    if (right) {  // six a step, every one kept (the last step's run past the answer known)
      EXPECT_EQ(g.stats().accepted, g.stats().drafted);
      EXPECT_GE(g.stats().drafted, 6 * (g.stats().checks - 1));
    } else {
      // Checks of 6, 5, 4 and 3 guesses, a pause of 8 steps, 2 guesses, a pause of 16, 1
      // guess, a pause of 32: 21 guesses in 6 checks for 60 tokens.
      EXPECT_EQ(g.stats().accepted, 0);
      EXPECT_EQ(g.stats().checks, 6);
      EXPECT_EQ(g.stats().drafted, 21);
    }
  }
}

// A draft model's guesses do not depend on what it was asked before: its slot goes back where
// a conversation went another way (within the last guesses, or by starting over).
TEST(DraftModel, GuessesAsIfAskedFirst) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    llm::Engine engine(path_of(dir), get_platform("cpu"), options());
    llm::DraftModel draft(engine);
    const std::vector<int32_t> prompt{1, 9906, 11, 1268, 40};
    auto fresh = [&](const std::vector<int32_t>& history, int64_t count) {
      llm::Engine other(path_of(dir), get_platform("cpu"), options());
      return llm::DraftModel(other).draft(history, count, 0);
    };
    const std::vector<int32_t> first = draft.draft(prompt, 4, 0);
    ASSERT_EQ(first.size(), 4u);
    EXPECT_EQ(first, fresh(prompt, 4));
    // Two guesses kept, then another token than the third guess.
    std::vector<int32_t> next = prompt;
    next.insert(next.end(), {first[0], first[1], first[2] == 7 ? 8 : 7});
    EXPECT_EQ(draft.draft(next, 3, 0), fresh(next, 3));
    // Every guess kept, and one more token.
    std::vector<int32_t> longer = next;
    const std::vector<int32_t> guessed = draft.draft(longer, 3, 0);
    longer.insert(longer.end(), guessed.begin(), guessed.end());
    longer.push_back(13);
    EXPECT_EQ(draft.draft(longer, 2, 0), fresh(longer, 2));
    // Another conversation altogether: it starts over.
    const std::vector<int32_t> other{1, 500, 600};
    EXPECT_EQ(draft.draft(other, 3, 0), fresh(other, 3));
    // No room left in the cache past the conversation: fewer guesses, or none.
    std::vector<int32_t> full(options().seqlen - 1, 11);
    EXPECT_EQ(draft.draft(full, 4, 0).size(), 2u);
    full.resize(options().seqlen + 1, 11);
    EXPECT_TRUE(draft.draft(full, 4, 0).empty());
  }
}

// A draft model that is the same model in another dtype: many guesses kept, not all, and the
// plain greedy ids.
TEST(Generator, DraftModelGivesPlainGreedyIds) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    const std::vector<int32_t> prompt{1, 9906, 11, 1268, 40, 1093};
    llm::Engine e(path_of(dir), get_platform("cpu"), options());
    llm::Sampler sampler({});
    std::vector<int32_t> context = prompt, want;
    llm::Generator plain(e, sampler, context);
    for (int i = 0; i < 30; ++i) want.push_back(plain.next());
    plain.stop();

    llm::EngineOptions other = options();
    other.dtype = std::string(dir).find("f32") != std::string::npos ? DType::bf16 : DType::f32;
    llm::Engine small(path_of(dir), get_platform("cpu"), other);
    llm::DraftModel draft(small);
    e.reset();
    context = prompt;
    llm::Generator g(e, sampler, context, {.drafter = &draft, .draft_tokens = 4});
    std::vector<int32_t> got;
    for (int i = 0; i < 30; ++i) got.push_back(g.next());
    g.stop();
    EXPECT_EQ(got, want);
    EXPECT_GT(g.stats().accepted, g.stats().drafted / 2);
  }
}

// With sampling, the tokens follow the model's distribution: the first token of 1000 answers,
// each checking a guess that is not the likeliest, against the model's own probabilities (top 6 at
// temperature 1: chi-square with 5 degrees of freedom below 20.5, p = 0.001).
TEST(Generator, SampledTokensFollowTheModel) {
  // The prompt's step takes no guesses: the engine holds the prompt, and the token after it
  // (one the model did not pick) starts each answer's first step, which checks guesses.
  const std::vector<int32_t> prompt{1, 9906, 11, 1268}, last{17};
  llm::Engine e(path_of("llama/tiny-f32"), get_platform("cpu"), options());
  e.feed(prompt);
  const std::vector<float> logits = e.feed(last);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 6, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::map<int32_t, double> p;
  double sum = 0;
  for (int i = 0; i < 6; ++i) sum += p[order[i]] = std::exp(logits[order[i]] - logits[order[0]]);
  for (auto& [t, q] : p) q /= sum;

  class Fixed : public llm::Drafter {
   public:
    explicit Fixed(int32_t t) : t_(t) {}
    std::vector<int32_t> draft(std::span<const int32_t>, int64_t count, int) override {
      return std::vector<int32_t>(count, t_);
    }
    int32_t t_;
  } guess(order[2]);
  std::map<int32_t, int> counts;
  const int n = 1000;
  int64_t checked = 0;
  std::vector<int32_t> start = prompt;
  start.insert(start.end(), last.begin(), last.end());
  for (int i = 0; i < n; ++i) {
    e.rewind(0, static_cast<int64_t>(prompt.size()));
    llm::Sampler sampler({.temperature = 1, .top_k = 6, .seed = static_cast<uint64_t>(i)});
    std::vector<int32_t> context = start;
    llm::Generator g(e, sampler, context, {.drafter = &guess, .draft_tokens = 2});
    ++counts[g.next()];
    checked += g.stats().drafted;
  }
  EXPECT_EQ(checked, 2 * n);  // every answer's first token went through the check
  EXPECT_LT(chi_square(counts, p, n), 20.5);
}

}  // namespace
}  // namespace prism
