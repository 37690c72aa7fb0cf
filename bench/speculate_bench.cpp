// Speculative decoding on the random-weight checkpoint of Llama 3.2 1B's shape that `llm` uses
// (prism-bench llm --speculate, or prism-bench speculate), in bf16 on the CPU:
//   1. What a check costs: a step over the last token and k guesses (Engine::feed_every)
//      against a plain decoding step, at position 512. A step that keeps t tokens on average
//      pays when t is above that ratio.
//   2. Generation, 64 tokens after a 512-token prompt, plain and speculative side by side
//      (each once a round, the median of --repeats rounds), in tokens/s and tokens per pass
//      over the weights from the first token on, against the plain-decode roofline (memory
//      bandwidth measured in the same run / the bytes a step reads):
//      - prompt lookup on a prompt that repeats a passage and on one that does not. Random
//        weights do not copy the passages they read, so lookup's guesses are seldom right
//        here: this shows what wrong guesses cost;
//      - guesses from an oracle that knows the answer, all right or every second one wrong:
//        what a drafter that guesses that well gives. The answer it knows is the one the
//        checks themselves give: in bf16 a step over several tokens rounds a little otherwise
//        than a step over one, and where two logits are that close the greedy choice can differ
//        from plain decoding's (docs/speculative.md), so the oracle learns the answer from its
//        own runs until they agree. Every side's ids are compared with plain decoding's.
//   prism-bench speculate [--model=DIR] [--draft-tokens=K] [--repeats=N]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/topology.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/store.h"
#include "prism/llm/speculative.h"

namespace prism::bench {
namespace {

constexpr int kPrompt = 512;
constexpr int kAnswer = 64;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A passage of 64 ids repeated to `kPrompt` tokens, or `kPrompt` ids that never repeat.
std::vector<int32_t> prompt(bool repeats) {
  std::vector<int32_t> ids{128000};
  for (int i = 1; i < kPrompt; ++i) {
    const int k = repeats ? (i - 1) % 64 + 1 : i;
    ids.push_back(k * 7919 % 128000);
  }
  return ids;
}

// Guesses from the answer plain greedy decoding gives, every `wrong`-th one (0: none) off.
class Oracle : public llm::Drafter {
 public:
  Oracle(std::vector<int32_t> truth, int wrong) : truth_(std::move(truth)), wrong_(wrong) {}
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int) override {
    std::vector<int32_t> out;
    for (int64_t i = 0; i < count && history.size() + i < truth_.size(); ++i) {
      const int32_t t = truth_[history.size() + i];
      const bool off = wrong_ > 0 && ++made_ % wrong_ == 0;
      out.push_back(off ? (t + 1) % 128000 : t);
    }
    return out;
  }

 private:
  std::vector<int32_t> truth_;
  int wrong_;
  int64_t made_ = 0;
};

struct Generation {
  std::vector<int32_t> ids;
  double tok_s = 0;         // decoding: the tokens after the first, over their time
  double tok_per_pass = 0;  // and over the steps that decided them
  llm::SpeculationStats stats;
};

// One answer of `kAnswer` greedy tokens after `ids`. Its speed and passes count from the first
// token on, leaving out the tokens the prompt's step decided with it.
Generation generate(llm::Engine& engine, const std::vector<int32_t>& ids, llm::Drafter* drafter,
                    int64_t draft_tokens) {
  Generation g;
  engine.reset();
  llm::Sampler sampler({});
  std::vector<int32_t> context = ids;
  llm::Generator generator(engine, sampler, context,
                           {.drafter = drafter, .draft_tokens = draft_tokens});
  g.ids = {generator.next()};  // the prompt's step
  const double tokens = static_cast<double>(kAnswer - 1 - generator.ready());
  const int64_t passes = generator.stats().passes;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(g.ids.size()) < kAnswer) g.ids.push_back(generator.next());
  g.tok_s = tokens / seconds_since(start);
  g.stats = generator.stats();
  g.tok_per_pass = tokens / static_cast<double>(g.stats.passes - passes);
  generator.stop();
  return g;
}

// "same" where the ids are plain decoding's, else where they part.
std::string same_as(const std::vector<int32_t>& got, const std::vector<int32_t>& plain) {
  size_t n = 0;
  while (n < got.size() && n < plain.size() && got[n] == plain[n]) ++n;
  return n == got.size() && n == plain.size() ? "same" : fmt::format("from token {}", n + 1);
}

}  // namespace

void speculate_bench() {
  const std::string dir = option("model", PRISM_BINARY_DIR "/bench/llama-1b-random");
  const int repeats = std::stoi(option("repeats", "3"));
  const int64_t k = std::stoll(option("draft-tokens", "4"));
  PRISM_CHECK(repeats >= 1, "speculate: --repeats must be at least 1");
  PRISM_CHECK(k >= 1 && k <= llm::kMaxDraftTokens, "speculate: --draft-tokens must be 1 to {}",
              llm::kMaxDraftTokens);
  ensure_checkpoint(dir);
  Platform& cpu = get_platform("cpu");
  const int threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  llm::Engine engine(dir, cpu, {.seqlen = 1024, .dtype = DType::bf16});
  const double bytes = static_cast<double>(io::Store::open(dir).total_bytes());
  std::printf("Speculative decoding, Llama 3.2 1B shape (random weights), bf16, %s, %d threads\n",
              cpu::cpu_model().c_str(), threads);

  // 1. A check of k guesses against a plain step, both at position 512.
  const std::vector<int32_t> long_prompt = prompt(false);
  engine.feed(long_prompt);
  const int64_t at = engine.position();
  // Each size once a round, round after round (warmed up first: each size compiles its step).
  const std::vector<int64_t> sizes{1, 2, 3, 5, 9, 17};
  auto step = [&](int64_t n) {
    engine.rewind(0, at);
    const std::vector<int32_t> tokens(n, 791);
    const auto start = std::chrono::steady_clock::now();
    if (n == 1) {
      engine.feed(tokens);
    } else {
      engine.feed_every(tokens);
    }
    return seconds_since(start);
  };
  std::vector<std::vector<double>> times(sizes.size());
  std::printf("\nFirst use of each step size (its compilation included):");
  for (int64_t n : sizes) std::printf(" %lld: %.2f s", static_cast<long long>(n), step(n));
  std::printf("\n");
  for (int r = 0; r < std::max(repeats, 5); ++r) {
    for (size_t i = 0; i < sizes.size(); ++i) times[i].push_back(step(sizes[i]));
  }
  const double plain = median_of(times[0]);
  std::printf("\nA step over the last token and k guesses, against a plain decoding step\n");
  std::printf("%-10s %10s %10s\n", "guesses", "step ms", "vs plain");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double s = median_of(times[i]);
    std::printf("%-10lld %10.1f %9.2fx\n", static_cast<long long>(sizes[i] - 1), s * 1e3,
                s / plain);
  }

  // 2. Generation.
  const double gbps = measure_read_gbps(threads);
  const double roofline = gbps * 1e9 / bytes;
  std::printf(
      "\n%d tokens after %d, greedy, up to %lld guesses a step; plain-decode roofline "
      "%.1f tok/s (%.1f GB/s read / %.2f GB a step)\n",
      kAnswer, kPrompt, static_cast<long long>(k), roofline, gbps, bytes / 1e9);
  std::printf("%-34s %9s %9s %11s %10s %9s %s\n", "", "tok/s", "vs plain", "tok/pass", "kept",
              "roofline", "ids");
  for (bool repeats_text : {true, false}) {
    const std::vector<int32_t> ids = prompt(repeats_text);
    const std::vector<int32_t> plain = generate(engine, ids, nullptr, k).ids;
    // The answer the checks give, for the oracle: from its own runs, until they agree.
    std::vector<int32_t> answer = plain;
    for (int round = 0; round < 4; ++round) {
      std::vector<int32_t> truth = ids;
      truth.insert(truth.end(), answer.begin(), answer.end());
      Oracle right(truth, 0);
      const std::vector<int32_t> got = generate(engine, ids, &right, k).ids;
      if (got == answer) break;
      answer = got;
    }
    std::vector<int32_t> truth = ids;
    truth.insert(truth.end(), answer.begin(), answer.end());
    struct Side {
      const char* name;
      std::function<std::unique_ptr<llm::Drafter>()> drafter;
      std::vector<Generation> runs;
    };
    std::vector<Side> sides{
        {"plain", [] { return nullptr; }, {}},
        {"prompt lookup", [] { return std::make_unique<llm::PromptLookup>(); }, {}},
        {"oracle, every guess right", [&] { return std::make_unique<Oracle>(truth, 0); }, {}},
        {"oracle, every second guess off", [&] { return std::make_unique<Oracle>(truth, 2); }, {}},
    };
    // Side by side, round after round: the bandwidth of a shared machine moves from minute to
    // minute, and each side meets the same.
    for (int r = 0; r < repeats; ++r) {
      for (Side& side : sides) {
        const std::unique_ptr<llm::Drafter> drafter = side.drafter();
        side.runs.push_back(generate(engine, ids, drafter.get(), k));
      }
    }
    std::printf("%s prompt:\n", repeats_text ? "A repeating" : "A non-repeating");
    auto tok_s = [](const Side& side) {
      std::vector<double> v;
      for (const Generation& g : side.runs) v.push_back(g.tok_s);
      return median_of(v);
    };
    const double base = tok_s(sides[0]);
    for (const Side& side : sides) {
      const Generation& g = side.runs.back();
      std::printf(
          "  %-32s %9.2f %8.2fx %11.2f %10s %8.2fx %s\n", side.name, tok_s(side),
          tok_s(side) / base, g.tok_per_pass,
          g.stats.drafted ? fmt::format("{}/{}", g.stats.accepted, g.stats.drafted).c_str() : "-",
          tok_s(side) / roofline, same_as(g.ids, plain).c_str());
    }
  }
}

namespace {
const Register kSpeculate{"speculate",
                          "speculative decoding on the 1B-shaped checkpoint: a check's cost, "
                          "and generation with prompt lookup and with an oracle's guesses",
                          speculate_bench};

}  // namespace
}  // namespace prism::bench
