// exp_f32_simd: fast_math.h's exp loop compiled once per SIMD target (hwy_targets.h).
#include "prism/backends/cpu/fast_math.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/fast_math.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

void ExpF32(const float* x, float* y, int64_t n) { exp_f32(x, y, n); }

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(ExpF32);

void exp_f32_simd(const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(ExpF32)(x, y, n); }

}  // namespace prism::cpu
#endif  // HWY_ONCE
