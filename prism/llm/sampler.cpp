#include "prism/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "prism/core/error.h"

namespace prism::llm {

Sampler::Sampler(SamplerOptions options) : o_(options), rng_(options.seed) {
  PRISM_CHECK(o_.temperature >= 0, "sampler: temperature must be >= 0, got {}", o_.temperature);
  PRISM_CHECK(o_.top_k >= 0, "sampler: top-k must be >= 0, got {}", o_.top_k);
  PRISM_CHECK(o_.top_p > 0 && o_.top_p <= 1, "sampler: top-p must be in (0, 1], got {}", o_.top_p);
  PRISM_CHECK(o_.min_p >= 0 && o_.min_p < 1, "sampler: min-p must be in [0, 1), got {}", o_.min_p);
  PRISM_CHECK(o_.repetition_penalty > 0, "sampler: repetition penalty must be > 0, got {}",
              o_.repetition_penalty);
  PRISM_CHECK(std::abs(o_.frequency_penalty) <= 2,
              "sampler: frequency penalty must be in [-2, 2], got {}", o_.frequency_penalty);
  PRISM_CHECK(std::abs(o_.presence_penalty) <= 2,
              "sampler: presence penalty must be in [-2, 2], got {}", o_.presence_penalty);
  for (const auto& [token, bias] : o_.logit_bias) {
    PRISM_CHECK(token >= 0, "sampler: logit bias for token {}: ids are >= 0", token);
    PRISM_CHECK(std::abs(bias) <= 100,
                "sampler: logit bias {} for token {}: must be in [-100, 100]", bias, token);
  }
}

void Sampler::adjust(std::span<const int32_t> history) {
  const size_t vocab = scratch_.size();
  for (const auto& [token, bias] : o_.logit_bias) {
    if (static_cast<size_t>(token) < vocab) scratch_[token] += bias;
  }
  const bool repeat = o_.repetition_penalty != 1;
  const bool counted = o_.frequency_penalty != 0 || o_.presence_penalty != 0;
  if (!repeat && !counted) return;
  seen_.resize(vocab, 0);
  count_.resize(vocab, 0);
  touched_.clear();
  for (size_t i = 0; i < history.size(); ++i) {
    const int32_t t = history[i];
    if (t < 0 || static_cast<size_t>(t) >= vocab) continue;
    if (!seen_[t]) {
      seen_[t] = 1;
      touched_.push_back(t);
    }
    count_[t] += i >= prompt_tokens_;
  }
  const auto rp = static_cast<float>(o_.repetition_penalty);
  for (const int32_t t : touched_) {
    float& l = scratch_[t];
    // Hugging Face's, once per distinct token however often it occurs.
    if (repeat) l = l > 0 ? l / rp : l * rp;
    if (count_[t] > 0) {
      l -= static_cast<float>(count_[t] * o_.frequency_penalty + o_.presence_penalty);
    }
    seen_[t] = 0;
    count_[t] = 0;
  }
}

void Sampler::candidates(std::span<const float> logits, std::span<const int32_t> history) {
  PRISM_CHECK(!logits.empty(), "sampler: no logits");
  scratch_.assign(logits.begin(), logits.end());
  adjust(history);
  if (o_.temperature == 0) {
    order_.assign(1, static_cast<int32_t>(std::max_element(scratch_.begin(), scratch_.end()) -
                                          scratch_.begin()));
    p_.assign(1, 1.0);
    return;
  }
  // Candidates by descending logit; top-k cuts the list.
  size_t n = scratch_.size();
  size_t k = o_.top_k > 0 ? std::min<size_t>(o_.top_k, n) : n;
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  };
  if (k < n) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  order_.resize(k);
  std::vector<double>& p = p_;
  p.resize(k);
  double top = scratch_[order_[0]] / o_.temperature, sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp(scratch_[order_[i]] / o_.temperature - top);
  for (double& x : p) x /= sum;
  // min-p: keep tokens with at least min_p times the best one's probability.
  size_t keep = k;
  if (o_.min_p > 0) {
    while (keep > 1 && p[keep - 1] < o_.min_p * p[0]) --keep;
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (o_.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += p[i];
      if (mass >= o_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  order_.resize(keep);
  p.resize(keep);
}

int32_t Sampler::draw(size_t skip) {
  double total = 0;
  for (size_t i = 0; i < p_.size(); ++i) total += i == skip ? 0 : p_[i];
  double r = std::uniform_real_distribution<double>(0, total)(rng_);
  size_t chosen = p_.size();
  for (size_t i = 0; i < p_.size(); ++i) {
    if (i == skip) continue;
    chosen = i;
    r -= p_[i];
    if (r <= 0) break;
  }
  return order_[chosen];
}

int32_t Sampler::next(std::span<const float> logits, std::span<const int32_t> history) {
  candidates(logits, history);
  if (order_.size() == 1) return order_[0];
  return draw(p_.size());
}

int32_t Sampler::check(std::span<const float> logits, std::span<const int32_t> history,
                       int32_t draft, bool& kept) {
  candidates(logits, history);
  const size_t at = std::find(order_.begin(), order_.end(), draft) - order_.begin();
  kept = at < order_.size();
  if (order_.size() == 1) return order_[0];
  if (kept) {
    // The rejection rule for a guess proposed with certainty: keep it with probability p(draft);
    // else draw from p without it, normalized (max(p - q, 0) for q all on the guess).
    const double total = std::accumulate(p_.begin(), p_.end(), 0.0);
    kept = std::uniform_real_distribution<double>(0, total)(rng_) < p_[at];
    if (kept) return draft;
  }
  return draw(at);
}

}  // namespace prism::llm
