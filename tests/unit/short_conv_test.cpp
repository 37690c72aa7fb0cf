// The causal short convolution composite (LFM 2): the kernel against a direct computation and
// against its decomposition (check_platforms runs both), the carried state, and bad input.
#include <random>
#include <span>
#include <utility>

#include "prism/backends/registry.h"
#include "prism/nn/nn.h"
#include "tests/unit/platforms.h"

namespace prism {
namespace {

using testing::check_platforms;
using testing::expect_values;
using testing::f32;
using testing::i32;
using testing::S;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> values(const HostBuffer& h) {
  std::span<const float> v = h.as<float>();
  return {v.begin(), v.end()};
}

// Direct computation over x {s, d} and state {k, d} with weight {d, k+1}: y and the k inputs of
// concat(state, x) that end at x's index `last`.
struct Direct {
  std::vector<double> y, state;
};
Direct direct(const std::vector<float>& x, const std::vector<float>& state,
              const std::vector<float>& w, int64_t s, int64_t d, int64_t k, int64_t last) {
  std::vector<double> all(state.begin(), state.end());
  all.insert(all.end(), x.begin(), x.end());  // {k + s, d}
  Direct r;
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j <= k; ++j) acc += w[c * (k + 1) + j] * all[(t + j) * d + c];
      r.y.push_back(acc);
    }
  }
  r.state.assign(all.begin() + (last + 1) * d, all.begin() + (last + 1 + k) * d);
  return r;
}

TEST(ShortConv, MatchesDirectComputationAndKeepsTheWindowEndingAtLast) {
  const int64_t s = 5, d = 3, k = 2;
  auto x = f32(S({{"s", s}, {"d", d}}), random_values(s * d, 1));
  auto state = f32(S({{"s", k}, {"d", d}}), random_values(k * d, 2));
  auto w = f32(S({{"d", d}, {"tap", k + 1}}), random_values(d * (k + 1), 3));
  for (int32_t last : {4, 2, 0}) {  // the tokens after `last` are padding
    SCOPED_TRACE(last);
    auto out = check_platforms(
        [](Tensor x, Tensor st, Tensor w, Tensor last) {
          auto [y, next] = nn::short_conv(x, st, w, last);
          return std::pair{y, next};
        },
        {x, state, w, i32(Shape::scalar(DType::i32), {last})});
    Direct want = direct(values(x), values(state), values(w), s, d, k, last);
    EXPECT_EQ(out[0].shape().str(), "f32{s=5,d=3}");
    EXPECT_EQ(out[1].shape().str(), "f32{s=2,d=3}");
    expect_values(out[0], want.y);
    expect_values(out[1], want.state);
  }
  // Without `last`, the state is the window's end; a window shorter than the state works too.
  auto one = f32(S({{"s", 1}, {"d", d}}), random_values(d, 4));
  auto out = check_platforms(
      [](Tensor x, Tensor st, Tensor w) {
        auto [y, next] = nn::short_conv(x, st, w);
        return std::pair{y, next};
      },
      {one, state, w});
  Direct want = direct(values(one), values(state), values(w), 1, d, k, 0);
  expect_values(out[0], want.y);
  expect_values(out[1], want.state);
}

TEST(ShortConv, BatchTagsInAnyOrder) {
  const int64_t b = 2, s = 4, d = 3, k = 3;
  auto x = f32(S({{"d", d}, {"b", b}, {"s", s}}), random_values(b * s * d, 5));
  auto state = f32(S({{"b", b}, {"s", k}, {"d", d}}), random_values(b * k * d, 6));
  auto w = f32(S({{"tap", k + 1}, {"d", d}}), random_values(d * (k + 1), 7));
  auto out = check_platforms(
      [](Tensor x, Tensor st, Tensor w) {
        auto [y, next] = nn::short_conv(x, st, w);
        return std::pair{y, next};
      },
      {x, state, w});
  EXPECT_EQ(out[0].shape().str(), "f32{d=3,b=2,s=4}");
  EXPECT_EQ(out[1].shape().str(), "f32{d=3,b=2,s=3}");
  // Batch 1, rearranged to {s, d}, against the direct computation.
  auto pick = [&](const HostBuffer& h, int64_t len, bool ds_order) {
    std::vector<float> v = values(h), r;
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        r.push_back(ds_order ? v[(c * b + 1) * len + t] : v[(1 * len + t) * d + c]);
      }
    }
    return r;
  };
  std::vector<float> wt(d * (k + 1));  // {d, tap}
  for (int64_t j = 0; j <= k; ++j) {
    for (int64_t c = 0; c < d; ++c) wt[c * (k + 1) + j] = values(w)[j * d + c];
  }
  Direct want = direct(pick(x, s, true), pick(state, k, false), wt, s, d, k, s - 1);
  std::vector<float> y1 = pick(out[0], s, true), st1 = pick(out[1], k, true);
  for (size_t i = 0; i < want.y.size(); ++i) EXPECT_NEAR(y1[i], want.y[i], 1e-5) << i;
  for (size_t i = 0; i < want.state.size(); ++i) EXPECT_NEAR(st1[i], want.state[i], 1e-5) << i;
}

// A sequence in one window equals the same sequence in pieces with the state carried, padded
// windows included: the state is what makes decoding incremental.
TEST(ShortConv, PiecesWithCarriedStateEqualOneWindow) {
  const int64_t s = 7, d = 4, k = 2;
  std::vector<float> xs = random_values(s * d, 8), w = random_values(d * (k + 1), 9);
  auto step = [&](const std::vector<float>& x, int64_t len, const std::vector<float>& state,
                  int32_t last) {
    return run(
        [](Tensor x, Tensor st, Tensor w, Tensor last) {
          auto [y, next] = nn::short_conv(x, st, w, last);
          return std::pair{y, next};
        },
        {f32(S({{"s", len}, {"d", d}}), x), f32(S({{"s", k}, {"d", d}}), state),
         f32(S({{"d", d}, {"tap", k + 1}}), w), i32(Shape::scalar(DType::i32), {last})});
  };
  std::vector<float> zeros(k * d, 0);
  std::vector<float> whole = values(step(xs, s, zeros, s - 1)[0]);
  // Pieces of 3, 1 and 3 tokens, each padded to a window of 4 with garbage.
  std::vector<float> state = zeros, pieces;
  const std::pair<int64_t, int64_t> windows[] = {{0, 3}, {3, 1}, {4, 3}};  // (first, tokens)
  for (auto [at, len] : windows) {
    std::vector<float> window(xs.begin() + at * d, xs.begin() + (at + len) * d);
    window.resize(4 * d, 1e3f);
    auto out = step(window, 4, state, len - 1);
    std::vector<float> y = values(out[0]);
    pieces.insert(pieces.end(), y.begin(), y.begin() + len * d);
    state = values(out[1]);
  }
  ASSERT_EQ(pieces.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(pieces[i], whole[i], 1e-5) << i;
}

TEST(ShortConv, HalfPrecisionComputesInF32) {
  const int64_t s = 3, d = 8, k = 2;
  auto x = f32(S({{"s", s}, {"d", d}}), random_values(s * d, 10));
  auto state = f32(S({{"s", k}, {"d", d}}), random_values(k * d, 11));
  auto w = f32(S({{"d", d}, {"tap", k + 1}}), random_values(d * (k + 1), 12));
  auto out = check_platforms(
      [](Tensor x, Tensor st, Tensor w) {
        auto bf = [](const Tensor& t) { return t.convert(DType::bf16); };
        return nn::short_conv(bf(x), bf(st), bf(w)).y.convert(DType::f32);
      },
      {x, state, w}, 1e-2);
  Direct want = direct(values(x), values(state), values(w), s, d, k, s - 1);
  expect_values(out[0], want.y, 5e-2);
}

TEST(ShortConv, BadInputGivesClearErrors) {
  auto error = [](Shape x, Shape st, Shape w) {
    return testing::error_of([&] {
      run([](Tensor x, Tensor st, Tensor w) { return nn::short_conv(x, st, w).y; },
          {HostBuffer(x), HostBuffer(st), HostBuffer(w)});
    });
  };
  EXPECT_EQ(error(S({{"s", 3}, {"d", 4}}), S({{"s", 1}, {"d", 4}}), S({{"d", 4}, {"tap", 3}})),
            "short_conv: state {s=1,d=4} must have the tags of x {s=3,d=4} with \"s\" of 2");
  EXPECT_EQ(error(S({{"s", 3}, {"d", 4}}), S({{"s", 2}, {"d", 4}}), S({{"d", 5}, {"tap", 3}})),
            "short_conv: weight {d=5,tap=3} must be {d=4, tap>=2}");
  EXPECT_EQ(error(S({{"s", 3}, {"d", 4}}), S({{"s", 0}, {"d", 4}}), S({{"d", 4}, {"tap", 1}})),
            "short_conv: weight {d=4,tap=1} must be {d=4, tap>=2}");
  EXPECT_EQ(error(S({{"s", 3}, {"c", 4}}), S({{"s", 2}, {"c", 4}}), S({{"c", 4}, {"tap", 3}})),
            "short_conv: x {s=3,c=4} needs tags \"s\" and \"d\"");
  EXPECT_EQ(error(S({{"s", 3}, {"d", 4}}), S({{"s", 2}, {"d", 4}}, DType::bf16),
                  S({{"d", 4}, {"tap", 3}})),
            "short_conv: x f32{s=3,d=4}, state bf16{s=2,d=4} and weight f32{d=4,tap=3} must share "
            "a dtype");
}

}  // namespace
}  // namespace prism
