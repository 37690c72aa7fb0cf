// The gated delta rule composite: its kernel in both forms against the recurrence computed
// directly in double precision, against its decompositions (check_platforms), the chunked
// form against the recurrent one, padding that leaves the state alone, and bad operands.
#include <cmath>
#include <random>

#include "prism/backends/registry.h"
#include "prism/nn/nn.h"
#include "tests/unit/platforms.h"

namespace prism {
namespace {

using testing::check_platforms;
using testing::expect_values;
using testing::f32;
using testing::S;

struct Sizes {
  int64_t batch, key_heads, heads, len, dk, dv;
};

// Operands shaped as a Gated DeltaNet layer makes them: unit-length keys and queries, beta in
// (0, 1), decays exp(g) in (0, 1), a non-zero starting state.
struct Operands {
  Sizes n;
  HostBuffer q, k, v, g, beta, state;
};

Operands operands(const Sizes& n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  auto values = [&](size_t count) {
    std::vector<float> x(count);
    for (float& e : x) e = normal(rng);
    return x;
  };
  auto unit_rows = [&](size_t rows, int64_t width) {
    std::vector<float> x = values(rows * width);
    for (size_t r = 0; r < rows; ++r) {
      double sq = 0;
      for (int64_t i = 0; i < width; ++i) sq += x[r * width + i] * x[r * width + i];
      for (int64_t i = 0; i < width; ++i) x[r * width + i] /= static_cast<float>(std::sqrt(sq));
    }
    return x;
  };
  std::vector<float> beta = values(n.batch * n.heads * n.len), g = values(beta.size());
  for (float& b : beta) b = 1 / (1 + std::exp(-b));
  for (float& x : g) x = -std::log1p(std::exp(x));
  const size_t qk = n.batch * n.key_heads * n.len;
  return {
      n,
      f32(S({{"b", n.batch}, {"h", n.key_heads}, {"s", n.len}, {"dk", n.dk}}), unit_rows(qk, n.dk)),
      f32(S({{"b", n.batch}, {"h", n.key_heads}, {"s", n.len}, {"dk", n.dk}}), unit_rows(qk, n.dk)),
      f32(S({{"b", n.batch}, {"h", n.heads}, {"s", n.len}, {"dv", n.dv}}),
          values(n.batch * n.heads * n.len * n.dv)),
      f32(S({{"b", n.batch}, {"h", n.heads}, {"s", n.len}}), g),
      f32(S({{"b", n.batch}, {"h", n.heads}, {"s", n.len}}), beta),
      f32(S({{"b", n.batch}, {"h", n.heads}, {"dk", n.dk}, {"dv", n.dv}}),
          values(n.batch * n.heads * n.dk * n.dv))};
}

// The recurrence, token by token, in double: outputs {b,h,s,dv} then final states {b,h,dk,dv}.
std::pair<std::vector<double>, std::vector<double>> reference(const Operands& x) {
  const Sizes& n = x.n;
  std::vector<double> q = x.q.to_f64(), k = x.k.to_f64(), v = x.v.to_f64(), g = x.g.to_f64();
  std::vector<double> beta = x.beta.to_f64(), state = x.state.to_f64();
  std::vector<double> out(n.batch * n.heads * n.len * n.dv);
  for (int64_t b = 0; b < n.batch; ++b) {
    for (int64_t h = 0; h < n.heads; ++h) {
      int64_t bh = b * n.heads + h, kh = b * n.key_heads + h / (n.heads / n.key_heads);
      double* s = &state[bh * n.dk * n.dv];
      for (int64_t t = 0; t < n.len; ++t) {
        const double* kt = &k[(kh * n.len + t) * n.dk];
        const double* qt = &q[(kh * n.len + t) * n.dk];
        double decay = std::exp(g[bh * n.len + t]), bt = beta[bh * n.len + t];
        for (int64_t i = 0; i < n.dk * n.dv; ++i) s[i] *= decay;
        for (int64_t e = 0; e < n.dv; ++e) {
          double kv = 0;
          for (int64_t i = 0; i < n.dk; ++i) kv += s[i * n.dv + e] * kt[i];
          double delta = bt * (v[(bh * n.len + t) * n.dv + e] - kv);
          for (int64_t i = 0; i < n.dk; ++i) s[i * n.dv + e] += kt[i] * delta;
          double o = 0;
          for (int64_t i = 0; i < n.dk; ++i) o += s[i * n.dv + e] * qt[i];
          out[(bh * n.len + t) * n.dv + e] = o;
        }
      }
    }
  }
  return {out, state};
}

auto rule(int64_t chunk) {
  return [chunk](Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state) {
    auto r = nn::gated_delta_rule(q, k, v, g, beta, state, {.chunk = chunk});
    return std::vector<Tensor>{r.out, r.state};
  };
}

std::vector<HostBuffer> inputs(const Operands& x) { return {x.q, x.k, x.v, x.g, x.beta, x.state}; }

TEST(GatedDeltaRule, BothFormsMatchTheRecurrenceAndTheirDecompositions) {
  // Grouped value heads (two per key head), a batch tag, a length that no chunk divides.
  Operands x = operands({.batch = 2, .key_heads = 2, .heads = 4, .len = 11, .dk = 8, .dv = 6}, 1);
  auto [want_out, want_state] = reference(x);
  for (int64_t chunk : {0, 4, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    std::vector<HostBuffer> got = check_platforms(rule(chunk), inputs(x), 1e-5);
    EXPECT_EQ(got[0].shape().str(), "f32{b=2,h=4,s=11,dv=6}");
    EXPECT_EQ(got[1].shape().str(), "f32{b=2,h=4,dk=8,dv=6}");
    expect_values(got[0], want_out, 1e-5);
    expect_values(got[1], want_state, 1e-5);
  }
}

TEST(GatedDeltaRule, ChunkedEqualsRecurrentOverManyChunks) {
  Operands x = operands({.batch = 1, .key_heads = 1, .heads = 2, .len = 150, .dk = 16, .dv = 8}, 2);
  std::vector<HostBuffer> recurrent = run(rule(0), inputs(x));
  std::vector<HostBuffer> chunked = run(rule(64), inputs(x));
  expect_values(chunked[0], recurrent[0].to_f64(), 1e-4);
  expect_values(chunked[1], recurrent[1].to_f64(), 1e-4);
}

// Sizes the chunked kernel's vector code takes in blocks and in tails: keys of 32 values (two
// 16 x 16 transposes a row of chunks), values of 147 (a row of D as 8 vectors, then 1, then
// single values), a last chunk of 36 tokens; in f32 and f64 (8 x 8 transposes).
TEST(GatedDeltaRule, ChunkedEqualsRecurrentAtWideHeads) {
  Operands x =
      operands({.batch = 1, .key_heads = 1, .heads = 2, .len = 100, .dk = 32, .dv = 147}, 4);
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(name(dtype));
    std::vector<HostBuffer> in = inputs(x);
    for (HostBuffer& b : in) b = b.convert(dtype);
    std::vector<HostBuffer> recurrent = run(rule(0), in);
    std::vector<HostBuffer> chunked = run(rule(64), in);
    expect_values(chunked[0], recurrent[0].to_f64(), 1e-4);
    expect_values(chunked[1], recurrent[1].to_f64(), 1e-4);
  }
}

TEST(GatedDeltaRule, PaddingWithZeroGateAndBetaLeavesTheState) {
  // The first 5 of 9 tokens are real; the rest have g = 0 and beta = 0.
  Operands x = operands({.batch = 1, .key_heads = 1, .heads = 2, .len = 9, .dk = 4, .dv = 4}, 3);
  Operands real = operands({.batch = 1, .key_heads = 1, .heads = 2, .len = 5, .dk = 4, .dv = 4}, 3);
  auto first5 = [](const HostBuffer& full, const HostBuffer& like) {
    std::vector<double> f = full.to_f64();
    std::vector<float> out;
    int64_t heads = like.shape().size("h"), row = like.numel() / heads / 5, len = 9;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < 5 * row; ++i) out.push_back(static_cast<float>(f[h * len * row + i]));
    return f32(like.shape(), out);
  };
  real.q = first5(x.q, real.q), real.k = first5(x.k, real.k), real.v = first5(x.v, real.v);
  real.g = first5(x.g, real.g), real.beta = first5(x.beta, real.beta), real.state = x.state;
  std::vector<float> g(x.g.numel()), beta(x.beta.numel());
  std::vector<double> g0 = x.g.to_f64(), b0 = x.beta.to_f64();
  for (size_t i = 0; i < g.size(); ++i) {
    bool pad = i % 9 >= 5;
    g[i] = pad ? 0 : static_cast<float>(g0[i]);
    beta[i] = pad ? 0 : static_cast<float>(b0[i]);
  }
  x.g = f32(x.g.shape(), g), x.beta = f32(x.beta.shape(), beta);
  std::vector<double> want = reference(real).second;
  for (int64_t chunk : {0, 4}) {
    expect_values(check_platforms(rule(chunk), inputs(x), 1e-5)[1], want, 1e-5);
  }
}

TEST(GatedDeltaRule, BadOperandsGiveClearErrors) {
  Operands x = operands({.batch = 1, .key_heads = 2, .heads = 4, .len = 3, .dk = 4, .dv = 2}, 4);
  Operands odd = operands({.batch = 1, .key_heads = 3, .heads = 3, .len = 3, .dk = 4, .dv = 2}, 4);
  std::vector<HostBuffer> in = inputs(x);
  in[0] = in[1] = odd.q;  // 3 key heads for 4 value heads
  EXPECT_EQ(testing::error_of([&] { run(rule(0), in); }),
            "gated_delta_rule: 4 value heads (v, g, beta, state) need a multiple of the 3 key "
            "heads of q and k; got g {b=1,h=4,s=3}, beta {b=1,h=4,s=3}, state "
            "{b=1,h=4,dk=4,dv=2}");
  in = inputs(x);
  in[5] = odd.v;  // a state without dk
  EXPECT_EQ(testing::error_of([&] { run(rule(0), in); }),
            "gated_delta_rule: state {b=1,h=3,s=3,dv=2} needs the batch tags of v "
            "{b=1,h=4,s=3,dv=2} and \"h\", \"dk\", \"dv\"");
}

}  // namespace
}  // namespace prism
