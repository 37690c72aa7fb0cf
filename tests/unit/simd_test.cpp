// The CPU kernels' SIMD targets (prism/backends/cpu/simd.h): every kernel family that is
// compiled once per target runs under every target this binary has and this CPU runs, and
// matches a double-precision reference, so that each compiled path is exercised: the decode
// mat-vec, fused elementwise loops, reductions, softmax, norms and rope.
#include "prism/backends/cpu/simd.h"

#include <cmath>
#include <cstring>
#include <random>

#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/fast_math.h"
#include "prism/nn/nn.h"
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
  const float* rows_f32[cpu::kDotRows];
  for (int r = 0; r < cpu::kDotRows; ++r) rows_f32[r] = wf[r].data();
  for_each_target([&] {
    cpu::DotRowKernels dots = cpu::dot_row_kernels();
    float by_f32[cpu::kDotRows], by_bf16[cpu::kDotRows], all_f32[cpu::kDotRows];
    dots.f32x_bf16w(x.data(), rows, k, by_f32);
    dots.bf16(xb.data(), xw.data(), rows, k, by_bf16);
    dots.f32(x.data(), rows_f32, k, all_f32);
    for (int r = 0; r < cpu::kDotRows; ++r) {
      std::vector<float> w = widened(wb[r]);
      auto [want, magnitude] = dot_reference(x.data(), w.data(), k);
      EXPECT_NEAR(by_f32[r], want, 1e-5 * magnitude) << "f32 x bf16, row " << r;
      auto [want_b, magnitude_b] = dot_reference(xw.data(), w.data(), k);
      EXPECT_NEAR(by_bf16[r], want_b, 1e-5 * magnitude_b) << "bf16 x bf16, row " << r;
      auto [want_f, magnitude_f] = dot_reference(x.data(), wf[r].data(), k);
      EXPECT_NEAR(all_f32[r], want_f, 1e-5 * magnitude_f) << "f32 x f32, row " << r;
    }
  });
}

// The same through the dot kernel: two activation rows against 37 weight rows stored
// [n][k] (a linear layer's layout), in f32 and bf16; k = 512 leaves no tail after the bf16
// kernels' 64-wide steps (where AVX-512 BF16 never reads x widened to f32), k = 515 does.
TEST(SimdTargets, DecodeMatrixVector) {
  const int64_t m = 2, n = 37;
  auto fn = [](Tensor x, Tensor w) { return x.dot(w, "k"); };
  for (auto [t, k] : {std::pair{DType::f32, int64_t{515}},
                      {DType::bf16, int64_t{515}},
                      {DType::bf16, int64_t{512}}}) {
    SCOPED_TRACE(std::string(name(t)) + ", k " + std::to_string(k));
    std::vector<float> x = random_values(m * k, 3), w = random_values(n * k, 4);
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

// The softmaxes' exp for arguments in [-87, 0] gives exp_f32's bits there, under every target:
// every float from -87 to 0 at a stride, the ends and the smallest magnitudes.
TEST(SimdTargets, ExpOfNonPositiveArgumentsHasExpsBits) {
  std::vector<float> x{-87.0f, -0.0f, 0.0f, -1e-45f, -1e-38f, -86.99999f, -0.5f, -0.6931472f};
  uint32_t to = 0;
  const float low = -87.0f;
  std::memcpy(&to, &low, 4);  // the bits of negative floats grow with their magnitude
  for (uint32_t bits = 0x80000000u; bits <= to; bits += 997) {
    float v;
    std::memcpy(&v, &bits, 4);
    x.push_back(v);
  }
  std::vector<float> got(x.size());
  for_each_target([&] {
    cpu::exp_nonpositive_f32_simd(x.data(), got.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = cpu::exp_f32(x[i]);
      ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0)
          << "exp(" << x[i] << "): " << got[i] << " against " << want;
    }
  });
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

// The largest relative error each dtype's results may carry: halves and f32 compute in f32
// (sums in double) and round the result to 8 (bf16), 11 (f16) or 24 significant bits.
double tolerance(DType t) {
  switch (t) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    case DType::f32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

// got[i] within rel * |want[i]| of want[i], for results far from 0 (softmax's).
void expect_relative(const HostBuffer& got, const std::vector<double>& want, double rel) {
  std::vector<double> g = got.to_f64();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], rel * std::abs(want[i])) << "at " << i;
  }
}

// x as a [rows, k] tensor of dtype t, and its values after that rounding.
struct Matrix {
  int64_t rows, k;
  HostBuffer buffer;
  std::vector<double> values;
  double at(int64_t r, int64_t i) const { return values[r * k + i]; }
};
Matrix matrix(int64_t rows, int64_t k, std::vector<float> v, DType t) {
  HostBuffer b = testing::f32(S({{"r", rows}, {"k", k}}), std::move(v)).convert(t);
  std::vector<double> values = b.to_f64();
  return {rows, k, std::move(b), std::move(values)};
}

// The reference of a function of one lane of the matrix, along k (lanes = rows) or along r
// (lanes = columns), laid out as the kernel's output [rows, k] or [lanes].
template <typename F>
std::vector<double> along(const Matrix& m, bool along_k, bool keeps_axis, F&& lane_fn) {
  int64_t lanes = along_k ? m.rows : m.k, n = along_k ? m.k : m.rows;
  std::vector<double> out(keeps_axis ? m.rows * m.k : lanes);
  for (int64_t l = 0; l < lanes; ++l) {
    std::vector<double> lane(n);
    for (int64_t i = 0; i < n; ++i) lane[i] = along_k ? m.at(l, i) : m.at(i, l);
    std::vector<double> y = lane_fn(lane);
    if (!keeps_axis) {
      out[l] = y[0];
      continue;
    }
    for (int64_t i = 0; i < n; ++i) (along_k ? out[l * m.k + i] : out[i * m.k + l]) = y[i];
  }
  return out;
}

// Reductions, arg-reductions and cumulative sums along the innermost axis (whole rows) and
// along the outer one (a step over all columns per row), with NaNs in the vector part and in
// the tail of a row, and a tie for the maximum.
TEST(SimdTargets, Reductions) {
  const int64_t rows = 5, k = 515;
  std::vector<float> v = random_values(rows * k, 8), near_one(rows * k);
  v[1 * k + 10] = v[1 * k + 400] = 7;  // tie for the largest
  v[2 * k + 17] = NAN;
  v[3 * k + k - 1] = NAN;
  v[4 * k + 3] = -7;
  for (size_t i = 0; i < v.size(); ++i) near_one[i] = 1 + v[i] / 64;  // products stay in range
  auto first_extreme = [](bool max) {
    return [max](const std::vector<double>& lane) {
      size_t best = 0;
      for (size_t i = 1; i < lane.size() && !std::isnan(lane[best]); ++i) {
        if (std::isnan(lane[i]) || (max ? lane[i] > lane[best] : lane[i] < lane[best])) best = i;
      }
      return std::vector<double>{double(best)};
    };
  };
  auto fold = [](auto op, double init) {
    return [op, init](const std::vector<double>& lane) {
      double acc = init;
      for (double x : lane) acc = (std::isnan(acc) || std::isnan(x)) ? NAN : op(acc, x);
      return std::vector<double>{acc};
    };
  };
  auto sum = fold([](double a, double b) { return a + b; }, 0);
  auto prod = fold([](double a, double b) { return a * b; }, 1);
  auto max = fold([](double a, double b) { return std::max(a, b); }, -INFINITY);
  auto min = fold([](double a, double b) { return std::min(a, b); }, INFINITY);
  auto cumsum = [](bool exclusive, bool reverse) {
    return [=](const std::vector<double>& lane) {
      std::vector<double> y(lane.size());
      double acc = 0;
      for (size_t j = 0; j < lane.size(); ++j) {
        size_t i = reverse ? lane.size() - 1 - j : j;
        y[i] = exclusive ? acc : acc + lane[i];
        acc += lane[i];
      }
      return y;
    };
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(std::string(name(t)));
    Matrix x = matrix(rows, k, v, t), p = matrix(rows, k, near_one, t);
    for (bool along_k : {true, false}) {
      SCOPED_TRACE(along_k ? "along k" : "along r");
      Tag tag = along_k ? "k" : "r";
      std::vector<double> want_sum = along(x, along_k, false, sum),
                          want_max = along(x, along_k, false, max),
                          want_min = along(x, along_k, false, min),
                          want_prod = along(p, along_k, false, prod),
                          want_argmax = along(x, along_k, false, first_extreme(true)),
                          want_argmin = along(x, along_k, false, first_extreme(false)),
                          want_cumsum = along(x, along_k, true, cumsum(false, false)),
                          want_exclusive_reverse = along(x, along_k, true, cumsum(true, true));
      for_each_target([&] {
        double tol = tolerance(t);
        testing::expect_values(testing::run1([&](Tensor a) { return a.sum({tag}); }, {x.buffer}),
                               want_sum, tol);
        testing::expect_values(testing::run1([&](Tensor a) { return a.max({tag}); }, {x.buffer}),
                               want_max, 0);
        testing::expect_values(testing::run1([&](Tensor a) { return a.min({tag}); }, {x.buffer}),
                               want_min, 0);
        testing::expect_values(testing::run1([&](Tensor a) { return a.prod({tag}); }, {p.buffer}),
                               want_prod, tol);
        testing::expect_values(testing::run1([&](Tensor a) { return a.argmax(tag); }, {x.buffer}),
                               want_argmax, 0);
        testing::expect_values(testing::run1([&](Tensor a) { return a.argmin(tag); }, {x.buffer}),
                               want_argmin, 0);
        testing::expect_values(testing::run1([&](Tensor a) { return a.cumsum(tag); }, {x.buffer}),
                               want_cumsum, tol);
        testing::expect_values(
            testing::run1([&](Tensor a) { return a.cumsum(tag, true, true); }, {x.buffer}),
            want_exclusive_reverse, tol);
      });
    }
  }
}

// softmax and log_softmax (whose exp runs through the per-target loop) along the innermost
// axis and along an outer one, in f32 and bf16.
TEST(SimdTargets, Softmax) {
  const int64_t rows = 3, k = 1000 + 3;
  std::vector<float> v = random_values(rows * k, 7);
  auto reference = [](bool log) {
    return [log](const std::vector<double>& lane) {
      double mx = -INFINITY, sum = 0;
      for (double x : lane) mx = std::max(mx, x);
      for (double x : lane) sum += std::exp(x - mx);
      std::vector<double> y;
      for (double x : lane) y.push_back(log ? x - mx - std::log(sum) : std::exp(x - mx) / sum);
      return y;
    };
  };
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(name(t)));
    Matrix x = matrix(rows, k, v, t);
    for (bool along_k : {true, false}) {
      SCOPED_TRACE(along_k ? "along k" : "along r");
      Tag tag = along_k ? "k" : "r";
      std::vector<double> want = along(x, along_k, true, reference(false)),
                          want_log = along(x, along_k, true, reference(true));
      for_each_target([&] {
        expect_relative(testing::run1([&](Tensor a) { return a.softmax(tag); }, {x.buffer}), want,
                        tolerance(t));
        expect_relative(testing::run1([&](Tensor a) { return a.log_softmax(tag); }, {x.buffer}),
                        want_log, tolerance(t));
      });
    }
  }
}

// rms_norm and layer_norm along the innermost axis and along an outer one, in f32, bf16 and
// f64; the rows have an offset, so that layer_norm's centering matters.
TEST(SimdTargets, Norms) {
  const int64_t rows = 4, k = 777;
  std::vector<float> v = random_values(rows * k, 9);
  for (float& x : v) x += 3;
  const double eps = 1e-5;
  auto reference = [eps](bool center) {
    return [center, eps](const std::vector<double>& lane) {
      double mean = 0, sq = 0;
      if (center) {
        for (double x : lane) mean += x;
        mean /= double(lane.size());
      }
      for (double x : lane) sq += (x - mean) * (x - mean);
      double scale = 1 / std::sqrt(sq / double(lane.size()) + eps);
      std::vector<double> y;
      for (double x : lane) y.push_back((x - mean) * scale);
      return y;
    };
  };
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(name(t)));
    Matrix x = matrix(rows, k, v, t);
    for (bool along_k : {true, false}) {
      SCOPED_TRACE(along_k ? "along k" : "along r");
      Tag tag = along_k ? "k" : "r";
      std::vector<double> want_rms = along(x, along_k, true, reference(false)),
                          want_ln = along(x, along_k, true, reference(true));
      for_each_target([&] {
        double tol = tolerance(t);
        testing::expect_values(
            testing::run1([&](Tensor a) { return a.rms_norm({tag}, eps); }, {x.buffer}), want_rms,
            tol);
        testing::expect_values(
            testing::run1([&](Tensor a) { return a.layer_norm({tag}, eps); }, {x.buffer}), want_ln,
            tol);
      });
    }
  }
}

// rope in both conventions, with a half that no vector width divides, in f32, bf16 and f64.
TEST(SimdTargets, Rope) {
  const int64_t s = 3, h = 2, d = 2 * 45;
  std::vector<float> xv = random_values(s * h * d, 11), cv = random_values(s * d / 2, 12),
                     sv = random_values(s * d / 2, 13);
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(name(t)));
    HostBuffer x = testing::f32(S({{"s", s}, {"h", h}, {"hd", d}}), xv).convert(t);
    HostBuffer c = testing::f32(S({{"s", s}, {"hd", d / 2}}), cv).convert(t);
    HostBuffer sn = testing::f32(S({{"s", s}, {"hd", d / 2}}), sv).convert(t);
    std::vector<double> xd = x.to_f64(), cd = c.to_f64(), sd = sn.to_f64();
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(interleaved ? "interleaved" : "rotate-half");
      std::vector<double> want(xd.size());
      for (int64_t r = 0; r < s * h; ++r) {
        const double *xr = &xd[r * d], *cr = &cd[r / h * d / 2], *sr = &sd[r / h * d / 2];
        for (int64_t i = 0; i < d / 2; ++i) {
          int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + d / 2;
          want[r * d + p] = xr[p] * cr[i] - xr[q] * sr[i];
          want[r * d + q] = xr[q] * cr[i] + xr[p] * sr[i];
        }
      }
      for_each_target([&] {
        HostBuffer y = testing::run1(
            [&](Tensor x, Tensor c, Tensor s) { return nn::rope(x, c, s, "hd", interleaved); },
            {x, c, sn});
        testing::expect_values(y, want, tolerance(t));
      });
    }
  }
}

}  // namespace
}  // namespace prism
