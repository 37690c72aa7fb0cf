// fast_math.h's exp as Highway vector code, for the loops compiled once per SIMD target: the
// same algorithm lane by lane with explicit selects. The scalar form's ternaries vectorize
// only where the target has mask registers (AVX-512): without them, GCC keeps compares that
// may trap (-ftrapping-math) as branches, and an AVX2 exp loop ran one value at a time.
// Include after <hwy/highway.h> in a file compiled per target (a Highway -inl.h header: its
// guard flips with each target).
#if defined(PRISM_BACKENDS_CPU_FAST_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PRISM_BACKENDS_CPU_FAST_MATH_INL_H_
#undef PRISM_BACKENDS_CPU_FAST_MATH_INL_H_
#else
#define PRISM_BACKENDS_CPU_FAST_MATH_INL_H_
#endif

#include <hwy/highway.h>

#include "prism/backends/cpu/fast_math.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

// exp(c) = p * 2^k for c in exp_f32's range: k = round(c / ln 2), and p the polynomial of
// c - k ln 2 (what both functions below share, step for step).
template <class D>
HWY_INLINE void ExpF32Parts(D d, hwy::HWY_NAMESPACE::Vec<D> c, hwy::HWY_NAMESPACE::Vec<D>& p,
                            hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::RebindToSigned<D>>& k) {
  namespace hn = hwy::HWY_NAMESPACE;
  const auto shifter = hn::Set(d, 12582912.0f);
  const auto kf = hn::Sub(hn::MulAdd(c, hn::Set(d, 1.44269504088896341f), shifter), shifter);
  const auto r = hn::NegMulAdd(kf, hn::Set(d, 1.42860682030941723212e-6f),
                               hn::NegMulAdd(kf, hn::Set(d, 0.693145751953125f), c));
  p = hn::Set(d, 1.0f / 5040);
  for (float coefficient : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = hn::MulAdd(p, r, hn::Set(d, coefficient));
  k = hn::ConvertTo(hn::RebindToSigned<D>(), kf);
}

// exp of each lane, as exp_f32(float).
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> ExpF32(D d, hwy::HWY_NAMESPACE::Vec<D> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToSigned<D> di;
  const auto hi = hn::Set(d, 88.72283935546875f), lo = hn::Set(d, -103.972084045410f);
  const auto c = hn::Min(hn::Max(x, lo), hi);  // NaN lanes are put back at the end
  hn::Vec<D> p;
  hn::Vec<hn::RebindToSigned<D>> ki;
  ExpF32Parts(d, c, p, ki);
  // 2^k in two factors, so that results down to the smallest subnormals come out right.
  const auto half = hn::ShiftRight<1>(ki);
  const auto bias = hn::Set(di, 127);
  const auto s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(half, bias)));
  const auto s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::Sub(ki, half), bias)));
  auto y = hn::Mul(hn::Mul(p, s1), s2);
  y = hn::IfThenElse(hn::Gt(x, hi), hn::Inf(d), y);
  y = hn::IfThenZeroElse(hn::Lt(x, lo), y);
  return hn::IfThenElse(hn::Eq(x, x), y, x);
}

// exp(x) for lanes in [-87, 0] (a softmax's score less its maximum, clamped where the weight
// would be flushed to 0): ExpF32's bits there, without its range checks and selects; the
// result is a normal float, so 2^k is one factor.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> ExpNonPositiveF32(D d, hwy::HWY_NAMESPACE::Vec<D> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToSigned<D> di;
  hn::Vec<D> p;
  hn::Vec<hn::RebindToSigned<D>> ki;
  ExpF32Parts(d, x, p, ki);
  return hn::Mul(p, hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(ki, hn::Set(di, 127)))));
}

// y[i] = exp(x[i]) for n values.
HWY_INLINE void ExpF32Array(const float* x, float* y, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(ExpF32(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

// y[i] = 1 / (1 + exp(-x[i])) for n values.
HWY_INLINE void LogisticF32Array(const float* x, float* y, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto e = ExpF32(d, hn::Neg(hn::LoadU(d, x + i)));
    hn::StoreU(hn::Div(one, hn::Add(one, e)), d, y + i);
  }
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(-x[i]));
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // PRISM_BACKENDS_CPU_FAST_MATH_INL_H_
