// prism/backends/cpu/gemm.h: every result is the f32 fused multiply-add chain over k in order
// (std::fma), bit for bit, rounded to bf16 as f32_to_bf16 rounds it; for weights stored {n, k},
// {k, n}, in weight_layout.h's blocks or with other strides, strided activations and outputs, any
// M, K and N (panels, micro- panels and blocks of k cut short), any split of the columns between
// calls; nothing outside the columns asked for is written. With the portable micro-kernel and under
// every SIMD target this binary has and this CPU runs.
#include "prism/backends/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"

namespace prism {
namespace {

namespace simd = cpu::simd;

// Runs check(kernel) with the portable micro-kernel, then with the best one under every
// available SIMD target, then goes back to the target in use.
template <typename F>
void for_each_target(F&& check) {
  {
    SCOPED_TRACE("the portable micro-kernel");
    check(cpu::GemmKernel::portable);
  }
  const simd::Target before = simd::current();
  for (const simd::Target& t : simd::available()) {
    simd::use(t);
    SCOPED_TRACE("SIMD target " + t.name() + ", micro-kernel " + cpu::gemm_kernel_name());
    check(cpu::GemmKernel::best);
  }
  simd::use(before);
}

std::vector<uint16_t> random_bf16(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-6, 6);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(std::ldexp(normal(rng), scale(rng)));
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Case {
  int64_t M, K, N;
  bool weights_nk;       // stored {n, k}, else {k, n}
  bool blocked = false;  // {n, k} in weight_layout.h's blocks
};

// The reference: y[m][n] = fma chain over k in order, in f32.
std::vector<float> reference(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                             const Case& c) {
  std::vector<float> y(c.M * c.N);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < c.K; ++k) {
        const uint16_t wv = c.weights_nk ? w[n * c.K + k] : w[k * c.N + n];
        acc = std::fma(bf16_to_f32(x[m * c.K + k]), bf16_to_f32(wv), acc);
      }
      y[m * c.N + n] = acc;
    }
  return y;
}

std::vector<float> packed_lhs(const std::vector<uint16_t>& x, int64_t M, int64_t K) {
  std::vector<float> packed(cpu::gemm_lhs_floats(M, K), -1.0f);
  const int64_t panels = (M + cpu::kGemmPanelRows - 1) / cpu::kGemmPanelRows;
  // In two ranges, as two threads would write them.
  cpu::gemm_pack_lhs(x.data(), K, 1, M, K, 0, panels / 2, packed.data());
  cpu::gemm_pack_lhs(x.data(), K, 1, M, K, panels / 2, panels, packed.data());
  return packed;
}

// w as the product reads it: stored {n, k} or {k, n}, or {n, k} blocked (into `storage`).
cpu::GemmWeights weights_of(const std::vector<uint16_t>& w, const Case& c,
                            std::vector<uint16_t>& storage) {
  if (c.blocked) {
    storage.assign(w.size(), 0);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k) storage[cpu::blocked_index(n, k, c.K)] = w[n * c.K + k];
    return {storage.data(), 0, 0, c.K};
  }
  return c.weights_nk ? cpu::GemmWeights{w.data(), 1, c.K} : cpu::GemmWeights{w.data(), c.N, 1};
}

std::string name(const Case& c) {
  return "M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) +
         (c.blocked      ? " w blocked"
          : c.weights_nk ? " w {n, k}"
                         : " w {k, n}");
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (bool nk : {true, false}) {
    for (int64_t M : {1, 5, 6, 7, 13})
      for (int64_t K : {1, 7, 8, 9, 257})
        for (int64_t N : {1, 15, 16, 17, 130}) all.push_back({M, K, N, nk});
    // Several blocks of k, several passes over the panels, several pieces of columns.
    all.push_back({100, 520, 300, nk});
    all.push_back({97, 256, 129, nk});
  }
  // Blocked weights (n a multiple of 64, k of 32): one block, pieces of columns cut short,
  // several blocks of k.
  for (int64_t M : {1, 6, 13, 100})
    for (auto [K, N] : {std::pair<int64_t, int64_t>{32, 64}, {96, 192}, {544, 320}})
      all.push_back({M, K, N, true, true});
  return all;
}

TEST(Gemm, SumsAreFmaChainsInTheOrderOfK) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const auto x = random_bf16(c.M * c.K, rng), w = random_bf16(c.K * c.N, rng);
    const auto want = reference(x, w, c);
    const auto packed = packed_lhs(x, c.M, c.K);
    std::vector<uint16_t> storage;
    const cpu::GemmWeights weights = weights_of(w, c, storage);
    for_each_target([&](cpu::GemmKernel kernel) {
      std::vector<float> y(c.M * c.N, NAN);
      cpu::gemm_columns(packed.data(), c.M, c.K, weights, 0, c.N, {y.data(), c.N, false}, kernel);
      int wrong = 0;
      for (int64_t i = 0; i < c.M * c.N && wrong < 5; ++i) {
        if (bits(y[i]) != bits(want[i])) {
          ADD_FAILURE() << "y[" << i / c.N << "][" << i % c.N << "] = " << y[i] << ", want "
                        << want[i];
          ++wrong;
        }
      }
    });
  }
}

TEST(Gemm, Bf16ResultsAreTheSumsRounded) {
  std::mt19937 rng(8);
  for (const Case& c :
       {Case{13, 300, 40, true}, Case{7, 33, 130, false}, Case{20, 160, 256, true, true}}) {
    SCOPED_TRACE(name(c));
    const auto x = random_bf16(c.M * c.K, rng), w = random_bf16(c.K * c.N, rng);
    const auto want = reference(x, w, c);
    const auto packed = packed_lhs(x, c.M, c.K);
    std::vector<uint16_t> storage;
    const cpu::GemmWeights weights = weights_of(w, c, storage);
    for_each_target([&](cpu::GemmKernel kernel) {
      std::vector<uint16_t> y(c.M * c.N, 0xffff);
      cpu::gemm_columns(packed.data(), c.M, c.K, weights, 0, c.N, {y.data(), c.N, true}, kernel);
      for (int64_t i = 0; i < c.M * c.N; ++i) ASSERT_EQ(y[i], f32_to_bf16(want[i])) << "at " << i;
    });
  }
}

// Columns split between calls at odd places, into an output with rows wider than N, from
// activations with rows wider than K: the same bits, and nothing written outside.
TEST(Gemm, ColumnRangesStridesAndGapsKeepTheBits) {
  std::mt19937 rng(9);
  for (const Case& c : {Case{20, 270, 150, true}, Case{20, 288, 320, true, true}}) {
    SCOPED_TRACE(name(c));
    const int64_t ldx = c.K + 5, ldy = c.N + 3;
    const auto x_dense = random_bf16(c.M * c.K, rng), w = random_bf16(c.K * c.N, rng);
    std::vector<uint16_t> x(c.M * ldx, f32_to_bf16(1e30f));  // gaps that would show
    for (int64_t m = 0; m < c.M; ++m)
      std::memcpy(&x[m * ldx], &x_dense[m * c.K], c.K * sizeof(uint16_t));
    const auto want = reference(x_dense, w, c);
    std::vector<float> packed(cpu::gemm_lhs_floats(c.M, c.K));
    cpu::gemm_pack_lhs(x.data(), ldx, 1, c.M, c.K, 0, (c.M + 5) / 6, packed.data());
    std::vector<uint16_t> storage;
    const cpu::GemmWeights weights = weights_of(w, c, storage);
    for_each_target([&](cpu::GemmKernel kernel) {
      std::vector<float> y(c.M * ldy, -7.0f);
      for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 3},
                            {3, 37},
                            {37, 38},
                            {38, 128},
                            {128, 150},
                            {150, c.N}}) {
        cpu::gemm_columns(packed.data(), c.M, c.K, weights, n0, n1, {y.data(), ldy, false}, kernel);
      }
      for (int64_t m = 0; m < c.M; ++m) {
        for (int64_t n = 0; n < ldy; ++n) {
          const float got = y[m * ldy + n];
          if (n < c.N) {
            ASSERT_EQ(bits(got), bits(want[m * c.N + n])) << m << ", " << n;
          } else {
            ASSERT_EQ(got, -7.0f) << "wrote outside its columns at " << m << ", " << n;
          }
        }
      }
    });
  }
}

// Activations read down their columns (a transposed view) and weights with neither stride 1.
TEST(Gemm, AnyStrides) {
  std::mt19937 rng(10);
  const Case c{9, 40, 21, true};
  const auto x = random_bf16(c.M * c.K, rng), w = random_bf16(c.K * c.N, rng);
  const auto want = reference(x, w, c);
  std::vector<uint16_t> xt(c.K * c.M);  // x stored {k, m}
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t k = 0; k < c.K; ++k) xt[k * c.M + m] = x[m * c.K + k];
  std::vector<uint16_t> w2(2 * c.N * c.K, 0);  // w {n, k} with every other value skipped
  for (int64_t i = 0; i < c.N * c.K; ++i) w2[2 * i] = w[i];
  std::vector<float> packed(cpu::gemm_lhs_floats(c.M, c.K));
  cpu::gemm_pack_lhs(xt.data(), 1, c.M, c.M, c.K, 0, 2, packed.data());
  for_each_target([&](cpu::GemmKernel kernel) {
    std::vector<float> y(c.M * c.N);
    cpu::gemm_columns(packed.data(), c.M, c.K, {w2.data(), 2, 2 * c.K}, 0, c.N,
                      {y.data(), c.N, false}, kernel);
    for (int64_t i = 0; i < c.M * c.N; ++i) ASSERT_EQ(bits(y[i]), bits(want[i])) << "at " << i;
  });
}

}  // namespace
}  // namespace prism
