// bf16 <-> f32 as Highway vector code, for the loops compiled per SIMD target: widening (a
// shift of the bits) and rounding to nearest even with a NaN kept quiet, bit for bit what
// prism::bf16_to_f32 and prism::f32_to_bf16 (dtype.h) give. (AVX-512's vcvtneps2bf16 would
// round subnormals to zero.) Include after <hwy/highway.h> in a file compiled per target (a
// Highway -inl.h header: its guard flips with each target).
#if defined(PRISM_BACKENDS_CPU_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PRISM_BACKENDS_CPU_BF16_INL_H_
#undef PRISM_BACKENDS_CPU_BF16_INL_H_
#else
#define PRISM_BACKENDS_CPU_BF16_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "prism/core/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

// The bits of v's lanes rounded to bf16, in the top 16 bits of each 32-bit lane (the low
// ones are not cleared).
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::RebindToUnsigned<D>> RoundedBf16Bits(
    D d, hwy::HWY_NAMESPACE::Vec<D> v) {
  namespace hn = hwy::HWY_NAMESPACE;
  (void)d;
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  const auto rounded = hn::Add(
      bits, hn::Add(hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)), hn::Set(du, 0x7fffu)));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(bits, hn::Set(du, 0x400000u)),
                        rounded);
}

// v rounded to bf16, as f32 lanes.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> RoundToBf16(D d, hwy::HWY_NAMESPACE::Vec<D> v) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::And(RoundedBf16Bits(d, v), hn::Set(du, 0xffff0000u)));
}

// v rounded to bf16 and stored at p (Lanes(d) values).
template <class D>
HWY_INLINE void StoreBf16(D d, hwy::HWY_NAMESPACE::Vec<D> v, uint16_t* p) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToSigned<D> di;
  // The top halves, as 16-bit lanes (no value saturates).
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(RoundedBf16Bits(d, v)))), d16, p);
}

// Lanes(d) bf16 values at p, widened.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> LoadBf16(D d, const uint16_t* p) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

// to[i] = from[i] widened, for n values.
HWY_INLINE void WidenBf16Array(const uint16_t* from, float* to, int64_t n) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(LoadBf16(d, from + i), d, to + i);
  for (; i < n; ++i) to[i] = bf16_to_f32(from[i]);
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // PRISM_BACKENDS_CPU_BF16_INL_H_
