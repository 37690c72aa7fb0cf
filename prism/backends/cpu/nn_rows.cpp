// nn_rows.h's row loops, compiled once per SIMD target (hwy_targets.h): Highway vectors for
// the maxima, sums and exp of softmax, the sums of squares of the norms and the rotations of
// rope. The values come out as the scalar loops gave them, except that sums now run over
// several lanes (no less accurate).
#include "prism/backends/cpu/nn_rows.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/nn_rows.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/fast_math-inl.h"
#include "prism/backends/cpu/fast_math.h"
#include "prism/backends/cpu/rows-inl.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/storage.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// The largest of x[0, n), -inf when n is 0. A NaN may or may not come out: softmax turns a
// row with a NaN into NaNs either way, through its sum.
template <typename T>
T MaxOfRow(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto m0 = hn::Set(d, -std::numeric_limits<T>::infinity()), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + lanes));
  }
  for (; i + lanes <= n; i += lanes) m0 = hn::Max(m0, hn::LoadU(d, x + i));
  T m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// softmax with the row's maximum subtracted first; exp runs as fast_math's vector code in
// f32, as std::exp in f64.
template <typename T>
void SoftmaxCore(const T* x, T* y, int64_t n, bool log) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const T mx = MaxOfRow(x, n);
  const auto vmx = hn::Set(d, mx);
  T sum = 0;
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    auto acc = hn::Zero(d);
    for (; i + lanes <= n; i += lanes) {
      const auto e = ExpF32(d, hn::Sub(hn::LoadU(d, x + i), vmx));
      if (!log) hn::StoreU(e, d, y + i);
      acc = hn::Add(acc, e);
    }
    sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; i < n; ++i) {
      float e = exp_f32(x[i] - mx);
      if (!log) y[i] = e;
      sum += e;
    }
  } else {
    for (; i < n; ++i) {
      T e = std::exp(x[i] - mx);
      if (!log) y[i] = e;
      sum += e;
    }
  }
  i = 0;
  if (log) {  // from x again: y holds nothing yet, and may be x
    const T lsum = std::log(sum);
    const auto vlsum = hn::Set(d, lsum);
    for (; i + lanes <= n; i += lanes) {
      hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vmx), vlsum), d, y + i);
    }
    for (; i < n; ++i) y[i] = (x[i] - mx) - lsum;
  } else {
    const T inv = T(1) / sum;
    const auto vinv = hn::Set(d, inv);
    for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vinv), d, y + i);
    for (; i < n; ++i) y[i] *= inv;
  }
}

// The mean and the sum of squares in double (two vector accumulators), the scaling in T.
template <typename T>
void NormCore(const T* x, T* y, int64_t n, bool center, double eps) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const double mean = center ? SumAsF64(x, n) / double(n) : 0.0;
  const auto vmean = hn::Set(d, mean);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto d0 = hn::Sub(LoadAsF64(d, x + i), vmean);
    const auto d1 = hn::Sub(LoadAsF64(d, x + i + lanes), vmean);
    a0 = hn::MulAdd(d0, d0, a0);
    a1 = hn::MulAdd(d1, d1, a1);
  }
  for (; i + lanes <= n; i += lanes) {
    const auto d0 = hn::Sub(LoadAsF64(d, x + i), vmean);
    a0 = hn::MulAdd(d0, d0, a0);
  }
  double sq = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < n; ++i) {
    double v = x[i] - mean;
    sq += v * v;
  }
  const T scale = static_cast<T>(1.0 / std::sqrt(sq / double(n) + eps));
  const T shift = static_cast<T>(mean);
  const hn::ScalableTag<T> dt;
  const int64_t tlanes = static_cast<int64_t>(hn::Lanes(dt));
  const auto vscale = hn::Set(dt, scale), vshift = hn::Set(dt, shift);
  for (i = 0; i + tlanes <= n; i += tlanes) {
    hn::StoreU(hn::Mul(hn::Sub(hn::LoadU(dt, x + i), vshift), vscale), dt, y + i);
  }
  for (; i < n; ++i) y[i] = (x[i] - shift) * scale;
}

// One row of rope. Products and sums round one by one (no fused multiply-add), as the
// scalar loop did, so every target gives the same bits.
template <typename T>
void RopeCore(bool interleaved, const T* x, const T* c, const T* s, T* y, int64_t half) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  if (interleaved) {
    for (; i + lanes <= half; i += lanes) {
      hn::Vec<decltype(d)> a, b;
      hn::LoadInterleaved2(d, x + 2 * i, a, b);
      const auto cv = hn::LoadU(d, c + i), sv = hn::LoadU(d, s + i);
      hn::StoreInterleaved2(hn::Sub(hn::Mul(a, cv), hn::Mul(b, sv)),
                            hn::Add(hn::Mul(b, cv), hn::Mul(a, sv)), d, y + 2 * i);
    }
  } else {
    for (; i + lanes <= half; i += lanes) {
      const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + half + i);
      const auto cv = hn::LoadU(d, c + i), sv = hn::LoadU(d, s + i);
      hn::StoreU(hn::Sub(hn::Mul(a, cv), hn::Mul(b, sv)), d, y + i);
      hn::StoreU(hn::Add(hn::Mul(b, cv), hn::Mul(a, sv)), d, y + half + i);
    }
  }
  for (; i < half; ++i) {
    int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + half;
    T a = x[p], b = x[q];
    y[p] = a * c[i] - b * s[i];
    y[q] = b * c[i] + a * s[i];
  }
}

}  // namespace

void SoftmaxRow(DType t, const std::byte* x, std::byte* y, int64_t n, bool log) {
  OnComputeRow(t, x, y, n, [&](const auto* xr, auto* yr) { SoftmaxCore(xr, yr, n, log); });
}

void NormRow(DType t, const std::byte* x, std::byte* y, int64_t n, bool center, double eps) {
  OnComputeRow(t, x, y, n, [&](const auto* xr, auto* yr) { NormCore(xr, yr, n, center, eps); });
}

void RopeRows(DType t, bool interleaved, const std::byte* x, const std::byte* cos,
              const std::byte* sin, std::byte* y, int64_t rows, int64_t d) {
  const int64_t half = d / 2;
  auto direct = [&](auto tag) {
    using T = decltype(tag);
    const T *xp = reinterpret_cast<const T*>(x), *cp = reinterpret_cast<const T*>(cos),
            *sp = reinterpret_cast<const T*>(sin);
    T* yp = reinterpret_cast<T*>(y);
    for (int64_t r = 0; r < rows; ++r) {
      RopeCore(interleaved, xp + r * d, cp + r * half, sp + r * half, yp + r * d, half);
    }
  };
  auto through_f32 = [&](auto tag) {
    using S = decltype(tag);
    const S *xp = reinterpret_cast<const S*>(x), *cp = reinterpret_cast<const S*>(cos),
            *sp = reinterpret_cast<const S*>(sin);
    S* yp = reinterpret_cast<S*>(y);
    thread_local std::vector<float> row, c, s;
    row.resize(d);
    c.resize(half);
    s.resize(half);
    for (int64_t r = 0; r < rows; ++r) {
      RowToF32(xp + r * d, row.data(), d);
      RowToF32(cp + r * half, c.data(), half);
      RowToF32(sp + r * half, s.data(), half);
      RopeCore(interleaved, row.data(), c.data(), s.data(), row.data(), half);
      RowFromF32(row.data(), yp + r * d, 2 * half);
    }
  };
  OnFloatDType(t, direct, through_f32);
}

void ToF32(DType t, const std::byte* x, float* y, int64_t n) {
  auto direct = [&](auto tag) {
    const auto* xp = reinterpret_cast<const decltype(tag)*>(x);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(xp[i]);
  };
  auto through_f32 = [&](auto tag) { RowToF32(reinterpret_cast<const decltype(tag)*>(x), y, n); };
  OnFloatDType(t, direct, through_f32);
}

void FromF32(DType t, const float* x, std::byte* y, int64_t n) {
  auto direct = [&](auto tag) {
    using T = decltype(tag);
    T* yp = reinterpret_cast<T*>(y);
    for (int64_t i = 0; i < n; ++i) yp[i] = static_cast<T>(x[i]);
  };
  auto through_f32 = [&](auto tag) { RowFromF32(x, reinterpret_cast<decltype(tag)*>(y), n); };
  OnFloatDType(t, direct, through_f32);
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(SoftmaxRow);
HWY_EXPORT(NormRow);
HWY_EXPORT(RopeRows);
HWY_EXPORT(ToF32);
HWY_EXPORT(FromF32);

NnRowKernels nn_row_kernels() {
  simd::current();  // points Highway's tables at the target in use
  return {&HWY_DYNAMIC_DISPATCH(SoftmaxRow), &HWY_DYNAMIC_DISPATCH(NormRow),
          &HWY_DYNAMIC_DISPATCH(RopeRows), &HWY_DYNAMIC_DISPATCH(ToF32),
          &HWY_DYNAMIC_DISPATCH(FromF32)};
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
