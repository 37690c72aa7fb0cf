// The CPU kernels' SIMD targets (prism/backends/cpu/simd.h): every kernel family that is
// compiled once per target runs under every target this binary has and this CPU runs, and
// matches a double-precision reference, so that each compiled path is exercised.
#include "prism/backends/cpu/simd.h"

#include <cmath>
#include <random>

#include "prism/backends/cpu/dot_rows.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

namespace simd = cpu::simd;
using testing::error_of;
using testing::S;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The values rounded to bf16, and their bits.
std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
  return bits;
}
std::vector<float> widened(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(bits[i]);
  return v;
}

// Runs `check` once under every available target, then goes back to the one in use.
template <typename F>
void for_each_target(F&& check) {
  simd::Target before = simd::current();
  for (const simd::Target& t : simd::available()) {
    SCOPED_TRACE("SIMD target " + t.name());
    simd::use(t);
    EXPECT_EQ(simd::current(), t);
    check();
  }
  simd::use(before);
}

// a . b in double, and the sum of |a_i b_i| that bounds its rounding error in f32.
std::pair<double, double> dot_reference(const float* a, const float* b, int64_t k) {
  double sum = 0, magnitude = 0;
  for (int64_t i = 0; i < k; ++i) {
    sum += double(a[i]) * b[i];
    magnitude += std::abs(double(a[i]) * b[i]);
  }
  return {sum, magnitude};
}

TEST(SimdTargets, AvailableNamesParse) {
  std::vector<simd::Target> all = simd::available();
  ASSERT_FALSE(all.empty());
  for (const simd::Target& t : all) {
    EXPECT_EQ(simd::parse(t.name()), t);
    EXPECT_FALSE(t.describe().empty());
  }
  EXPECT_NE(std::find(all.begin(), all.end(), simd::current()), all.end());
}

TEST(SimdTargets, UnknownNameIsOneClearError) {
  std::string e = error_of([] { simd::parse("avx9000"); });
  EXPECT_NE(e.find("PRISM_CPU_TARGET=avx9000: not a SIMD target"), std::string::npos) << e;
  EXPECT_NE(e.find(simd::available().back().name()), std::string::npos) << e;
}

// The decode mat-vec kernels, called directly: four rows at a time, k with a tail that no
// vector width divides.
TEST(SimdTargets, DotRowKernels) {
  const int64_t k = 2048 + 45;
  std::vector<float> x = random_values(k, 1);
  std::vector<uint16_t> xb = bf16_bits(x);
  std::vector<float> xw = widened(xb);
  std::vector<std::vector<float>> wf;
  std::vector<std::vector<uint16_t>> wb;
  for (int r = 0; r < cpu::kDotRows; ++r) {
    wf.push_back(random_values(k, 10 + r));
    wb.push_back(bf16_bits(wf.back()));
  }
  const uint16_t* rows[cpu::kDotRows] = {wb[0].data(), wb[1].data(), wb[2].data(), wb[3].data()};
  for_each_target([&] {
    cpu::DotRowKernels dots = cpu::dot_row_kernels();
    float by_f32[cpu::kDotRows], by_bf16[cpu::kDotRows];
    dots.f32x_bf16w(x.data(), rows, k, by_f32);
    dots.bf16(xb.data(), xw.data(), rows, k, by_bf16);
    for (int r = 0; r < cpu::kDotRows; ++r) {
      std::vector<float> w = widened(wb[r]);
      auto [want, magnitude] = dot_reference(x.data(), w.data(), k);
      EXPECT_NEAR(by_f32[r], want, 1e-5 * magnitude) << "f32 x bf16, row " << r;
      auto [want_b, magnitude_b] = dot_reference(xw.data(), w.data(), k);
      EXPECT_NEAR(by_bf16[r], want_b, 1e-5 * magnitude_b) << "bf16 x bf16, row " << r;
      auto [want_f, magnitude_f] = dot_reference(x.data(), wf[r].data(), k);
      EXPECT_NEAR(dots.f32(x.data(), wf[r].data(), k), want_f, 1e-5 * magnitude_f)
          << "f32 x f32, row " << r;
    }
  });
}

// The same through the dot kernel: two activation rows against 37 weight rows stored
// [n][k] (a linear layer's layout), in f32 and bf16.
TEST(SimdTargets, DecodeMatrixVector) {
  const int64_t m = 2, n = 37, k = 515;
  std::vector<float> x = random_values(m * k, 3), w = random_values(n * k, 4);
  auto fn = [](Tensor x, Tensor w) { return x.dot(w, "k"); };
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(name(t)));
    HostBuffer xs = testing::f32(S({{"m", m}, {"k", k}}), x).convert(t);
    HostBuffer ws = testing::f32(S({{"n", n}, {"k", k}}), w).convert(t);
    std::vector<double> xv = xs.to_f64(), wv = ws.to_f64();
    for_each_target([&] {
      std::vector<double> got = testing::run1(fn, {xs, ws}).to_f64();
      ASSERT_EQ(got.size(), size_t(m * n));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, magnitude = 0;
          for (int64_t l = 0; l < k; ++l) {
            want += xv[i * k + l] * wv[j * k + l];
            magnitude += std::abs(xv[i * k + l] * wv[j * k + l]);
          }
          double tol = 1e-5 * magnitude + (t == DType::bf16 ? std::abs(want) / 256 : 0);
          EXPECT_NEAR(got[i * n + j], want, tol) << "at " << i << ", " << j;
        }
      }
    });
  }
}

// Fused elementwise loops: several blocks and a partial one, exp, sigmoid and a conversion.
TEST(SimdTargets, FusedElementwise) {
  const int64_t n = 3 * 1024 + 77;
  std::vector<float> x = random_values(n, 5), y = random_values(n, 6);
  HostBuffer xs = testing::f32(S({{"i", n}}), x), ys = testing::f32(S({{"i", n}}), y);
  for_each_target([&] {
    HostBuffer silu = testing::run1([](Tensor x, Tensor y) { return x.silu() + y; }, {xs, ys});
    HostBuffer ex = testing::run1([](Tensor x, Tensor y) { return (x * y).exp(); }, {xs, ys});
    HostBuffer half = testing::run1(
        [](Tensor x, Tensor y) { return (x.convert(DType::bf16) * y.convert(DType::bf16)); },
        {xs, ys});
    std::vector<double> want_silu(n), want_exp(n), want_half(n);
    for (int64_t i = 0; i < n; ++i) {
      want_silu[i] = x[i] / (1 + std::exp(-double(x[i]))) + y[i];
      want_exp[i] = std::exp(double(x[i]) * y[i]);
      want_half[i] =
          bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(x[i])) * bf16_to_f32(f32_to_bf16(y[i]))));
    }
    testing::expect_values(silu, want_silu, 1e-5);
    testing::expect_values(ex, want_exp, 1e-5);
    testing::expect_values(half, want_half, 0);
  });
}

// Softmax, whose exp runs through the per-target loop.
TEST(SimdTargets, Softmax) {
  const int64_t rows = 3, k = 1000 + 3;
  std::vector<float> x = random_values(rows * k, 7);
  HostBuffer xs = testing::f32(S({{"r", rows}, {"k", k}}), x);
  std::vector<double> want(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < k; ++i) mx = std::max(mx, double(x[r * k + i]));
    for (int64_t i = 0; i < k; ++i) sum += std::exp(x[r * k + i] - mx);
    for (int64_t i = 0; i < k; ++i) want[r * k + i] = std::exp(x[r * k + i] - mx) / sum;
  }
  for_each_target([&] {
    testing::expect_values(testing::run1([](Tensor x) { return x.softmax("k"); }, {xs}), want,
                           1e-5);
  });
}

}  // namespace
}  // namespace prism
