// exp_f32_simd: fast_math-inl.h's exp loop compiled once per SIMD target (hwy_targets.h).
#include "prism/backends/cpu/fast_math.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/fast_math.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include "prism/backends/cpu/fast_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

void ExpF32Rows(const float* x, float* y, int64_t n) { ExpF32Array(x, y, n); }

void ExpNonPositiveF32Rows(const float* x, float* y, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(ExpNonPositiveF32(d, hn::LoadU(d, x + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(ExpF32Rows);
HWY_EXPORT(ExpNonPositiveF32Rows);

void exp_f32_simd(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpF32Rows)(x, y, n);
}

void exp_nonpositive_f32_simd(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpNonPositiveF32Rows)(x, y, n);
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
