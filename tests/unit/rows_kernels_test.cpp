// The kernels of batched decoding's products against sums in double: AMX's
// (prism/backends/cpu/amx_rows.h) for every number of rows a tile takes, weights blocked and
// as stored (with a last group of 16 rows past the groups of 64), k over several tiles; the
// FMA kernel for blocked weights (dot_rows.h) for every number of rows, k over several pieces
// and blocks prefetched one after the other; the vdpbf16ps kernel for blocked weights the same
// way, each row's sums bit for bit the one-row kernel's; the FMA kernel for weights as stored
// (f32_rows_plain) on every SIMD target, for every number of rows and more than it takes at
// once, k and the columns not a multiple of anything.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"

namespace prism::cpu {
namespace {

struct Data {
  int64_t n, k;
  std::vector<uint16_t> x, w;  // x {16, k}, w {n, k}, bf16

  std::vector<uint16_t> blocked() const {
    std::vector<uint16_t> b(w.size());
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) b[blocked_index(j, i, k)] = w[j * k + i];
    return b;
  }

  Data(int64_t n_, int64_t k_, int64_t rows = kAmxMaxRows)
      : n(n_), k(k_), x(rows * k_), w(n_ * k_) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (uint16_t& v : x) v = f32_to_bf16(normal(rng));
    for (uint16_t& v : w) v = f32_to_bf16(normal(rng));
  }
  double want(int64_t m, int64_t j) const {
    double s = 0;
    for (int64_t i = 0; i < k; ++i)
      s += double(bf16_to_f32(x[m * k + i])) * bf16_to_f32(w[j * k + i]);
    return s;
  }
  // f32 sums of k products of unit normals: well within 1e-4 of the exact sum.
  void expect(const std::vector<float>& out, int64_t rows, int64_t ldo) const {
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(out[m * ldo + j], want(m, j), 1e-4 * std::sqrt(double(k)))
            << "row " << m << " column " << j;
  }
};

TEST(AmxRows, BlockedWeights) {
  if (!amx_available()) GTEST_SKIP() << "this CPU or system has no AMX-BF16";
  const Data d(192, 96);
  const std::vector<uint16_t> blocked = d.blocked();
  for (int64_t rows = 1; rows <= kAmxMaxRows; ++rows) {
    SCOPED_TRACE(rows);
    std::vector<float> out(rows * (d.n + 8), NAN);
    amx_rows_blocked(d.x.data(), d.k, rows, blocked.data(), d.k, d.n / 64, out.data(), d.n + 8);
    d.expect(out, rows, d.n + 8);
  }
}

TEST(AmxRows, WeightsAsStored) {
  if (!amx_available()) GTEST_SKIP() << "this CPU or system has no AMX-BF16";
  const Data d(64 + 48, 128);  // a group of 64 rows, then three of 16
  for (int64_t rows = 1; rows <= kAmxMaxRows; ++rows) {
    SCOPED_TRACE(rows);
    std::vector<uint16_t> xp(rows * d.k);
    pack_rows_for_amx(d.x.data(), d.k, rows, d.k, xp.data());
    std::vector<float> out(rows * d.n, NAN);
    amx_rows_plain(xp.data(), rows, d.w.data(), d.k, d.k, d.n, out.data(), d.n);
    d.expect(out, rows, d.n);
  }
}

TEST(FmaRows, BlockedWeights) {
  const DotRowKernels dots = dot_row_kernels();
  if (!dots.f32_rows_blocked) GTEST_SKIP() << "weights are kept blocked only with AVX-512 BF16";
  const Data d(192, 640);  // three blocks; k in three pieces of 256, the last a half
  const std::vector<uint16_t> blocked = d.blocked();
  std::vector<float> x(d.x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(d.x[i]);
  for (int64_t rows = 1; rows <= kAmxMaxRows; ++rows) {
    SCOPED_TRACE(rows);
    std::vector<float> out(rows * (d.n + 8), NAN);
    dots.f32_rows_blocked(x.data(), d.k, rows, blocked.data(), d.k, d.n / 64, out.data(), d.n + 8);
    d.expect(out, rows, d.n + 8);
  }
}

TEST(Dpbf16Rows, BlockedWeightsGiveOneRowsBits) {
  const DotRowKernels dots = dot_row_kernels();
  if (!dots.bf16_rows_blocked) GTEST_SKIP() << "weights are kept blocked only with AVX-512 BF16";
  const Data d(192, 640);  // three blocks; k in three pieces of 256, the last a half
  const std::vector<uint16_t> blocked = d.blocked();
  // Each row alone through the one-row kernel: the bits every batch must give it.
  std::vector<float> alone(kAmxMaxRows * d.n);
  for (int64_t m = 0; m < kAmxMaxRows; ++m)
    dots.bf16_blocked(d.x.data() + m * d.k, blocked.data(), d.k, d.n / 64, alone.data() + m * d.n);
  for (int64_t rows = 1; rows <= kAmxMaxRows; ++rows) {
    SCOPED_TRACE(rows);
    const int64_t ldo = d.n + 8;
    std::vector<float> out(rows * ldo, NAN);
    dots.bf16_rows_blocked(d.x.data(), d.k, rows, blocked.data(), d.k, d.n / 64, out.data(), ldo);
    d.expect(out, rows, ldo);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t j = 0; j < d.n; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[m * ldo + j]),
                  std::bit_cast<uint32_t>(alone[m * d.n + j]))
            << "row " << m << " column " << j;
      }
      for (int64_t j = d.n; j < ldo; ++j) ASSERT_TRUE(std::isnan(out[m * ldo + j]));
    }
  }
}

TEST(FmaRows, WeightsAsStoredOnEveryTarget) {
  // k: four pieces of 256 and a part of one, with values past the last whole run of any
  // target's vectors; 37 columns, so that for_row_groups leaves a partial group; up to 19
  // rows of x, more than the 16 the kernel takes at once.
  const int64_t max_rows = 19;
  const Data d(37, 1100, max_rows);
  struct Restore {  // the target in use, also after a failure
    simd::Target before = simd::current();
    ~Restore() { simd::use(before); }
  } restore;
  for (const simd::Target& t : simd::available()) {
    SCOPED_TRACE(t.name());
    simd::use(t);
    const DotRowKernels dots = dot_row_kernels();
    ASSERT_NE(dots.f32_rows_plain, nullptr);
    std::vector<float> x(max_rows * plain_rows_stride(d.k));
    dots.pack_rows_plain(d.x.data(), d.k, max_rows, d.k, x.data());
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      SCOPED_TRACE(rows);
      std::vector<float> out(rows * (d.n + 3), NAN);
      dots.f32_rows_plain(x.data(), rows, d.w.data(), d.k, d.n, out.data(), d.n + 3);
      d.expect(out, rows, d.n + 3);
      for (int64_t m = 0; m < rows; ++m)  // nothing written between the rows
        for (int64_t j = d.n; j < d.n + 3; ++j) ASSERT_TRUE(std::isnan(out[m * (d.n + 3) + j]));
    }
  }
}

}  // namespace
}  // namespace prism::cpu
