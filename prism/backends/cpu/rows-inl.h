// Helpers for the row loops compiled once per SIMD target (reduce_rows.cpp, nn_rows.cpp):
// loads that widen to double, bf16 <-> f32 conversion of whole rows, and running a row
// kernel on f64 or f32 values whatever the row's float dtype. Include after
// <hwy/highway.h> in a file compiled per target (a Highway -inl.h header: its guard flips
// with each target).
#if defined(PRISM_BACKENDS_CPU_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PRISM_BACKENDS_CPU_ROWS_INL_H_
#undef PRISM_BACKENDS_CPU_ROWS_INL_H_
#else
#define PRISM_BACKENDS_CPU_ROWS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/storage.h"
#include "prism/core/error.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

// Lanes(d) values of T (float or double) at p, as the doubles of d.
template <class D, typename T>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> LoadAsF64(D d, const T* p) {
  namespace hn = hwy::HWY_NAMESPACE;
  if constexpr (std::is_same_v<T, double>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<float, D>(), p));
  }
}

// The sum of x[0, n) in double, over several vector accumulators.
template <typename T>
HWY_INLINE double SumAsF64(const T* x, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, LoadAsF64(d, x + i));
    a1 = hn::Add(a1, LoadAsF64(d, x + i + lanes));
    a2 = hn::Add(a2, LoadAsF64(d, x + i + 2 * lanes));
    a3 = hn::Add(a3, LoadAsF64(d, x + i + 3 * lanes));
  }
  for (; i + lanes <= n; i += lanes) a0 = hn::Add(a0, LoadAsF64(d, x + i));
  double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) sum += x[i];
  return sum;
}

// y[i] = x[i] widened to f32, n values (exact).
HWY_INLINE void Bf16ToF32(const BF16* x, float* y, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::bfloat16_t, decltype(d)> dbf;
  const auto* xb = reinterpret_cast<const hwy::bfloat16_t*>(x);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dbf, xb + i)), d, y + i);
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i].bits);
}

// y[i] = x[i] rounded to bf16 as f32_to_bf16 does (to nearest even; NaN stays NaN).
HWY_INLINE void F32ToBf16(const float* x, BF16* y, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint16_t, decltype(d)> du16;
  auto* yb = reinterpret_cast<uint16_t*>(y);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto bits = hn::BitCast(du, v);
    const auto high = hn::ShiftRight<16>(bits);
    const auto odd = hn::And(high, hn::Set(du, 1));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fff), odd)));
    const auto nan = hn::Or(high, hn::Set(du, 0x40));
    const auto out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, out)), du16, yb + i);
  }
  for (; i < n; ++i) y[i] = BF16{f32_to_bf16(x[i])};
}

// A row of storage type S (f32, bf16 or f16) as f32, and back; f16 goes value by value.
template <typename S>
HWY_INLINE void RowToF32(const S* x, float* y, int64_t n) {
  if constexpr (std::is_same_v<S, BF16>) {
    Bf16ToF32(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = to_compute<float>(x[i]);
  }
}
template <typename S>
HWY_INLINE void RowFromF32(const float* x, S* y, int64_t n) {
  if constexpr (std::is_same_v<S, BF16>) {
    F32ToBf16(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = to_storage<S>(x[i]);
  }
}

// Calls direct(T{}) for f64 and f32 (T the storage type), through_f32(S{}) for the halves
// (S their storage type, computed in f32), and fails for any other dtype.
template <typename Direct, typename ThroughF32>
HWY_INLINE auto OnFloatDType(DType t, Direct&& direct, ThroughF32&& through_f32) {
  switch (t) {
    case DType::f64:
      return direct(double{});
    case DType::f32:
      return direct(float{});
    case DType::bf16:
      return through_f32(BF16{});
    case DType::f16:
      return through_f32(F16{});
    default:
      fail("cpu: {} is not a floating-point dtype", name(t));
  }
}

// Calls core(x, y) on the row as f64 or f32 values: in place for f64 and f32, through a
// per-thread f32 copy for halves.
template <typename Core>
HWY_INLINE void OnComputeRow(DType t, const std::byte* x, std::byte* y, int64_t n, Core&& core) {
  OnFloatDType(
      t,
      [&](auto tag) {
        using T = decltype(tag);
        core(reinterpret_cast<const T*>(x), reinterpret_cast<T*>(y));
      },
      [&](auto tag) {
        using S = decltype(tag);
        thread_local std::vector<float> row;
        row.resize(n);
        RowToF32(reinterpret_cast<const S*>(x), row.data(), n);
        core(row.data(), row.data());
        RowFromF32(row.data(), reinterpret_cast<S*>(y), n);
      });
}

// Calls core(values) on the n values at x as f64 or f32 values: in place for f64 and f32,
// through a per-thread f32 copy for halves; returns what core returns.
template <typename Core>
HWY_INLINE auto OnComputeValues(DType t, const std::byte* x, int64_t n, Core&& core) {
  return OnFloatDType(
      t, [&](auto tag) { return core(reinterpret_cast<const decltype(tag)*>(x)); },
      [&](auto tag) {
        using S = decltype(tag);
        thread_local std::vector<float> values;
        values.resize(n);
        RowToF32(reinterpret_cast<const S*>(x), values.data(), n);
        return core(static_cast<const float*>(values.data()));
      });
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // PRISM_BACKENDS_CPU_ROWS_INL_H_
