// What Qwen 3.5's multi-token prediction head costs (prism-bench mtp), at Qwen3.5-0.8B's shapes
// in bf16 on the platform given with --platform (default the CPU), on uninitialized weights (the
// speed does not depend on their values): a decoding step without the head and with its states
// kept, one step of the head, and checks of k guesses, each the median of --repeats runs. Then
// what speculative decoding with the head gives, from those costs, at a range of acceptance
// rates: a step of k guesses costs k steps of the head and a check of k, and keeps on average
// a + a^2 + ... + a^k guesses (a the chance that a guess is right when the ones before it
// were) and the model's own token after them.
//
//   prism-bench mtp [--platform=NAME] [--repeats=N]
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <vector>

#include "bench/bench.h"
#include "prism/llm/engine.h"
#include "prism/runtime/sharded.h"

namespace prism::bench {
namespace {

constexpr int64_t kSeqlen = 1024;
constexpr int32_t kAt = 512;  // the position the steps run at
constexpr int64_t kMostGuesses = 4;

// A model's programs on one device with their weights and states, uninitialized.
class Steps {
 public:
  Steps(Platform& on, const models::CausalLM& model) : on_(on), model_(model) {
    specs_ = model.state_specs(kSeqlen);
    for (const models::StateSpec& s : specs_) states_.push_back(on.allocate(s.shape));
  }

  // A step over a window of `window` tokens returning the logits `which` says.
  ShardedExecutable& step(int64_t window, models::Logits which) {
    auto key = std::pair{window, which};
    auto it = steps_.find(key);
    if (it == steps_.end()) {
      it = steps_
               .emplace(key, llm::compile_sharded_step(on_, model_, window, kSeqlen, Mesh(),
                                                       nullptr, which))
               .first;
      add_weights(it->second);
    }
    return it->second;
  }
  ShardedExecutable& draft() {
    if (!draft_) {
      draft_ = llm::compile_draft_step(on_, model_, kSeqlen, Mesh());
      add_weights(*draft_);
    }
    return *draft_;
  }

  double run_step(int64_t window, models::Logits which, int repeats) {
    ShardedExecutable& exe = step(window, which);
    return median_seconds(
        [&] {
          std::vector<std::vector<Buffer>> in(1);
          in[0] = {on_.upload(HostBuffer(Shape(DType::i32, {{"s", window}}))), scalar(kAt),
                   scalar(static_cast<int32_t>(window - 1))};
          in[0].insert(in[0].end(), states_.begin(), states_.end());
          std::vector<std::vector<Buffer>> out = exe.call(weights_, in);
          states_.assign(out[0].begin() + 1, out[0].end());
        },
        repeats);
  }
  double run_draft(int repeats) {
    ShardedExecutable& exe = draft();
    const size_t head_first = specs_.size() - model_.draft_states();  // its states
    return median_seconds(
        [&] {
          std::vector<std::vector<Buffer>> in(1);
          in[0] = {on_.upload(HostBuffer(Shape(DType::i32, {{"s", 1}}))), scalar(kAt)};
          in[0].insert(in[0].end(), states_.begin() + static_cast<std::ptrdiff_t>(head_first),
                       states_.end());
          std::vector<std::vector<Buffer>> out = exe.call(weights_, in);
          std::copy(out[0].begin() + 1, out[0].end(),
                    states_.begin() + static_cast<std::ptrdiff_t>(head_first));
        },
        repeats);
  }

 private:
  Buffer scalar(int32_t v) {
    return on_.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {v}));
  }
  // The program's weights not allocated yet, then every weight in its layouts.
  void add_weights(const ShardedExecutable& exe) {
    weights_.resize(1);
    for (const auto& p : exe.parameters()) {
      if (!weights_[0].contains(p.name)) weights_[0].emplace(p.name, on_.allocate(p.shape));
    }
    weights_ = exe.prepare(std::move(weights_));
  }

  Platform& on_;
  const models::CausalLM& model_;
  std::vector<models::StateSpec> specs_;
  std::vector<Buffer> states_;
  std::vector<NamedBuffers> weights_;
  std::map<std::pair<int64_t, models::Logits>, ShardedExecutable> steps_;
  std::optional<ShardedExecutable> draft_;
};

void mtp_bench() {
  Platform& on = platform();
  const int repeats = std::stoi(option("repeats", "9"));
  PRISM_CHECK(repeats >= 1, "mtp: --repeats must be at least 1");
  const models::Qwen3_5 plain(qwen3_5_0_8b(), DType::bf16);
  models::Qwen3_5 headed(qwen3_5_0_8b(), DType::bf16);
  headed.use_draft_head();

  Steps without(on, plain);
  const double step = without.run_step(1, models::Logits::last, repeats);
  Steps with(on, headed);
  const double kept = with.run_step(1, models::Logits::last, repeats);
  const double head = with.run_draft(repeats);
  std::vector<double> checks;  // checks[k]: the check of k guesses (a window of k + 1)
  checks.push_back(kept);
  for (int64_t k = 1; k <= kMostGuesses; ++k) {
    checks.push_back(with.run_step(k + 1, models::Logits::every, repeats));
  }

  // The device by name (on the CPU: the model, its threads and kernels).
  const std::string where = fmt::format("{}: {}", on.name(), on.devices().at(0).name);
  std::printf("Qwen3.5 0.8B shapes in bf16, %s, at position %d of %lld; medians of %d\n",
              where.c_str(), kAt, static_cast<long long>(kSeqlen), repeats);
  std::printf("%-34s %9s %10s\n", "step", "ms", "vs plain");
  auto row = [&](const std::string& what, double s) {
    std::printf("%-34s %9.2f %9.2fx\n", what.c_str(), 1e3 * s, s / step);
  };
  row("decoding step, no head", step);
  row("decoding step, the head's states", kept);
  row("one step of the head", head);
  for (int64_t k = 1; k <= kMostGuesses; ++k) {
    row(fmt::format("check of {} guess{}", k, k > 1 ? "es" : ""), checks[k]);
  }
  std::printf(
      "\nSpeculation with the head, k guesses a step (k steps of the head, a check of k), "
      "against plain decoding,\nfrom the costs above, where a guess is right with chance a "
      "when the ones before it were:\n");
  std::printf("%-6s", "a");
  for (int64_t k = 1; k <= kMostGuesses; ++k) std::printf("%9s", fmt::format("k={}", k).c_str());
  std::printf("\n");
  for (double a : {0.5, 0.6, 0.7, 0.8, 0.9}) {
    std::printf("%-6.1f", a);
    for (int64_t k = 1; k <= kMostGuesses; ++k) {
      double tokens = 1, p = 1;
      for (int64_t i = 0; i < k; ++i) tokens += p *= a;
      const double cost = static_cast<double>(k) * head + checks[k];
      std::printf("%8.2fx", tokens / cost * step);
    }
    std::printf("\n");
  }
}

const Register kMtp{"mtp", "Qwen 3.5's multi-token prediction head: its costs and what it gives",
                    mtp_bench};

}  // namespace
}  // namespace prism::bench
