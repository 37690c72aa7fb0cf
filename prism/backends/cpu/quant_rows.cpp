// quant_rows.h's kernels, compiled once per SIMD target (hwy_targets.h). A block format is a
// struct whose Block() turns one block into f32 vectors and hands each, with its offset in the
// block, to a callback; Tile<Format, R, G> runs the blocks of R weight rows through it against
// G activation rows held in R x G vector accumulators; DequantRows stores the vectors of
// Block<true> (the reference's roundings) as f32 or bf16. Targets without vectors in Highway's
// sense (SCALAR, EMU128) have no kernels of their own: quant_rows and dequantize_rows run
// prism::quant::dequantize there, as they do for the types without a block format here.
#include "prism/backends/cpu/quant_rows.h"

#include "prism/backends/cpu/hwy_targets.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/quant_rows.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "prism/backends/cpu/bf16-inl.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/int8_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/core/dtype.h"

#if HWY_ONCE
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "prism/core/error.h"
#include "prism/quant/dequantize.h"
#endif

#ifndef PRISM_BACKENDS_CPU_QUANT_ROWS_ONCE
#define PRISM_BACKENDS_CPU_QUANT_ROWS_ONCE
namespace prism::cpu {
// One product over all the weight rows, as each target's kernels take it.
using QuantRowsFn = void (*)(const float* x, int64_t ldx, int64_t m, const uint8_t* w,
                             int64_t row_bytes, int64_t n, int64_t k, float* out, int64_t ldo);
// dequantize_rows into f32 or bf16 values (out_dtype: the kernel's own).
using DequantRowsFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                               uint8_t* out, int64_t ldo);

// quantize_activations' rounding of one block: Q8_0's 32 values or Q8_K's 256 at x into q;
// returns d (Q8_0: in f32, before it is stored as f16).
struct RoundFns {
  float (*q8_0)(const float* x, int8_t* q);
  float (*q8_k)(const float* x, int8_t* q);
};
}  // namespace prism::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || HWY_HAVE_SCALABLE

QuantRowsFn NativeKernel(quant::GgmlType) { return nullptr; }
DequantRowsFn NativeDequant(quant::GgmlType, bool, bool) { return nullptr; }
QuantRowsInt8Fn NativeInt8(quant::GgmlType, bool) { return nullptr; }
QuantRowsInterleavedFn NativeInterleaved(quant::GgmlType, bool) { return nullptr; }
RoundFns NativeRound() { return {nullptr, nullptr}; }

#else

namespace {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
constexpr int kLanes = static_cast<int>(hn::MaxLanes(DF()));
static_assert(kLanes >= 4 && 16 % kLanes == 0, "blocks of 16 values split into whole vectors");

// Accumulators a tile may hold in registers: 16 where there are 32 vector registers, else 8;
// a tile takes kRows weight rows and up to kChunk activation rows.
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr int kAccumulators = 16;
#else
constexpr int kAccumulators = 8;
#endif
constexpr int kRows = kDotRows;
constexpr int kChunk = kAccumulators / kRows;

// An f16 scale (unaligned, little-endian) as f32.
HWY_INLINE float LoadF16(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// kLanes bytes widened to 32-bit lanes.
HWY_INLINE VU LoadBytes(const uint8_t* p) {
  const DU du;
  return hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DF>(), p));
}

// v as computed: the compiler may not fuse a product that goes through here with the sum it
// feeds (GCC contracts a * b + c in vectors too, and Highway's Mul and Add are such
// operators on x86).
HWY_INLINE VF Rounded(VF v) {
#if HWY_ARCH_X86
  asm("" : "+v"(v.raw));
#elif HWY_ARCH_ARM_A64
  asm("" : "+w"(v.raw));
#else
  asm("" : "+m"(v));
#endif
  return v;
}

// x * scale + offset: one fused multiply-add, or with kExact a rounded product and a rounded
// sum, as prism::quant::dequantize computes it.
template <bool kExact>
HWY_INLINE VF Affine(VF x, VF scale, VF offset) {
  if constexpr (kExact) {
    return hn::Add(Rounded(hn::Mul(x, scale)), offset);
  } else {
    return hn::MulAdd(x, scale, offset);
  }
}

// Unsigned quants q to f32: q * scale + offset, or, for the formats centered on kCenter,
// scale * (q - kCenter), where offset is -kCenter * scale (one multiply-add; with kExact
// the difference is taken in integers and multiplied, as dequantize.cpp does).
template <bool kExact, int kCenter = 0>
HWY_INLINE VF Dequant(VU q, VF scale, VF offset) {
  const DF df;
  const DI di;
  if constexpr (kExact && kCenter != 0) {
    return hn::Mul(hn::ConvertTo(df, hn::Sub(hn::BitCast(di, q), hn::Set(di, kCenter))), scale);
  } else {
    return Affine<kExact>(hn::ConvertTo(df, hn::BitCast(di, q)), scale, offset);
  }
}

// With AVX-512, 4-bit quants are dequantized by a table lookup instead: the 16 values
// d * q + c of a block or sub-block fill one vector (one multiply-add), and vpermps picks each
// lane's from the low four bits of its index, so that a nibble costs no mask, no conversion
// and no multiply-add of its own. vpermps runs beside the multiply-adds (it takes the shuffle
// port), which are then left for the products with x.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kTables = true;
HWY_INLINE VF Lookup(VF table, VU index) { return VF{_mm512_permutexvar_ps(index.raw, table.raw)}; }
#else
constexpr bool kTables = false;
HWY_INLINE VF Lookup(VF table, VU) { return table; }  // not called
#endif

// o | (a & mask): one instruction (vpternlogd) with AVX-512.
HWY_INLINE VU Merge(VU o, VU a, uint32_t mask) { return hn::OrAnd(o, a, hn::Set(DU(), mask)); }

// Makes the compiler read `a` from memory again: it would otherwise broadcast values it has
// just stored from the register that held them, with a shuffle (vpermd) on the port that the
// table lookups need, where a broadcast from memory is a plain load.
template <typename T>
HWY_INLINE void ReadBack(T& a) {
  asm("" : "+m"(a));
}

// Bit `s` of each lane of h moved to bit 4 (the fifth bit of a 5-bit quant), the other bits
// anywhere: Merge() masks them.
HWY_INLINE VU FifthBitAt4(VU h, int s) {
  return s <= 4 ? hn::ShiftLeftSame(h, 4 - s) : hn::ShiftRightSame(h, s - 4);
}

// The block formats. Each has kElems values in kBytes bytes, and Block(p, emit) calls
// emit(e, v) with the values e..e + kLanes of the block at p, for every e that is a multiple
// of kLanes (in any order). Layouts and formulas: prism/quant/dequantize.cpp. Where the
// reference rounds twice (d * (q - c), or (d * sc) * q - (dmin * m)), one fused multiply-add
// computes it for the products. Block<true> computes the reference's operations instead (a
// product, then a sum), for dequantize_rows, whose values are dequantize's bit for bit. (The
// two agree anyway: with f16 scales every product here is exact in f32, an f16 times
// integers of at most 8 + 6 bits, so that only the sum rounds. Block<true> does not rest on
// that.)

struct Q8_0 {
  static constexpr int64_t kElems = 32, kBytes = 34;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    const DI di;
    const VF d = hn::Set(df, LoadF16(p));
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
#pragma GCC unroll 8
    for (int e = 0; e < 32; e += kLanes) {
      const auto qi = hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), q + e));
      emit(e, hn::Mul(hn::ConvertTo(df, qi), d));
    }
  }
};

// Q4_0 and Q4_1: element j < 16 is byte j's low nibble, 16 + j its high one; d * (q - 8), or
// d * q + m.
template <bool kMin>
struct Q4 {
  static constexpr int64_t kElems = 32, kBytes = kMin ? 20 : 18;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    const float d = LoadF16(p);
    const VF scale = hn::Set(df, d), offset = hn::Set(df, kMin ? LoadF16(p + 2) : -8 * d);
    const uint8_t* qs = p + (kMin ? 4 : 2);
    if constexpr (kTables) {
      const VF table =
          kMin ? Affine<kExact>(hn::Iota(df, 0), scale, offset) : hn::Mul(hn::Iota(df, -8), scale);
      const VU v = LoadBytes(qs);
      emit(0, Lookup(table, v));
      emit(16, Lookup(table, hn::ShiftRight<4>(v)));
    } else {
      const VU low = hn::Set(DU(), 15u);
#pragma GCC unroll 4
      for (int e = 0; e < 16; e += kLanes) {
        const VU v = LoadBytes(qs + e);
        emit(e, Dequant < kExact, kMin ? 0 : 8 > (hn::And(v, low), scale, offset));
        emit(16 + e, Dequant < kExact, kMin ? 0 : 8 > (hn::ShiftRight<4>(v), scale, offset));
      }
    }
  }
};

// Q5_0 and Q5_1: Q4_0's and Q4_1's nibbles with a fifth bit, bit j of a 32-bit word for
// element j; d * (q - 16), or d * q + m.
template <bool kMin>
struct Q5 {
  static constexpr int64_t kElems = 32, kBytes = kMin ? 24 : 22;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    const DU du;
    const float d = LoadF16(p);
    const VF scale = hn::Set(df, d);
    const VF offset = hn::Set(df, kMin ? LoadF16(p + 2) : -16 * d);
    const uint8_t* words = p + (kMin ? 4 : 2);
    uint32_t bits;
    std::memcpy(&bits, words, 4);
    const VU qh = hn::Set(du, bits);
    const VU low = hn::Set(du, 15u);
    auto fifth = [&](int e) HWY_ATTR {  // bits e..e + kLanes of qh, at bit 4 of each lane
      return hn::ShiftLeft<4>(hn::Shr(qh, hn::Iota(du, static_cast<uint32_t>(e))));
    };
#pragma GCC unroll 4
    for (int e = 0; e < 16; e += kLanes) {
      const VU v = LoadBytes(words + 4 + e);
      constexpr int kCenter = kMin ? 0 : 16;
      emit(e, Dequant<kExact, kCenter>(Merge(hn::And(v, low), fifth(e), 16), scale, offset));
      emit(16 + e,
           Dequant<kExact, kCenter>(Merge(hn::ShiftRight<4>(v), fifth(16 + e), 16), scale, offset));
    }
  }
};

// The K-quants' eight sub-block scales and minimums (dequantize.cpp's k_scale_min).
// KScaleBytes unpacks the 6-bit fields into 16 bytes (scales 0-7, minimums 0-7) from the
// block's first 16 bytes v (32-bit lanes: d and dmin (f16), then scale bytes 0-3 (u0), 4-7
// (u1) and 8-11 (u2)), with word operations, as llama.cpp does, on one 128-bit vector (scalar
// words written to memory and read back as one vector would stall the load: stores of 4 bytes
// do not forward to a load of 16). KScales makes them sm[s] = d * scale and sm[8 + s] =
// -(dmin * min), converted and multiplied as one vector and stored, so that the blocks' loops
// broadcast them with loads.
template <typename V>
HWY_INLINE auto KScaleBytes(V v) {
  const hn::Full128<uint32_t> d4;
  alignas(16) static constexpr int32_t kA[4] = {1, 3, 2, 3}, kB[4] = {1, 1, 2, 2};
  alignas(16) static constexpr uint32_t kShift[4] = {0, 0, 0, 4};
  alignas(16) static constexpr uint32_t kLow[4] = {0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f};
  alignas(16) static constexpr uint32_t kHigh[4] = {0, 0x30303030, 0, 0x30303030};
  const auto a = hn::TableLookupLanes(v, hn::SetTableIndices(d4, kA));  // u0 u2 u1 u2
  const auto b = hn::TableLookupLanes(v, hn::SetTableIndices(d4, kB));  // u0 u0 u1 u1
  // Scales 0-3: u0 & 0x3f..; scales 4-7: (u2 & 0x0f..) | top two bits of u0's bytes at bits
  // 4-5; the minimums likewise from u1 and u2's high nibbles.
  const auto w = hn::OrAnd(hn::And(hn::Shr(a, hn::Load(d4, kShift)), hn::Load(d4, kLow)),
                           hn::ShiftRight<2>(b), hn::Load(d4, kHigh));
  return hn::BitCast(hn::Full128<uint8_t>(), w);
}

template <typename D = DF>  // a template, so that the branch for other vector sizes is not compiled
HWY_INLINE void KScales(const uint8_t* p, float* HWY_RESTRICT sm) {
  const D df;
  const hn::Full128<uint32_t> d4;
  const hn::Full128<float> f4;
  const auto v = hn::LoadU(d4, reinterpret_cast<const uint32_t*>(p));
  const auto bytes = KScaleBytes(v);  // scales 0-7, minimums 0-7
  alignas(16) static constexpr float kSign[4] = {1, -1, 0, 0};
  const auto dd =
      hn::Mul(hn::PromoteTo(f4, hn::LowerHalf(hn::BitCast(hn::Full128<hwy::float16_t>(), v))),
              hn::Load(f4, kSign));  // d, -dmin
  if constexpr (hn::MaxLanes(D()) == 16) {
    alignas(64) static constexpr int32_t kHalves[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                        1, 1, 1, 1, 1, 1, 1, 1};
    const auto wide = hn::ZeroExtendVector(df, hn::ZeroExtendVector(hn::Half<D>(), dd));
    const auto factor = hn::TableLookupLanes(wide, hn::SetTableIndices(df, kHalves));
    const auto q =
        hn::PromoteTo(hn::RebindToSigned<D>(), hn::BitCast(hn::Full128<int8_t>(), bytes));
    hn::Store(hn::Mul(hn::ConvertTo(df, q), factor), df, sm);
  } else {
    HWY_ALIGN uint8_t b[16];
    hn::Store(bytes, hn::Full128<uint8_t>(), b);
    const float d = hn::GetLane(dd), dmin = hn::GetLane(hn::Shuffle2301(dd));
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += kLanes) {
      const VF factor = hn::Set(df, i < 8 ? d : dmin);
      hn::Store(hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), LoadBytes(b + i))), factor), df,
                sm + i);
    }
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32; each run of 32 nibble bytes holds sub-block 2g in its
// low nibbles and 2g + 1 in its high ones; Q5_K's fifth bit of sub-block s's element l is bit
// s of byte l of 32 bytes before the nibbles. (d * scale) * q - (dmin * min).
template <bool kFive>
struct QK {
  static constexpr int64_t kElems = 256, kBytes = kFive ? 176 : 144;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    HWY_ALIGN float sm[16];
    KScales(p, sm);
    ReadBack(sm);
    const uint8_t* qh = p + 16;
    const uint8_t* qs = p + (kFive ? 48 : 16);
    const VU low = hn::Set(DU(), 15u);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const VF s0 = hn::Set(df, sm[2 * g]), m0 = hn::Set(df, sm[8 + 2 * g]);
      const VF s1 = hn::Set(df, sm[2 * g + 1]), m1 = hn::Set(df, sm[9 + 2 * g]);
      if constexpr (kTables && !kFive) {
        const VF iota = hn::Iota(df, 0);
        const VF t0 = Affine<kExact>(iota, s0, m0), t1 = Affine<kExact>(iota, s1, m1);
#pragma GCC unroll 2
        for (int e = 0; e < 32; e += 16) {
          const VU v = LoadBytes(qs + 32 * g + e);
          emit(64 * g + e, Lookup(t0, v));
          emit(64 * g + 32 + e, Lookup(t1, hn::ShiftRight<4>(v)));
        }
      } else {
#pragma GCC unroll 4
        for (int e = 0; e < 32; e += kLanes) {
          const VU v = LoadBytes(qs + 32 * g + e);
          VU q0 = hn::And(v, low), q1 = hn::ShiftRight<4>(v);
          if constexpr (kFive) {
            const VU h = LoadBytes(qh + e);
            q0 = Merge(q0, FifthBitAt4(h, 2 * g), 16);
            q1 = Merge(q1, FifthBitAt4(h, 2 * g + 1), 16);
          }
          emit(64 * g + e, Dequant<kExact>(q0, s0, m0));
          emit(64 * g + 32 + e, Dequant<kExact>(q1, s1, m1));
        }
      }
    }
  }
};

// Q6_K: two halves of 128; in half h, run j of 32 takes nibble byte (j % 2) * 32 + l of the
// half's 64 (low nibble for j < 2) and bits 2j, 2j + 1 of its pair byte l; a signed scale
// per 16 values. (d * scale) * (q - 32).
struct Q6_K {
  static constexpr int64_t kElems = 256, kBytes = 210;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    const DI di;
    const VF d = hn::Set(df, LoadF16(p + 208));
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    HWY_ALIGN float ds[16], offset[16];  // d * scale, -32 * d * scale
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += kLanes) {
      const VF s = hn::Mul(
          hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), sc + i))), d);
      hn::Store(s, df, ds + i);
      if constexpr (!kExact) hn::Store(hn::Mul(s, hn::Set(df, -32.0f)), df, offset + i);
    }
    ReadBack(ds);
    if constexpr (!kExact) ReadBack(offset);
    const VU low = hn::Set(DU(), 15u);
    auto put = [&](int e, VU q) HWY_ATTR {
      const VF s = hn::Set(df, ds[e / 16]);
      emit(e, Dequant<kExact, 32>(q, s, kExact ? s : hn::Set(df, offset[e / 16])));
    };
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const uint8_t* lo = p + 64 * half;
      const uint8_t* hi = p + 128 + 32 * half;
#pragma GCC unroll 4
      for (int l = 0; l < 32; l += kLanes) {
        const VU a = LoadBytes(lo + l), b = LoadBytes(lo + 32 + l), h = LoadBytes(hi + l);
        const int e = 128 * half + l;
        put(e, Merge(hn::And(a, low), hn::ShiftLeft<4>(h), 48));
        put(e + 32, Merge(hn::And(b, low), hn::ShiftLeft<2>(h), 48));
        put(e + 64, Merge(hn::ShiftRight<4>(a), h, 48));
        put(e + 96, Merge(hn::ShiftRight<4>(b), hn::ShiftRight<2>(h), 48));
      }
    }
  }
};

// Plain rows: a "block" is one vector of values; Scalar(row, j) reads value j for the values
// past the last whole vector.
struct F32 {
  static constexpr int64_t kElems = kLanes, kBytes = 4 * kLanes;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    emit(0, hn::LoadU(DF(), reinterpret_cast<const float*>(p)));
  }
  static float Scalar(const uint8_t* row, int64_t j) {
    float v;
    std::memcpy(&v, row + 4 * j, 4);
    return v;
  }
};

struct F16 {
  static constexpr int64_t kElems = kLanes, kBytes = 2 * kLanes;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const hn::Rebind<uint16_t, DF> du16;
    const auto h = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p));
    VF v = hn::PromoteTo(df, hn::BitCast(dh, h));
    if constexpr (kExact) {
      // A NaN keeps its payload as it is, as in prism::f16_to_f32, where the conversion
      // instruction quiets a signaling one.
      const DU du;
      const VU w = hn::PromoteTo(du, h);
      const VU nan = hn::Or(
          hn::ShiftLeft<16>(hn::And(w, hn::Set(du, 0x8000u))),
          hn::Or(hn::ShiftLeft<13>(hn::And(w, hn::Set(du, 0x3ffu))), hn::Set(du, 0x7f800000u)));
      v = hn::IfThenElse(hn::IsNaN(v), hn::BitCast(df, nan), v);
    }
    emit(0, v);
  }
  static float Scalar(const uint8_t* row, int64_t j) {
    uint16_t h;
    std::memcpy(&h, row + 2 * j, 2);
    return f16_to_f32(h);
  }
};

struct BF16 {
  static constexpr int64_t kElems = kLanes, kBytes = 2 * kLanes;
  template <bool kExact = false, typename Emit>
  static HWY_INLINE void Block(const uint8_t* p, Emit&& emit) {
    const hn::Rebind<uint16_t, DF> dh;
    const VU bits = hn::PromoteTo(DU(), hn::LoadU(dh, reinterpret_cast<const uint16_t*>(p)));
    emit(0, hn::BitCast(DF(), hn::ShiftLeft<16>(bits)));
  }
  static float Scalar(const uint8_t* row, int64_t j) {
    uint16_t h;
    std::memcpy(&h, row + 2 * j, 2);
    return bf16_to_f32(h);
  }
};

using Q4_0 = Q4<false>;
using Q4_1 = Q4<true>;
using Q5_0 = Q5<false>;
using Q5_1 = Q5<true>;
using Q4_K = QK<false>;
using Q5_K = QK<true>;

template <typename Format>
constexpr bool kPlain = Format::kElems == kLanes;

// How far ahead of the block in use the weights of a block format are prefetched, when they
// come from memory. Measured (one core of an Intel Xeon, Llama-1B-shaped weights streamed from
// memory, one activation row): 1 KiB ahead made Q4_K 5-20 % faster and Q8_0 15-35 %, 512
// bytes and 2 KiB did about as well; the hardware prefetchers alone fall behind on four
// streams.
constexpr int64_t kPrefetchAhead = 1024;

// Accumulators a row of a tile holds: two for block formats, taking a block's vectors in turn
// (a K-quant block is 16 multiply-adds into each, whose latency one chain would wait out), one
// for plain f16. The same for every count of activation rows, so that a row's sums are added
// in the same order whatever rows it comes with: batched decoding gives each row the bits it
// gets alone. Where G activation rows against kRows weight rows would need more accumulators
// than there are registers, the weight rows go in smaller tiles (kTileRows) instead.
template <typename Format>
constexpr int kSplit = kPlain<Format> ? 1 : 2;
template <typename Format, int G>
constexpr int kTileRows = [] {
  int r = kRows;
  while (r > 1 && r * G * kSplit < Format >> kAccumulators) r /= 2;
  return r;
}();

// out[g * ldo + rows[r]] = x[g] . W[r] for R weight rows w[r] and G activation rows ldx
// apart, k values each; `prefetch` when the weights come from memory (the first chunk of
// activation rows), not from cache.
template <typename Format, int R, int G>
HWY_NOINLINE void Tile(const float* HWY_RESTRICT x, int64_t ldx, const uint8_t* const* w, int64_t k,
                       float* out, int64_t ldo, const int64_t* rows, bool prefetch) {
  const DF df;
  constexpr int S = kSplit<Format>;
  VF acc[R][G][S];
#pragma GCC unroll 32
  for (int i = 0; i < R * G * S; ++i) acc[i / (G * S)][i / S % G][i % S] = hn::Zero(df);
  const uint8_t* row[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) row[r] = w[r];
  const int64_t blocks = k / Format::kElems;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * Format::kElems;
    if (!kPlain<Format> && prefetch) {
      // Past a row's end lies the next row of its quarter (for_row_groups), the stream's next
      // bytes; a prefetch does not fault.
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(row[r] + b * Format::kBytes);
        for (int64_t j = 0; j < Format::kBytes; j += 64)
          hwy::Prefetch(reinterpret_cast<const uint8_t*>(at + kPrefetchAhead + j));
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      Format::Block(row[r] + b * Format::kBytes, [&](int e, VF v) HWY_ATTR {
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          VF& a = acc[r][g][e / kLanes % S];
          a = hn::MulAdd(v, hn::LoadU(df, xb + g * ldx + e), a);
        }
      });
    }
  }
  float sums[R][G];
#pragma GCC unroll 16
  for (int i = 0; i < R * G; ++i) {
    VF a = acc[i / G][i % G][0];
    if constexpr (S == 2) a = hn::Add(a, acc[i / G][i % G][1]);
    sums[i / G][i % G] = hn::GetLane(hn::SumOfLanes(df, a));
  }
  if constexpr (kPlain<Format>) {
    for (int64_t j = blocks * Format::kElems; j < k; ++j) {
      for (int r = 0; r < R; ++r) {
        const float v = Format::Scalar(row[r], j);
        for (int g = 0; g < G; ++g) sums[r][g] += x[g * ldx + j] * v;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) out[g * ldo + rows[r]] = sums[r][g];
}

using TileFn = void (*)(const float*, int64_t, const uint8_t* const*, int64_t, float*, int64_t,
                        const int64_t*, bool);

// kRows weight rows against G activation rows, in tiles of kTileRows<Format, G> weight rows.
template <typename Format, int G>
void RowsTile(const float* x, int64_t ldx, const uint8_t* const* w, int64_t k, float* out,
              int64_t ldo, const int64_t* rows, bool prefetch) {
  constexpr int R = kTileRows<Format, G>;
  for (int r = 0; r < kRows; r += R)
    Tile<Format, R, G>(x, ldx, w + r, k, out, ldo, rows + r, prefetch);
}

// RowsTile<Format, G> for G = 1..kChunk, at index G - 1.
template <typename Format, int... G>
constexpr auto TileTable(std::integer_sequence<int, G...>) {
  return std::array<TileFn, sizeof...(G)>{&RowsTile<Format, G + 1>...};
}

// All the weight rows, kRows at a time from kRows quarters of [0, n) (dot_rows.h's
// for_row_groups), each group against the activation rows in chunks of up to kChunk: the first
// chunk reads the group's weights from memory, the next ones from cache. (Two weight rows
// against 8 activation rows, holding as many sums, were slower: 8 rows of x no longer fit in
// L1.)
template <typename Format>
void Rows(const float* x, int64_t ldx, int64_t m, const uint8_t* w, int64_t row_bytes, int64_t n,
          int64_t k, float* out, int64_t ldo) {
  static constexpr auto tiles = TileTable<Format>(std::make_integer_sequence<int, kChunk>{});
  const uint8_t* ptrs[kRows];
  auto run = [&](const int64_t* rows) HWY_ATTR {
    for (int r = 0; r < kRows; ++r) ptrs[r] = w + rows[r] * row_bytes;
    for (int64_t i = 0; i < m; i += kChunk) {
      const int64_t g = std::min<int64_t>(kChunk, m - i);
      tiles[g - 1](x + i * ldx, ldx, ptrs, k, out + i * ldo, ldo, rows, i == 0);
    }
  };
  for_row_groups(0, n, run);
}

// The weights kPrefetchAhead bytes past the block at p (past a row's end: the next row's).
template <typename Format>
HWY_INLINE void PrefetchBlock(const uint8_t* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + kPrefetchAhead;
  for (int64_t j = 0; j < Format::kBytes; j += 64)
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(at + j));
}

// dequantize_rows: each block through Format::Block<true> (the reference's roundings), its
// vectors stored as they come, in f32 or rounded to bf16.
template <typename Format, bool kBF16>
void DequantRows(const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out,
                 int64_t ldo) {
  using T = std::conditional_t<kBF16, uint16_t, float>;
  const int64_t blocks = k / Format::kElems;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = w + r * row_bytes;
    T* o = reinterpret_cast<T*>(out) + r * ldo;
    for (int64_t b = 0; b < blocks; ++b) {
      T* ob = o + b * Format::kElems;
      if constexpr (!kPlain<Format>) PrefetchBlock<Format>(row + b * Format::kBytes);
      Format::template Block<true>(row + b * Format::kBytes, [&](int e, VF v) HWY_ATTR {
        if constexpr (kBF16) {
          StoreBf16(DF(), v, ob + e);  // as prism::f32_to_bf16 rounds (bf16-inl.h)
        } else {
          hn::StoreU(v, DF(), ob + e);
        }
      });
    }
    if constexpr (kPlain<Format>) {
      for (int64_t j = blocks * Format::kElems; j < k; ++j) {
        const float v = Format::Scalar(row, j);
        if constexpr (kBF16) {
          o[j] = f32_to_bf16(v);
        } else {
          o[j] = v;
        }
      }
    }
  }
}

// With AVX-512 BF16 (which Highway 1.0.3 cannot express: a function target attribute, as in
// avx512_bf16.h), vcvtneps2bf16 rounds 16 values in one instruction where StoreBf16 takes
// nine, to the same bits (to nearest even; a NaN's top half, made quiet) except that it reads
// f32 subnormals as zeros. The block formats never produce one: their values are sums of
// products of f16 scales with integers, integer multiples of 2^-24, zero or at least 2^-24
// in magnitude (F16 rows likewise); F32 and BF16 rows may hold subnormals and take
// StoreBf16.
#undef PRISM_QUANT_ROWS_VCVTNE
#undef PRISM_QUANT_ROWS_ATTR_BF16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#define PRISM_QUANT_ROWS_VCVTNE 1
#define PRISM_QUANT_ROWS_ATTR_BF16 __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

template <typename Format>
PRISM_QUANT_ROWS_ATTR_BF16 void DequantRowsVcvtne(const uint8_t* w, int64_t row_bytes, int64_t n,
                                                  int64_t k, uint8_t* out, int64_t ldo) {
  static_assert(!kPlain<Format> || std::is_same_v<Format, F16>);
  const int64_t blocks = k / Format::kElems;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = w + r * row_bytes;
    uint16_t* o = reinterpret_cast<uint16_t*>(out) + r * ldo;
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t* ob = o + b * Format::kElems;
      if constexpr (!kPlain<Format>) PrefetchBlock<Format>(row + b * Format::kBytes);
      Format::template Block<true>(
          row + b * Format::kBytes, [&](int e, VF v) PRISM_QUANT_ROWS_ATTR_BF16 {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + e),
                                reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v.raw)));
          });
    }
    if constexpr (kPlain<Format>) {
      for (int64_t j = blocks * Format::kElems; j < k; ++j)
        o[j] = f32_to_bf16(Format::Scalar(row, j));
    }
  }
}
#else
#define PRISM_QUANT_ROWS_VCVTNE 0
#endif

// dequantize_rows' kernel for Format into f32, or into bf16 (vcvtneps2bf16 where the CPU has
// AVX-512 BF16 and the format allows it).
template <typename Format>
DequantRowsFn DequantTo(bool bf16, bool avx512_bf16) {
  if (!bf16) return &DequantRows<Format, false>;
#if PRISM_QUANT_ROWS_VCVTNE
  if constexpr (!std::is_same_v<Format, F32> && !std::is_same_v<Format, BF16>) {
    if (avx512_bf16) return &DequantRowsVcvtne<Format>;
  }
#endif
  return &DequantRows<Format, true>;
}

// quantize_activations' roundings (ggml's quantize_row_q8_0_ref and quantize_row_q8_K_ref, as
// the scalar code in quant_rows' HWY_ONCE part computes them), a vector at a time: the same
// values, bit for bit. The largest magnitude does not depend on the order it is found in.

// Rounds v to the nearest integer, halves away from zero (C's roundf), for |v| < 2^23.
HWY_INLINE VF RoundHalfAway(VF v) {
  const DF df;
  const VF t = hn::Trunc(v);
  const VF half = hn::Abs(hn::Sub(v, t));  // exact
  return hn::Add(
      t, hn::IfThenElseZero(hn::Ge(half, hn::Set(df, 0.5f)), hn::CopySign(hn::Set(df, 1.0f), v)));
}

// kLanes integral values in [-128, 127] to int8 at q.
HWY_INLINE void StoreInt8(VF v, int8_t* q) {
  const hn::Rebind<int8_t, DF> d8;
  hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(DI(), v)), d8, q);
}

HWY_INLINE float MaxAbs(const float* x, int n) {
  const DF df;
  VF m = hn::Zero(df);
  for (int e = 0; e < n; e += kLanes) m = hn::Max(m, hn::Abs(hn::LoadU(df, x + e)));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

float RoundQ8_0(const float* x, int8_t* q) {
  const DF df;
  const float d = MaxAbs(x, 32) / 127;
  const VF id = hn::Set(df, d != 0 ? 1 / d : 0);
#pragma GCC unroll 8
  for (int e = 0; e < 32; e += kLanes)
    StoreInt8(RoundHalfAway(Rounded(hn::Mul(hn::LoadU(df, x + e), id))), q + e);
  return d;
}

float RoundQ8_K(const float* x, int8_t* q) {
  const DF df;
  const float amax = MaxAbs(x, 256);
  if (amax == 0) {
    std::memset(q, 0, 256);
    return 0;
  }
  int j = 0;
  while (std::fabs(x[j]) != amax) ++j;  // the first of largest magnitude
  const float iscale = -127.0f / x[j];
  const VF scale = hn::Set(df, iscale), top = hn::Set(df, 127.0f);
  for (int e = 0; e < 256; e += kLanes)  // nearest_int: halves to even
    StoreInt8(hn::Min(hn::Round(Rounded(hn::Mul(hn::LoadU(df, x + e), scale))), top), q + e);
  return 1 / iscale;
}

// The integer kernels (quant_rows_int8), with AVX-512 VNNI, which Highway 1.0.3 cannot
// express: compiled with a function target attribute under the AVX-512 targets (AVX3_DL's
// CPUs all have it, and some of AVX3's: Cascade Lake), run where the CPU has it
// (quant_rows_int8 checks). Layouts of the activations' records: PairRecord and KRecord
// above; of the weights: prism/quant/dequantize.cpp.
#undef PRISM_QUANT_ROWS_VNNI
#undef PRISM_QUANT_ROWS_ATTR_VNNI
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && \
    (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#define PRISM_QUANT_ROWS_VNNI 1
#define PRISM_QUANT_ROWS_ATTR_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

namespace vnni {

#define PRISM_VNNI_INLINE PRISM_QUANT_ROWS_ATTR_VNNI HWY_INLINE

PRISM_VNNI_INLINE __m512i Bytes(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }

template <typename T>
PRISM_VNNI_INLINE __m512i LoadV(const T* p) {
  return _mm512_load_si512(p);
}

PRISM_VNNI_INLINE __m512 LoadF(const uint8_t* p) {
  return _mm512_load_ps(reinterpret_cast<const float*>(p));
}

PRISM_VNNI_INLINE float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Two f16 values as f32 lanes: the one at a in lanes 0-7, the one at b in lanes 8-15 (zeros
// with kOne).
template <bool kOne>
PRISM_VNNI_INLINE __m512 PairF16(const uint8_t* a, const uint8_t* b) {
  uint16_t ha, hb;
  std::memcpy(&ha, a, 2);
  __m256i h = _mm256_set1_epi16(static_cast<int16_t>(ha));
  if constexpr (kOne) {
    h = _mm256_maskz_mov_epi16(0x00ff, h);
  } else {
    std::memcpy(&hb, b, 2);
    h = _mm256_mask_set1_epi16(h, 0xff00, static_cast<int16_t>(hb));
  }
  return _mm512_cvtph_ps(h);
}

// 16 nibble bytes at a and at b as 64 unsigned bytes: a's low nibbles, a's high ones, b's low
// ones, b's high ones (zeros for b with kOne): two blocks of Q4_0's and Q4_1's order.
template <bool kOne>
PRISM_VNNI_INLINE __m512i PairNibbles(const uint8_t* a, const uint8_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  __m512i v;
  if constexpr (kOne) {
    v = _mm512_maskz_broadcast_i32x4(0x00ff, lo);
  } else {
    v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(lo), 0xff00,
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  }
  v = _mm512_mask_srli_epi16(v, 0xff00ff00, v, 4);  // the high nibbles of the 2nd, 4th quarter
  return _mm512_and_si512(v, Bytes(15));
}

// Blocks of 32, two a step: Quants<kOne>(p) gives the unsigned values of the blocks at p and
// p + kBytes (of p alone with kOne, zeros after) in the order of a PairRecord, Scales<kOne>(p)
// their d (lanes 0-7, 8-15), Mins<kOne>(p) their m where the format has one (kMin). A
// block's signed value is its unsigned one minus kOffset, which the records take out.
struct Q8_0 {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kMin = false;
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512i Quants(const uint8_t* p) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    __m512i v = _mm512_castsi256_si512(a);
    if constexpr (kOne) {
      v = _mm512_zextsi256_si512(a);
    } else {
      v = _mm512_inserti64x4(
          v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2)), 1);
    }
    return _mm512_xor_si512(v, Bytes(0x80));  // q + 128
  }
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512 Scales(const uint8_t* p) {
    return PairF16<kOne>(p, p + kBytes);
  }
};

// Q4_0 and Q4_1: d, (m,) 16 nibble bytes.
template <bool kMinT>
struct Q4 {
  static constexpr int64_t kBytes = kMinT ? 20 : 18, kQuants = kMinT ? 4 : 2;
  static constexpr bool kMin = kMinT;
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512i Quants(const uint8_t* p) {
    return PairNibbles<kOne>(p + kQuants, p + kBytes + kQuants);
  }
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512 Scales(const uint8_t* p) {
    return PairF16<kOne>(p, p + kBytes);
  }
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512 Mins(const uint8_t* p) {
    return PairF16<kOne>(p + 2, p + kBytes + 2);
  }
};

// Q5_0 and Q5_1: d, (m,) 32 bits (element j's fifth bit: bit j), 16 nibble bytes.
template <bool kMinT>
struct Q5 {
  static constexpr int64_t kBytes = kMinT ? 24 : 22, kHigh = kMinT ? 4 : 2;
  static constexpr bool kMin = kMinT;
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512i Quants(const uint8_t* p) {
    const __m512i v = PairNibbles<kOne>(p + kHigh + 4, p + kBytes + kHigh + 4);
    uint32_t a, b = 0;
    std::memcpy(&a, p + kHigh, 4);
    if constexpr (!kOne) std::memcpy(&b, p + kBytes + kHigh, 4);
    const __mmask64 fifth = _cvtu64_mask64(uint64_t{a} | uint64_t{b} << 32);
    return _mm512_mask_add_epi8(v, fifth, v, Bytes(16));
  }
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512 Scales(const uint8_t* p) {
    return PairF16<kOne>(p, p + kBytes);
  }
  template <bool kOne>
  static PRISM_VNNI_INLINE __m512 Mins(const uint8_t* p) {
    return PairF16<kOne>(p + 2, p + kBytes + 2);
  }
};

// One step of blocks of 32 (two blocks, or the last one alone with kOne) of four weight rows
// at w[r] against G activation records x[g]: each 32-bit lane sums four products, started at
// the record's -offset * (sum of its activations), or at zero where the format's minimum
// takes the activations' sums instead; its sum is scaled by d_w * d_x in f32.
template <typename F, int G, bool kOne>
PRISM_VNNI_INLINE void PairStep(const uint8_t* const* x, const uint8_t* const* w,
                                __m512 (&acc)[kRows][G]) {
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const __m512i q = F::template Quants<kOne>(w[r]);
    const __m512 d = F::template Scales<kOne>(w[r]);
    __m512 mins = _mm512_setzero_ps();
    if constexpr (F::kMin) mins = F::template Mins<kOne>(w[r]);
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      const uint8_t* rec = x[g];
      const __m512i start = F::kMin ? _mm512_setzero_si512() : LoadV(rec + PairRecord::kExtra);
      const __m512i sum = _mm512_dpbusd_epi32(start, q, LoadV(rec + PairRecord::kValues));
      const __m512 dd = _mm512_mul_ps(d, LoadF(rec + PairRecord::kScales));
      acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dd, acc[r][g]);
      if constexpr (F::kMin)
        acc[r][g] = _mm512_fmadd_ps(mins, LoadF(rec + PairRecord::kExtra), acc[r][g]);
    }
  }
}

// The formats without a minimum (Q8_0, Q4_0, Q5_0) sum each block exactly instead: the 4 G
// lane sums vectors of a step (lanes 0-7 the first block's, 8-15 the second's) are reduced,
// a transposition at a time, to one integer sum per block and pair of rows, in two vectors
// whose lane p holds the pair r = p / G, g = p % G (the first block's, then the second's);
// each sum is scaled by d_w * d_x and added into one accumulator of the pairs, block after
// block: for every pair, acc = fma(float(block sum), d_w * d_x, acc) in the blocks' order.
// That is amx_q8_rows' arithmetic (amx_rows.h), bit for bit, so the two kernels give the same
// results and a product may take either by its number of rows.
template <int N>
PRISM_VNNI_INLINE void BlockSums(const __m512i (&s)[N], __m512i& first, __m512i& second) {
  static_assert(N % 4 == 0 && N <= 16);
  __m512i half[N / 2], quarter[4];  // quarter[i] lane 4 c + t: s[4 i + t]'s sum in quarter c
#pragma GCC unroll 8
  for (int i = 0; i < N / 2; ++i)
    half[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2 * i], s[2 * i + 1]),
                               _mm512_unpackhi_epi32(s[2 * i], s[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    quarter[i] = i < N / 4 ? _mm512_add_epi32(_mm512_unpacklo_epi64(half[2 * i], half[2 * i + 1]),
                                              _mm512_unpackhi_epi64(half[2 * i], half[2 * i + 1]))
                           : _mm512_setzero_si512();
  }
  // Quarters 0 and 1 are the first block's, 2 and 3 the second's.
  __m512i both[2];  // [quarter[2 j] first, second; quarter[2 j + 1] first, second]
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {
    const __m512i x = quarter[2 * j], y = quarter[2 * j + 1];
    both[j] = _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  first = _mm512_shuffle_i32x4(both[0], both[1], _MM_SHUFFLE(2, 0, 2, 0));
  second = _mm512_shuffle_i32x4(both[0], both[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// The lanes of the pairs' vectors (lane p: weight row p / G, activation row p % G) that hold
// weight row r, and those that hold activation row g.
template <int G>
constexpr __mmask16 RowLanes(int r) {
  return static_cast<__mmask16>(((1u << G) - 1) << (G * r));
}
template <int G>
constexpr __mmask16 ColLanes(int g) {
  unsigned mask = 0;
  for (int r = 0; r < kRows; ++r) mask |= 1u << (G * r + g);
  return static_cast<__mmask16>(mask);
}

template <typename F, int G, bool kOne>
PRISM_VNNI_INLINE void ExactStep(const uint8_t* const* x, const uint8_t* const* w, __m512& acc) {
  __m512i sums[kRows * G];
  __m256i dw[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};  // f16, lane p: row p / G
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const __m512i q = F::template Quants<kOne>(w[r]);
#pragma GCC unroll 2
    for (int h = 0; h < (kOne ? 1 : 2); ++h) {
      uint16_t d;
      std::memcpy(&d, w[r] + h * F::kBytes, 2);
      dw[h] = _mm256_mask_set1_epi16(dw[h], RowLanes<G>(r), static_cast<int16_t>(d));
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* rec = x[g];
      sums[r * G + g] =
          _mm512_dpbusd_epi32(LoadV(rec + PairRecord::kExtra), q, LoadV(rec + PairRecord::kValues));
    }
  }
  __m512i first, second;
  BlockSums(sums, first, second);
  auto add = [&](__m512i block, int h) PRISM_QUANT_ROWS_ATTR_VNNI {
    __m512 dx = _mm512_setzero_ps();  // lane p: activation row p % G's d
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
      dx = _mm512_mask_mov_ps(dx, ColLanes<G>(g),
                              _mm512_set1_ps(LoadF32(x[g] + PairRecord::kScales + 32 * h)));
    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(dw[h]), dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(block), d, acc);
  };
  add(first, 0);
  if constexpr (!kOne) add(second, 1);
}

// ExactStep for Q4_0 against one activation row (decoding's product), with the lanes summed
// in fewer instructions, most of them off the port the shuffles share: a lane of Q4_0 sums
// four products of a value in [-8, 7] with one in [-127, 127], so two lanes' sums, and four,
// fit in 16 bits, and two vectors are summed pairwise by packing them into words (vpackssdw,
// exact here) and adding the word pairs (vpmaddwd by ones). Twice gives lane 4c + r: row r's
// sum over quarter c of the step's 64 values; a block is two quarters. The sums and their
// scaling are ExactStep's, so are the bits.
PRISM_VNNI_INLINE void Q4_0StepOne(const uint8_t* x, const uint8_t* const* w, __m512& acc) {
  using F = Q4<false>;
  const __m512i start = LoadV(x + PairRecord::kExtra), values = LoadV(x + PairRecord::kValues);
  __m512i s[kRows];
  __m256i dw = _mm256_setzero_si256();  // f16: words 0-3 the rows' first d, words 8-11 second
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    s[r] = _mm512_dpbusd_epi32(start, F::Quants<false>(w[r]), values);
    uint16_t d[2];
    std::memcpy(&d[0], w[r], 2);
    std::memcpy(&d[1], w[r] + F::kBytes, 2);
    dw = _mm256_mask_set1_epi16(dw, static_cast<__mmask16>(1u << r), static_cast<int16_t>(d[0]));
    dw = _mm256_mask_set1_epi16(dw, static_cast<__mmask16>(1u << (8 + r)),
                                static_cast<int16_t>(d[1]));
  }
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i s01 = _mm512_madd_epi16(_mm512_packs_epi32(s[0], s[1]), ones);
  const __m512i s23 = _mm512_madd_epi16(_mm512_packs_epi32(s[2], s[3]), ones);
  const __m512i quarters = _mm512_madd_epi16(_mm512_packs_epi32(s01, s23), ones);
  // Lanes 0-3: the first block's sums of the four rows; lanes 8-11: the second's.
  const __m512i blocks =
      _mm512_add_epi32(quarters, _mm512_shuffle_i32x4(quarters, quarters, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(dw), LoadF(x + PairRecord::kScales));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(blocks), d, acc);
  const __m512i second = _mm512_shuffle_i32x4(blocks, blocks, _MM_SHUFFLE(2, 2, 2, 2));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(second),
                        _mm512_shuffle_f32x4(d, d, _MM_SHUFFLE(2, 2, 2, 2)), acc);
}

// out[g * ldo + rows[r]] = x[g] . W[r]: blocks of 32, two a step.
template <typename F, int G>
PRISM_QUANT_ROWS_ATTR_VNNI HWY_NOINLINE void PairTile(const uint8_t* x, int64_t stride,
                                                      const uint8_t* const* w, int64_t blocks,
                                                      float* out, int64_t ldo, const int64_t* rows,
                                                      bool prefetch) {
  constexpr bool kExact = !F::kMin;
  __m512 acc[kRows][G];  // with kExact, acc[0][0] only: lane r * G + g
#pragma GCC unroll 16
  for (int i = 0; i < kRows * G; ++i) acc[i / G][i % G] = _mm512_setzero_ps();
  const uint8_t* xs[G];
  const uint8_t* ws[kRows];
  auto at = [&](int64_t s) PRISM_QUANT_ROWS_ATTR_VNNI {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) xs[g] = x + g * stride + s * PairRecord::kBytes;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) ws[r] = w[r] + s * 2 * F::kBytes;
  };
  const int64_t pairs = blocks / 2;
  for (int64_t s = 0; s < pairs; ++s) {
    at(s);
    if (prefetch) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r)
        for (int64_t j = 0; j < 2 * F::kBytes; j += 64) hwy::Prefetch(ws[r] + kPrefetchAhead + j);
    }
    if constexpr (G == 1 && std::is_same_v<F, Q4<false> >) {
      Q4_0StepOne(xs[0], ws, acc[0][0]);
    } else if constexpr (kExact) {
      ExactStep<F, G, false>(xs, ws, acc[0][0]);
    } else {
      PairStep<F, G, false>(xs, ws, acc);
    }
  }
  if (blocks % 2) {
    at(pairs);
    if constexpr (kExact) {
      ExactStep<F, G, true>(xs, ws, acc[0][0]);
    } else {
      PairStep<F, G, true>(xs, ws, acc);
    }
  }
  if constexpr (kExact) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[0][0]);
#pragma GCC unroll 16
    for (int i = 0; i < kRows * G; ++i) out[i % G * ldo + rows[i / G]] = lanes[i];
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < kRows * G; ++i)
      out[i % G * ldo + rows[i / G]] = _mm512_reduce_add_ps(acc[i / G][i % G]);
  }
}

// The index vectors of vpermw that spread sub-block scales (16-bit words) over the 16-bit
// lanes of two vectors of lane sums packed by vpackssdw (packs(a, b): in each 128-bit
// quarter c, four lanes of a, then four of b). Q4_K, Q5_K: a and b each hold two sub-blocks
// of 32 (quarters 0-1, 2-3); h = 0 packs sub-blocks 0-3, h = 1 sub-blocks 4-7. Q6_K: a and b
// each hold four groups of 16 (a quarter each), a the first 64 values of half h, b the next
// 64.
struct KIndices {
  alignas(64) uint16_t qk[2][32];
  alignas(64) uint16_t q6[2][32];
};
constexpr KIndices MakeKIndices() {
  KIndices t{};
  for (int h = 0; h < 2; ++h) {
    for (int word = 0; word < 32; ++word) {
      const int quarter = word / 8, fromb = word % 8 >= 4;
      t.qk[h][word] = static_cast<uint16_t>(4 * h + 2 * fromb + (quarter >= 2));
      t.q6[h][word] = static_cast<uint16_t>(8 * h + 4 * fromb + quarter);
    }
  }
  return t;
}
alignas(64) constexpr KIndices kKIndices = MakeKIndices();

// Q4_K and Q5_K: Load(p) unpacks a block's values (64 unsigned bytes for each pair of
// sub-blocks 2g, 2g + 1, in value order), its scales spread for Sums' packed sums, its
// minimums as 8 words, d and dmin; Sums(block, record) gives 16 lanes whose total is
// sum_j scale_j * (the sub-block's integer product with the record's values).
template <bool kFive>
struct QK {
  static constexpr int64_t kBytes = kFive ? 176 : 144;
  static constexpr bool kMin = true;
  struct Block {
    __m512i q[4], scales[2];
    __m128i mins;  // the minimums, 8 words
    __m128 dd;     // d, -dmin (lanes 2-3 unused)
  };
  static PRISM_VNNI_INLINE Block Load(const uint8_t* p) {
    Block b;
    const hn::Full128<uint32_t> d4;
    const auto head = hn::LoadU(d4, reinterpret_cast<const uint32_t*>(p));
    const __m128i bytes = KScaleBytes(head).raw;  // scales 0-7, minimums 0-7
    b.dd = _mm_xor_ps(_mm_cvtph_ps(head.raw), _mm_castsi128_ps(_mm_setr_epi32(0, INT32_MIN, 0, 0)));
    b.mins = _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8));
    const __m512i words = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(bytes));
    for (int h = 0; h < 2; ++h)
      b.scales[h] = _mm512_permutexvar_epi16(LoadV(kKIndices.qk[h]), words);
    const uint8_t* qs = p + (kFive ? 48 : 16);
    __m512i high = _mm512_setzero_si512();
    if constexpr (kFive)
      high = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      __m512i v =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g)));
      v = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xffff0000, v, 4), Bytes(15));
      if constexpr (kFive) {
        // Sub-block 2g's fifth bits are bit 2g of the 32 bytes, 2g + 1's bit 2g + 1.
        const __m512i bit = _mm512_mask_blend_epi64(0xf0, Bytes(1 << (2 * g)), Bytes(2 << (2 * g)));
        v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(high, bit), v, Bytes(16));
      }
      b.q[g] = v;
    }
    return b;
  }
  static PRISM_VNNI_INLINE __m512i Sums(const Block& b, const uint8_t* rec) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i s[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) s[g] = _mm512_dpbusd_epi32(zero, b.q[g], LoadV(rec + 64 * g));
    // Lane sums of at most 4 * 31 * 127: they fit in 16 bits.
    const __m512i sum = _mm512_madd_epi16(_mm512_packs_epi32(s[0], s[1]), b.scales[0]);
    return _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(s[2], s[3]), b.scales[1]);
  }
};

// Q6_K: per half of 128 values, a = values 0-63 (low nibbles of the half's 64 bytes, bits 0-1
// and 2-3 of its 32 high-bit bytes), b = values 64-127 (high nibbles, bits 4-5 and 6-7); the
// offset -32 as -32 * scale times the activations' sums of 16.
struct Q6_K {
  static constexpr int64_t kBytes = 210;
  static constexpr bool kMin = false;
  struct Block {
    __m512i q[4], scales[2], offset;
    __m128i mins;  // unused
    __m128 dd;     // d (lanes 1-3 unused)
  };
  static PRISM_VNNI_INLINE Block Load(const uint8_t* p) {
    Block b;
    b.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(p[208] | p[209] << 8));
    b.mins = _mm_setzero_si128();
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
    const __m512i wide = _mm512_zextsi256_si512(sc);
    for (int h = 0; h < 2; ++h)
      b.scales[h] = _mm512_permutexvar_epi16(LoadV(kKIndices.q6[h]), wide);
    b.offset = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc, _mm256_set1_epi16(-32)));
    const __m512i low = Bytes(15), two = Bytes(0x30);
    // (a & 15) | b, b's other bits zero: vpternlogd.
    auto merge = [&](__m512i a, __m512i hb) PRISM_QUANT_ROWS_ATTR_VNNI {
      return _mm512_ternarylogic_epi32(a, hb, low, 0xec);
    };
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      // Bits 0-1 (values 0-31) and 2-3 (32-63) to bits 4-5; bits 4-5 (64-95), 6-7 (96-127).
      const __m512i ha = _mm512_and_si512(
          _mm512_sllv_epi16(
              qh, _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(4), _mm512_set1_epi16(2))),
          two);
      const __m512i hb = _mm512_and_si512(_mm512_mask_srli_epi16(qh, 0xffff0000, qh, 2), two);
      b.q[2 * h] = merge(ql, ha);
      b.q[2 * h + 1] = merge(_mm512_srli_epi16(ql, 4), hb);
    }
    return b;
  }
  static PRISM_VNNI_INLINE __m512i Sums(const Block& b, const uint8_t* rec) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i s[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) s[i] = _mm512_dpbusd_epi32(zero, b.q[i], LoadV(rec + 64 * i));
    // Lane sums of at most 4 * 63 * 127: they fit in 16 bits.
    __m512i sum = _mm512_madd_epi16(_mm512_packs_epi32(s[0], s[1]), b.scales[0]);
    sum = _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(s[2], s[3]), b.scales[1]);
    return _mm512_dpwssd_epi32(sum, b.offset, LoadV(rec + KRecord::kSums));
  }
};

// The index vectors of vpermd that spread words pairs of 4 rows' minimums (Wm: quarter r holds
// row r's 8 minimums) and of G activation rows' sums of 32 (quarter g: row g's 8 sums) over
// the pairs' lanes (lane p: weight row p / G, activation row p % G): pair i of the minimums
// of lane p's weight row, and of the sums of its activation row.
struct MinIndices {
  alignas(64) int32_t w[4][4][16], x[4][4][16];  // [G - 1][i][lane]
  alignas(64) int32_t quarters[16];              // lane r <- lane 4 r (the rest: lane 0)
};
constexpr MinIndices MakeMinIndices() {
  MinIndices t{};
  for (int r = 0; r < 4; ++r) t.quarters[r] = 4 * r;
  for (int g = 1; g <= 4; ++g) {
    for (int i = 0; i < 4; ++i) {
      for (int p = 0; p < 16; ++p) {
        t.w[g - 1][i][p] = (p / g % 4) * 4 + i;
        t.x[g - 1][i][p] = (p % g) * 4 + i;
      }
    }
  }
  return t;
}
alignas(64) constexpr MinIndices kMinIndices = MakeMinIndices();

// The index vectors of vpermps that spread 4 weight rows' d and -dmin (quarter r: row r's)
// over the pairs' lanes (lane p: weight row p / G).
struct DIndices {
  alignas(64) int32_t d[4][16], dmin[4][16];  // [G - 1][lane]
};
constexpr DIndices MakeDIndices() {
  DIndices t{};
  for (int g = 1; g <= 4; ++g) {
    for (int p = 0; p < 4 * g; ++p) {
      t.d[g - 1][p] = 4 * (p / g);
      t.dmin[g - 1][p] = 4 * (p / g) + 1;
    }
  }
  return t;
}
alignas(64) constexpr DIndices kDIndices = MakeDIndices();

// One superblock of 4 weight rows (unpacked in b) by G activation rows, summed exactly: for
// each pair, the integer sum T = sum_j scale_j * (sub-block j's integer product) (Q6_K: its
// values less 32), and for Q4_K and Q5_K M = sum_j min_j * (the activations' sum over
// sub-block j), then acc = fma(float(T), d_w * d_x, acc) and acc = fma(float(M), -dmin_w *
// d_x, acc), lane p the pair of weight row p / G and activation row p % G. That is
// amx_k_rows' arithmetic (amx_rows.h), bit for bit: a product may take either kernel by its
// number of rows.
//
// KRowHeads gathers the weight rows' d, -dmin and minimums for KFinish; KFinish scales the
// sums (sums[r * G + g]: lanes whose total is pair (r, g)'s T) and adds them into acc.
template <typename F>
PRISM_VNNI_INLINE void KRowHeads(const typename F::Block& b, int r, __m512& wd, __m512i& wm) {
  const auto quarter = static_cast<__mmask16>(0xf << (4 * r));
  wd = _mm512_mask_broadcast_f32x4(wd, quarter, b.dd);
  if constexpr (F::kMin) wm = _mm512_mask_broadcast_i32x4(wm, quarter, b.mins);
}

template <typename F, int G>
PRISM_VNNI_INLINE void KFinish(const __m512i (&sums)[kRows * G], __m512 wd, __m512i wm,
                               const uint8_t* const* x, __m512& acc);

template <typename F, int G>
PRISM_VNNI_INLINE void KExactStep(const typename F::Block* b, const uint8_t* const* x,
                                  __m512& acc) {
  __m512i sums[kRows * G];
  __m512 wd = _mm512_setzero_ps();      // quarter r: weight row r's d and -dmin
  __m512i wm = _mm512_setzero_si512();  // quarter r: weight row r's minimums
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    KRowHeads<F>(b[r], r, wd, wm);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) sums[r * G + g] = F::Sums(b[r], x[g]);
  }
  KFinish<F, G>(sums, wd, wm, x, acc);
}

template <typename F, int G>
PRISM_VNNI_INLINE void KFinish(const __m512i (&sums)[kRows * G], __m512 wd, __m512i wm,
                               const uint8_t* const* x, __m512& acc) {
  // Lane p: weight row p / G's d and -dmin (zero past the pairs).
  constexpr auto kPairs = static_cast<__mmask16>((1u << (kRows * G)) - 1);
  const __m512 dw = _mm512_maskz_permutexvar_ps(kPairs, LoadV(kDIndices.d[G - 1]), wd);
  __m512i first, second;
  BlockSums(sums, first, second);
  __m512 dx = _mm512_setzero_ps();  // lane p: activation row p % G's d
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
    dx = _mm512_mask_mov_ps(dx, ColLanes<G>(g), _mm512_set1_ps(LoadF32(x[g] + KRecord::kScale)));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(first, second)), _mm512_mul_ps(dw, dx),
                        acc);
  if constexpr (F::kMin) {
    __m512i m = _mm512_setzero_si512();
    if constexpr (G == 1) {
      // One activation row (a decoding step): its sums of 32 against every weight row's
      // minimums at once (quarter r: row r's pairs), each quarter summed within itself and
      // moved to lane r. A third of the instructions of the general way, and the same sums.
      const __m128i s = _mm_load_si128(reinterpret_cast<const __m128i*>(x[0] + KRecord::kSums32));
      const __m512i pairs = _mm512_dpwssd_epi32(m, wm, _mm512_broadcast_i32x4(s));
      __m512i t = _mm512_add_epi32(pairs, _mm512_shuffle_epi32(pairs, _MM_PERM_CDAB));
      t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
      m = _mm512_permutexvar_epi32(LoadV(kMinIndices.quarters), t);
    } else {
      __m512i xm = _mm512_setzero_si512();  // quarter g: activation row g's sums of 32
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m128i s = _mm_load_si128(reinterpret_cast<const __m128i*>(x[g] + KRecord::kSums32));
        xm = _mm512_mask_broadcast_i32x4(xm, static_cast<__mmask16>(0xf << (4 * g)), s);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        m = _mm512_dpwssd_epi32(m, _mm512_permutexvar_epi32(LoadV(kMinIndices.w[G - 1][i]), wm),
                                _mm512_permutexvar_epi32(LoadV(kMinIndices.x[G - 1][i]), xm));
      }
    }
    const __m512 dminw = _mm512_maskz_permutexvar_ps(kPairs, LoadV(kDIndices.dmin[G - 1]), wd);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dminw, dx), acc);
  }
}

// The results of a chunk of G activation rows (lane r * G + g of acc) into out.
template <int G>
PRISM_VNNI_INLINE void KStore(__m512 acc, float* out, int64_t ldo, const int64_t* rows) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
#pragma GCC unroll 16
  for (int i = 0; i < kRows * G; ++i) out[i % G * ldo + rows[i / G]] = lanes[i];
}

// out[i * ldo + rows[r]] = x[i] . W[r] for all the m activation rows: K-quant blocks, one a
// step, each unpacked once for every chunk of 4 activation rows (`full` of them, then one of
// G < 4 rows if G > 0).
template <typename F, int G>
PRISM_QUANT_ROWS_ATTR_VNNI HWY_NOINLINE void KTile(const Int8Rows& x, const uint8_t* const* w,
                                                   int64_t blocks, float* out, int64_t ldo,
                                                   const int64_t* rows) {
  constexpr int kMaxFull = 16 / kChunk;
  const int64_t full = x.m / kChunk;
  __m512 acc[kMaxFull], tail = _mm512_setzero_ps();  // lane r * 4 + g; lane r * G + g
  for (int c = 0; c < kMaxFull; ++c) acc[c] = _mm512_setzero_ps();
  const uint8_t* xs[kChunk];
  for (int64_t s = 0; s < blocks; ++s) {
    if constexpr (G == 1) {
      if (full == 0) {
        // One activation row (decoding): each weight row's block is multiplied as soon as it
        // is unpacked, so that four unpacked blocks do not wait in registers (and spill).
        __m512i sums[kRows];
        __m512 wd = _mm512_setzero_ps();
        __m512i wm = _mm512_setzero_si512();
        xs[0] = x.x + s * KRecord::kBytes;
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          const uint8_t* p = w[r] + s * F::kBytes;
          for (int64_t j = 0; j < F::kBytes; j += 64) hwy::Prefetch(p + kPrefetchAhead + j);
          const typename F::Block b = F::Load(p);
          KRowHeads<F>(b, r, wd, wm);
          sums[r] = F::Sums(b, xs[0]);
        }
        KFinish<F, 1>(sums, wd, wm, xs, tail);
        continue;
      }
    }
    typename F::Block b[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = w[r] + s * F::kBytes;
      for (int64_t j = 0; j < F::kBytes; j += 64) hwy::Prefetch(p + kPrefetchAhead + j);
      b[r] = F::Load(p);
    }
    for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 4
      for (int g = 0; g < kChunk; ++g)
        xs[g] = x.x + (kChunk * c + g) * x.stride + s * KRecord::kBytes;
      KExactStep<F, kChunk>(b, xs, acc[c]);
    }
    if constexpr (G > 0) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        xs[g] = x.x + (kChunk * full + g) * x.stride + s * KRecord::kBytes;
      KExactStep<F, G>(b, xs, tail);
    }
  }
  for (int64_t c = 0; c < full; ++c) KStore<kChunk>(acc[c], out + kChunk * c * ldo, ldo, rows);
  if constexpr (G > 0) KStore<G>(tail, out + kChunk * full * ldo, ldo, rows);
}

using Int8TileFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, int64_t, float*,
                            int64_t, const int64_t*, bool);

// All the weight rows, kRows at a time from kRows quarters of [0, n), each group against the
// activation rows in chunks of up to kChunk (tiles[g - 1] takes g rows), as Rows does.
void Int8Tiles(const Int8TileFn* tiles, const Int8Rows& x, const uint8_t* w, int64_t row_bytes,
               int64_t n, int64_t blocks, float* out, int64_t ldo) {
  const uint8_t* ptrs[kRows];
  for_row_groups(0, n, [&](const int64_t* rows) {
    for (int r = 0; r < kRows; ++r) ptrs[r] = w + rows[r] * row_bytes;
    for (int64_t i = 0; i < x.m; i += kChunk) {
      const int64_t g = std::min<int64_t>(kChunk, x.m - i);
      tiles[g - 1](x.x + i * x.stride, x.stride, ptrs, blocks, out + i * ldo, ldo, rows, i == 0);
    }
  });
}

static_assert(kChunk == 4, "the tables below");

template <typename F>
void PairRows(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
              float* out, int64_t ldo) {
  static constexpr Int8TileFn kTiles[] = {&PairTile<F, 1>, &PairTile<F, 2>, &PairTile<F, 3>,
                                          &PairTile<F, 4>};
  Int8Tiles(kTiles, x, w, row_bytes, n, k / 32, out, ldo);
}

// Up to 16 activation rows at once (more in turns of 16), as KTile takes them.
template <typename F>
void KRows(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, float* out,
           int64_t ldo) {
  using KTileFn =
      void (*)(const Int8Rows&, const uint8_t* const*, int64_t, float*, int64_t, const int64_t*);
  static constexpr KTileFn kTiles[] = {&KTile<F, 0>, &KTile<F, 1>, &KTile<F, 2>, &KTile<F, 3>};
  const uint8_t* ptrs[kRows];
  for (int64_t i = 0; i < x.m; i += 16) {
    const Int8Rows part{x.x + i * x.stride, x.stride, std::min<int64_t>(16, x.m - i)};
    for_row_groups(0, n, [&](const int64_t* rows) {
      for (int r = 0; r < kRows; ++r) ptrs[r] = w + rows[r] * row_bytes;
      kTiles[part.m % kChunk](part, ptrs, k / 256, out + i * ldo, ldo, rows);
    });
  }
}

// --- Weights with the blocks of 16 rows interleaved (weight_layout.h) -----------------------

//
// A block of 16 rows is a few 64-byte runs, one 32-bit lane a row (run c: bytes 4c..4c+3 of
// each row's quants), and its product with an activation block is one vpdpbusd a run, with
// the four activations the run's lanes take broadcast from memory: the 16 lanes hold the 16
// rows' exact integer sums, and nothing is summed across lanes. Each lane then adds
// fma(float(sum), d_w * d_x) into its row's f32 accumulator, block after block: ExactStep's
// arithmetic, bit for bit. A thread reads its groups from start to end, one stream that the
// hardware prefetchers follow for a tile of up to four activation rows: the software
// prefetches the kernels of weights as stored issue (1 KiB ahead of each of their four
// streams) made one row of these 15-40 % slower on AMD Zen 4 (prism-bench quant, one and two
// cores), and 2 KiB ahead made a tile of four Q8_0 rows 25 % slower. A tile of five rows or
// more takes its weights too slowly for them, and the stream stalls on memory: for those,
// InterleavedTile, on the first chunk of activation rows (the one that reads the group from
// memory), asks for each line of a block pair 4 KiB ahead, into L2 (_MM_HINT_T1). On
// two cores of an AMD EPYC (Zen 4), 1 GiB of Q4_0 or Q8_0 weights of 8192 x 2048 streamed
// (prism-bench quant, medians; billions of multiply-adds a second, without -> with): Q4_0
// against 5 rows 219 -> 274, 8 rows 189 -> 296, 16 rows 231 -> 306; Q8_0 against 5 rows
// 142 -> 179, 8 rows 133 -> 257, 16 rows 182 -> 282. 1-2 KiB ahead did less, and into L1
// (_MM_HINT_T0) less for Q8_0 (16 rows were measured with both chunks of 8 prefetching; the
// second's lines are the first's, in cache by then). The K-quant tiles (at most four rows)
// issue none.
constexpr int64_t kInterleavedAhead = 4096;
constexpr int kInterleavedPrefetchRows = 5;

// How far ahead a tile of `rows` activation rows prefetches its group's stream (0: not at
// all): kInterleavedAhead for five rows or more; for fewer, as far as decode_prefetch_bytes'
// four streams of bf16 weights reach together (2 KiB on Intel by default, none elsewhere, where
// Zen 4 was slower with them, above). On two cores of an Intel Xeon (with AMX's batches off,
// PRISM_CPU_QUANT_ROWS=vnni, as on Intel CPUs without AMX), 1 GiB of 8192 x 2048 weights
// streamed (prism-bench quant, share of a plain read, none -> 2 KiB ahead): Q4_0 one row
// 66-70 % -> 84-89 %, four rows 49-55 % -> 59-63 %; Q8_0 one row 79-85 % -> 88-93 %, four rows
// 55-58 % -> 72-76 %. 512 bytes ahead did less (75 % for Q4_0's row), 4-8 KiB the same. The
// K-quant tiles gained nothing from them and issue none.
PRISM_VNNI_INLINE int64_t InterleavedAhead(int rows, bool stream) {
  if (!stream) return 0;
  return rows >= kInterleavedPrefetchRows ? kInterleavedAhead : kRows * decode_prefetch_bytes();
}

// Asks for the lines of `bytes` bytes at p + ahead into L2 (none with ahead 0). Past a group's
// end lies the next group, the stream's next bytes; a prefetch does not fault.
PRISM_VNNI_INLINE void PrefetchAhead(const uint8_t* p, int64_t bytes, int64_t ahead) {
  if (!ahead) return;
  for (int64_t line = 0; line < bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + ahead + line), _MM_HINT_T1);
}

// sum += q . (the four signed bytes at p, in every lane): vpdpbusd with the bytes broadcast
// from memory by the instruction itself (GCC loads them with a broadcast of its own first,
// an instruction more for each product).
PRISM_VNNI_INLINE void DpbusdBroadcast(__m512i& sum, __m512i q, const uint8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(sum)
      : "v"(q), "m"(*reinterpret_cast<const int32_t*>(p)));
}

// Q4_0: 4 runs of nibble bytes; the low nibbles of run c are values 4c..4c+3 of each row, the
// high ones 16 + 4c..; q[j] takes the activations' bytes 4j..4j+3.
struct Q4_0Rows {
  static constexpr int64_t kRuns = 8, kRunBytes = 4 * 64;
  static PRISM_VNNI_INLINE void Quants(const uint8_t* p, __m512i (&q)[kRuns]) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(p + 64 * c);
      q[c] = _mm512_and_si512(v, Bytes(15));
      q[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), Bytes(15));
    }
  }
};

// Q8_0: 8 runs of signed values, made unsigned (+ 128) for vpdpbusd.
struct Q8_0Rows {
  static constexpr int64_t kRuns = 8, kRunBytes = 8 * 64;
  static PRISM_VNNI_INLINE void Quants(const uint8_t* p, __m512i (&q)[kRuns]) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      q[c] = _mm512_xor_si512(_mm512_loadu_si512(p + 64 * c), Bytes(0x80));
    }
  }
};

// Q4_K and Q5_K: a block of 16 rows is 36 or 44 runs: run 0 the rows' d and dmin (f16 each),
// runs 1-3 their packed scales and minimums, Q5_K's runs 4-11 their fifth bits (run 4 + c:
// bit j of values 4c..4c+3 of sub-block j), then run 8h + c of the quants values 4c..4c+3 of
// sub-blocks 2h (low nibbles) and 2h + 1 (high nibbles) of each row.
template <bool kFive>
struct QKRows {
  static constexpr int64_t kRuns = kFive ? 44 : 36, kQuants = kFive ? 12 : 4;
};
using Q4_KRows = QKRows<false>;
using Q5_KRows = QKRows<true>;

// The results of G activation rows, lane r of acc[g] weight row r of a group of 16, into
// out[g * ldo + r - first] for r in [first, last).
template <int G>
PRISM_VNNI_INLINE void StoreGroup(const __m512 (&acc)[G], float* out, int64_t ldo, int first,
                                  int last) {
  if (first == 0 && last == kQuantGroupRows) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(out + g * ldo, acc[g]);
    return;
  }
  alignas(64) float lanes[kQuantGroupRows];
  for (int g = 0; g < G; ++g) {
    _mm512_store_ps(lanes, acc[g]);
    std::memcpy(out + g * ldo, lanes + first, sizeof(float) * (last - first));
  }
}

// sum += pairs of words of a . the two words at p (in every lane): vpdpwssd with the words
// broadcast from memory by the instruction itself.
PRISM_VNNI_INLINE void DpwssdBroadcast(__m512i& sum, __m512i a, const uint8_t* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0"
      : "+v"(sum)
      : "v"(a), "m"(*reinterpret_cast<const int32_t*>(p)));
}

// The vpshufb indices that take byte j of each 32-bit lane into the lane's low byte (the rest
// zero: pick[j]), and bytes 2i and 2i + 1 into its two words (pairs[i]).
struct KPicks {
  alignas(64) uint8_t pick[4][64];
  alignas(64) uint8_t pairs[2][64];
};
constexpr KPicks MakeKPicks() {
  KPicks t{};
  for (int byte = 0; byte < 64; ++byte) {
    const int lane = byte % 16 / 4 * 4, at = byte % 4;
    for (int j = 0; j < 4; ++j) t.pick[j][byte] = at == 0 ? lane + j : 0x80;
    for (int i = 0; i < 2; ++i) t.pairs[i][byte] = at % 2 == 0 ? lane + 2 * i + at / 2 : 0x80;
  }
  return t;
}
alignas(64) constexpr KPicks kKPicks = MakeKPicks();

// A group of 16 interleaved Q4_K or Q5_K rows at w (`blocks` blocks a row) against G
// activation rows (Q8_K records at x, `stride` bytes apart): out[g * ldo + r - first] = x[g] .
// W[r] for the group's rows r in [first, last). Each lane sums its row's products with a
// sub-block in 32 bits (at most 32 * 31 * 127), multiplies them by the sub-block's scale
// (vpmulld) into T, and the row's minimums (word pairs) by the activations' sums of 32 into M
// (vpdpwssd): the integers KExactStep makes, scaled and summed in f32 as it does, so the same
// bits.
template <bool kFive, int G>
PRISM_QUANT_ROWS_ATTR_VNNI HWY_NOINLINE void KInterleavedTile(const uint8_t* x, int64_t stride,
                                                              const CompactQ8&, const uint8_t* w,
                                                              int64_t blocks, float* out,
                                                              int64_t ldo, int first, int last,
                                                              bool) {
  constexpr int kChains = G >= 2 ? 1 : 2;  // of each sub-block's sums
  using F = QKRows<kFive>;
  constexpr int64_t kBlock = F::kRuns * 64;
  __m512 acc[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  const __m512i low = Bytes(15);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = w + b * kBlock;
    const __m512i head = _mm512_loadu_si512(p);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    const __m512 dminw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    // Bytes of each lane: scales 0-3, 4-7, minimums 0-3, 4-7 (k_scale_min's 6-bit fields).
    const __m512i u0 = _mm512_loadu_si512(p + 64), u1 = _mm512_loadu_si512(p + 128),
                  u2 = _mm512_loadu_si512(p + 192);
    const __m512i six = _mm512_set1_epi32(0x3f3f3f3f), four = _mm512_set1_epi32(0x0f0f0f0f),
                  top = _mm512_set1_epi32(0x30303030);
    const __m512i sc[2] = {_mm512_and_si512(u0, six),
                           _mm512_or_si512(_mm512_and_si512(u2, four),
                                           _mm512_and_si512(_mm512_srli_epi32(u0, 2), top))};
    const __m512i mn[2] = {_mm512_and_si512(u1, six),
                           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), four),
                                           _mm512_and_si512(_mm512_srli_epi32(u1, 2), top))};
    const uint8_t* row[G];
    __m512i t[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      row[g] = x + g * stride + b * KRecord::kBytes;
      t[g] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m512i sa[G][kChains], sb[G][kChains];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
        for (int c = 0; c < kChains; ++c) sa[g][c] = sb[g][c] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_loadu_si512(p + 64 * (F::kQuants + 8 * h + c));
        __m512i qa = _mm512_and_si512(v, low);
        __m512i qb = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        if constexpr (kFive) {
          // Bits 2h and 2h + 1 of the fifth bits' run c to bit 4: (q & 15) | bit.
          const __m512i high = _mm512_loadu_si512(p + 64 * (4 + c)), bit = Bytes(16);
          auto at4 = [&](int from) PRISM_QUANT_ROWS_ATTR_VNNI {
            if (from < 4) return _mm512_and_si512(_mm512_slli_epi16(high, 4 - from), bit);
            if (from > 4) return _mm512_and_si512(_mm512_srli_epi16(high, from - 4), bit);
            return _mm512_and_si512(high, bit);
          };
          qa = _mm512_or_si512(qa, at4(2 * h));
          qb = _mm512_or_si512(qb, at4(2 * h + 1));
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
          DpbusdBroadcast(sa[g][c % kChains], qa, row[g] + 64 * h + 4 * c);
          DpbusdBroadcast(sb[g][c % kChains], qb, row[g] + 64 * h + 32 + 4 * c);
        }
      }
      // Sub-blocks 2h and 2h + 1's scales: bytes 2h % 4 and 2h % 4 + 1 of sc[h / 2].
      const __m512i scale_a = _mm512_shuffle_epi8(sc[h / 2], LoadV(kKPicks.pick[2 * h % 4]));
      const __m512i scale_b = _mm512_shuffle_epi8(sc[h / 2], LoadV(kKPicks.pick[2 * h % 4 + 1]));
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        if constexpr (kChains == 2) {
          sa[g][0] = _mm512_add_epi32(sa[g][0], sa[g][1]);
          sb[g][0] = _mm512_add_epi32(sb[g][0], sb[g][1]);
        }
        t[g] = _mm512_add_epi32(t[g], _mm512_mullo_epi32(sa[g][0], scale_a));
        t[g] = _mm512_add_epi32(t[g], _mm512_mullo_epi32(sb[g][0], scale_b));
      }
    }
    // The minimums as word pairs (2i, 2i + 1) against the activations' sums of 32 likewise.
    __m512i pairs[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      pairs[i] = _mm512_shuffle_epi8(mn[i / 2], LoadV(kKPicks.pairs[i % 2]));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) DpwssdBroadcast(m, pairs[i], row[g] + KRecord::kSums32 + 4 * i);
      const __m512 dx = _mm512_set1_ps(LoadF32(row[g] + KRecord::kScale));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[g]), _mm512_mul_ps(dw, dx), acc[g]);
      acc[g] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dminw, dx), acc[g]);
    }
  }
  StoreGroup<G>(acc, out, ldo, first, last);
}

// Q6_K: blocks in pairs as Q4_0's, a block 52 runs (weight_layout.h's q6_k_run): runs 0-3
// its 16 scales (int8), then three runs for each half h and e < 8: the low bits of values
// 128h + 4e.. (low nibbles) and 128h + 64 + 4e.. (high nibbles), of 128h + 32 + 4e.. and
// 128h + 96 + 4e.., and their high bits (bits 2i, 2i + 1 of value 128h + 32i + 4e..); the
// 16 rows' d (f16) before the pair's runs.
struct Q6_KRows {
  static constexpr int64_t kRunBytes = 52 * 64;
};

// A group of 16 interleaved Q6_K rows at w against G activation rows, as KInterleavedTile:
// each lane sums its row's products with each 16 values (unsigned, 0-63) in 32 bits,
// multiplies them by their scale into T, which starts at -32 * sum_j scale_j * (the
// activations' sum of group j) (vpdpwssd of scale pairs with the records' paired sums): the
// integer KExactStep makes, then its fma, the same bits.
template <int G>
PRISM_QUANT_ROWS_ATTR_VNNI HWY_NOINLINE void Q6KInterleavedTile(const uint8_t* x, int64_t stride,
                                                                const CompactQ8&, const uint8_t* w,
                                                                int64_t blocks, float* out,
                                                                int64_t ldo, int first, int last,
                                                                bool) {
  constexpr int64_t kRunBytes = Q6_KRows::kRunBytes, kPair = 2 * kRunBytes + 64;
  __m512 acc[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  const __m512i low = Bytes(15), two = Bytes(0x30);
  // Block b: its runs at p, its 16 d at `scales`.
  auto block = [&](int64_t b, const uint8_t* p, const uint8_t* scales) PRISM_QUANT_ROWS_ATTR_VNNI {
    __m512i sc[4];  // lane r: row r's scales 4q..4q+3, a byte each
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) sc[q] = _mm512_loadu_si512(p + 64 * q);
    const uint8_t* row[G];
    __m512i t[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      row[g] = x + g * stride + b * KRecord::kBytes;
      __m512i offset = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        // Word pairs (scale 4q, 4q + 2) and (4q + 1, 4q + 3), sign-extended.
        const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(sc[q], 8), 8);
        const __m512i odd = _mm512_srai_epi16(sc[q], 8);
        DpwssdBroadcast(offset, even, row[g] + KRecord::kSumsPaired + 8 * q);
        DpwssdBroadcast(offset, odd, row[g] + KRecord::kSumsPaired + 8 * q + 4);
      }
      t[g] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(offset, 5));
    }
    // For each 16 values (h, i, e / 4): their sums, then times scale 8h + 2i + e / 4.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int eh = 0; eh < 2; ++eh) {
        __m512i sums[G][4];
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) sums[g][i] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int e = 4 * eh; e < 4 * eh + 4; ++e) {
          const uint8_t* runs = p + 64 * (4 + 3 * (8 * h + e));
          const __m512i l0 = _mm512_loadu_si512(runs), l1 = _mm512_loadu_si512(runs + 64),
                        hb = _mm512_loadu_si512(runs + 128);
          // (l & 15) | (high bits at 4-5): vpternlogd on the masked high bits.
          auto merge = [&](__m512i l, __m512i hi) PRISM_QUANT_ROWS_ATTR_VNNI {
            return _mm512_ternarylogic_epi32(l, _mm512_and_si512(hi, two), low, 0xec);
          };
          const __m512i v[4] = {merge(l0, _mm512_slli_epi16(hb, 4)),
                                merge(l1, _mm512_slli_epi16(hb, 2)),
                                merge(_mm512_srli_epi16(l0, 4), hb),
                                merge(_mm512_srli_epi16(l1, 4), _mm512_srli_epi16(hb, 2))};
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i)
              DpbusdBroadcast(sums[g][i], v[i], row[g] + 128 * h + 32 * i + 4 * e);
          }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int j = 8 * h + 2 * i + eh;  // the scale's
          const __m512i scale =
              _mm512_srai_epi32(_mm512_slli_epi32(sc[j / 4], 24 - 8 * (j % 4)), 24);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g)
            t[g] = _mm512_add_epi32(t[g], _mm512_mullo_epi32(sums[g][i], scale));
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 dx = _mm512_set1_ps(LoadF32(row[g] + KRecord::kScale));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[g]), _mm512_mul_ps(dw, dx), acc[g]);
    }
  };
  for (int64_t b = 0; b + 1 < blocks; b += 2) {
    const uint8_t* p = w + b / 2 * kPair;
    block(b, p + 64, p);
    block(b + 1, p + 64 + kRunBytes, p + 32);
  }
  if (blocks % 2) {
    const uint8_t* p = w + blocks / 2 * kPair;
    block(blocks - 1, p + 32, p);
  }
  StoreGroup<G>(acc, out, ldo, first, last);
}

// A group of 16 interleaved rows at w (`blocks` blocks a row) against G activation rows (x,
// `stride` bytes apart, read from their packed copies at `packed`): out[g * ldo + r - first] =
// x[g] . W[r] for the group's rows r in [first, last); `stream` when the group comes from
// memory (the first chunk of activation rows), not from cache.
template <typename F, int G>
PRISM_QUANT_ROWS_ATTR_VNNI HWY_NOINLINE void InterleavedTile(const uint8_t* x, int64_t stride,
                                                             const CompactQ8& packed,
                                                             const uint8_t* w, int64_t blocks,
                                                             float* out, int64_t ldo, int first,
                                                             int last, bool stream) {
  // Independent chains of vpdpbusd for each activation row, enough to cover their latency.
  constexpr int kChains = G >= 4 ? 1 : G >= 2 ? 2 : 4;
  __m512 acc[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  // Block b: its runs at `runs`, its 16 d at `scales`.
  auto block = [&](int64_t b, const uint8_t* runs,
                   const uint8_t* scales) PRISM_QUANT_ROWS_ATTR_VNNI {
    __m512i q[F::kRuns];
    F::Quants(runs, q);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    // The runs in the outer loop: the G rows' (and chains') products are independent.
    const uint8_t* row[G];
    __m512i sums[G][kChains];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      row[g] = x + g * stride;
      int32_t total;
      std::memcpy(&total, row[g] + packed.totals + 4 * b, 4);
      sums[g][0] = _mm512_set1_epi32(total);
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) sums[g][c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int j = 0; j < F::kRuns; ++j) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        __m512i& sum = sums[g][j % kChains];
        DpbusdBroadcast(sum, q[j], row[g] + packed.values + 32 * b + 4 * j);
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) sums[g][0] = _mm512_add_epi32(sums[g][0], sums[g][c]);
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(LoadF32(row[g] + packed.scales + 4 * b)));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[g][0]), d, acc[g]);
    }
  };
  const int64_t pair = 64 + 2 * F::kRunBytes;  // two blocks' d, then their runs
  const int64_t ahead = InterleavedAhead(G, stream);
  for (int64_t b = 0; b + 1 < blocks; b += 2) {
    const uint8_t* p = w + b / 2 * pair;
    PrefetchAhead(p, pair, ahead);
    block(b, p + 64, p);
    block(b + 1, p + 64 + F::kRunBytes, p + 32);
  }
  if (blocks % 2) {
    const uint8_t* p = w + blocks / 2 * pair;
    block(blocks - 1, p + 32, p);
  }
  StoreGroup<G>(acc, out, ldo, first, last);
}

// The tiles of weights of format F kept interleaved (kTiles[g - 1] takes g activation rows),
// and the values a block holds (kElems).
template <typename F>
struct InterleavedTiles {
  static constexpr InterleavedTileFn kTiles[] = {&InterleavedTile<F, 1>, &InterleavedTile<F, 2>,
                                                 &InterleavedTile<F, 3>, &InterleavedTile<F, 4>,
                                                 &InterleavedTile<F, 5>, &InterleavedTile<F, 6>,
                                                 &InterleavedTile<F, 7>, &InterleavedTile<F, 8>};
  static constexpr int64_t kElems = 32;
};
template <bool kFive>
struct InterleavedTiles<QKRows<kFive> > {
  static constexpr InterleavedTileFn kTiles[] = {
      &KInterleavedTile<kFive, 1>, &KInterleavedTile<kFive, 2>, &KInterleavedTile<kFive, 3>,
      &KInterleavedTile<kFive, 4>};
  static constexpr int64_t kElems = 256;
};
template <>
struct InterleavedTiles<Q6_KRows> {
  static constexpr InterleavedTileFn kTiles[] = {&Q6KInterleavedTile<1>, &Q6KInterleavedTile<2>,
                                                 &Q6KInterleavedTile<3>, &Q6KInterleavedTile<4>};
  static constexpr int64_t kElems = 256;
};

// out[i * ldo + r - r0] = x_i . W[r] for rows [r0, r1) of the interleaved weights at w (rows
// row_bytes apart as stored), through interleaved_tiles: chunks of up to 8 activation rows (4
// for the K-quants).
template <typename F>
void InterleavedRows(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                     int64_t k, float* out, int64_t ldo) {
  using Tiles = InterleavedTiles<F>;
  interleaved_tiles(Tiles::kTiles, x, w, row_bytes, r0, r1, k / Tiles::kElems, CompactQ8(k), out,
                    ldo);
}

using Q4_0 = Q4<false>;
using Q4_1 = Q4<true>;
using Q5_0 = Q5<false>;
using Q5_1 = Q5<true>;
using Q4_K = QK<false>;
using Q5_K = QK<true>;

#undef PRISM_VNNI_INLINE

}  // namespace vnni
#else
#define PRISM_QUANT_ROWS_VNNI 0
#endif

}  // namespace

// visit(std::type_identity<Format>{}) for the format struct of `type`, or a null function for
// a type without one: the one table NativeKernel and NativeDequant read.
template <typename Visit>
auto WithFormat(quant::GgmlType type, Visit&& visit) -> decltype(visit(std::type_identity<F32>{})) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::F32:
      return visit(std::type_identity<F32>{});
    case GgmlType::F16:
      return visit(std::type_identity<F16>{});
    case GgmlType::BF16:
      return visit(std::type_identity<BF16>{});
    case GgmlType::Q8_0:
      return visit(std::type_identity<Q8_0>{});
    case GgmlType::Q4_0:
      return visit(std::type_identity<Q4_0>{});
    case GgmlType::Q4_1:
      return visit(std::type_identity<Q4_1>{});
    case GgmlType::Q5_0:
      return visit(std::type_identity<Q5_0>{});
    case GgmlType::Q5_1:
      return visit(std::type_identity<Q5_1>{});
    case GgmlType::Q4_K:
      return visit(std::type_identity<Q4_K>{});
    case GgmlType::Q5_K:
      return visit(std::type_identity<Q5_K>{});
    case GgmlType::Q6_K:
      return visit(std::type_identity<Q6_K>{});
    default:
      return nullptr;
  }
}

QuantRowsFn NativeKernel(quant::GgmlType type) {
  return WithFormat(type, []<typename Format>(std::type_identity<Format>) -> QuantRowsFn {
    return Rows<Format>;
  });
}

DequantRowsFn NativeDequant(quant::GgmlType type, bool bf16, bool avx512_bf16) {
  return WithFormat(type, [&]<typename Format>(std::type_identity<Format>) {
    return DequantTo<Format>(bf16, avx512_bf16);
  });
}

RoundFns NativeRound() { return {&RoundQ8_0, &RoundQ8_K}; }

// The integer kernel for weights of `type` kept interleaved: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K with
// AVX-512 VNNI (`vnni`) under the AVX-512 targets, else Q4_0 with AVX2 (int8_rows_avx2.cpp)
// under any x86 target that has it (NativeInt8's choice); null elsewhere.
QuantRowsInterleavedFn NativeInterleaved(quant::GgmlType type, bool vnni) {
#if PRISM_QUANT_ROWS_VNNI
  if (vnni) {
    if (type == quant::GgmlType::Q4_0) return vnni::InterleavedRows<vnni::Q4_0Rows>;
    if (type == quant::GgmlType::Q8_0) return vnni::InterleavedRows<vnni::Q8_0Rows>;
    if (type == quant::GgmlType::Q4_K) return vnni::InterleavedRows<vnni::Q4_KRows>;
    if (type == quant::GgmlType::Q5_K) return vnni::InterleavedRows<vnni::Q5_KRows>;
    if (type == quant::GgmlType::Q6_K) return vnni::InterleavedRows<vnni::Q6_KRows>;
    return nullptr;
  }
#else
  (void)vnni;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return int8_interleaved_avx2(type);
#else
  (void)type;
  return nullptr;
#endif
}

// The integer kernel for `type`: with AVX-512 VNNI (`vnni`: the CPU has it) under the AVX-512
// targets, else with AVX2 (int8_rows_avx2.cpp) under any x86 target that has it.
QuantRowsInt8Fn NativeInt8(quant::GgmlType type, bool vnni) {
#if PRISM_QUANT_ROWS_VNNI
  using quant::GgmlType;
  if (vnni) {
    switch (type) {
      case GgmlType::Q8_0:
        return vnni::PairRows<vnni::Q8_0>;
      case GgmlType::Q4_0:
        return vnni::PairRows<vnni::Q4_0>;
      case GgmlType::Q4_1:
        return vnni::PairRows<vnni::Q4_1>;
      case GgmlType::Q5_0:
        return vnni::PairRows<vnni::Q5_0>;
      case GgmlType::Q5_1:
        return vnni::PairRows<vnni::Q5_1>;
      case GgmlType::Q4_K:
        return vnni::KRows<vnni::Q4_K>;
      case GgmlType::Q5_K:
        return vnni::KRows<vnni::Q5_K>;
      case GgmlType::Q6_K:
        return vnni::KRows<vnni::Q6_K>;
      default:
        return nullptr;
    }
  }
#else
  (void)vnni;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return int8_rows_avx2(type);
#else
  (void)type;
  return nullptr;
#endif
}

#endif

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(NativeKernel);
HWY_EXPORT(NativeDequant);
HWY_EXPORT(NativeInt8);
HWY_EXPORT(NativeRound);
HWY_EXPORT(NativeInterleaved);

namespace {

QuantRowsFn native_kernel(quant::GgmlType type) {
  simd::current();  // also points Highway's tables at the target in use
  return HWY_DYNAMIC_DISPATCH(NativeKernel)(type);
}

// Rows dequantized into f32, four at a time, and dot_rows' f32 kernel.
void dequantized_rows(quant::GgmlType type, const float* x, int64_t ldx, int64_t m,
                      const std::byte* w, int64_t row_bytes, int64_t n, int64_t k, float* out,
                      int64_t ldo) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  const auto bytes = static_cast<size_t>(k / t.block_elements * t.block_bytes);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(kDotRows * k));
  const DotRowKernels kernels = dot_row_kernels();
  const float* rows[kDotRows];
  float sums[kDotRows];
  for (int64_t n0 = 0; n0 < n; n0 += kDotRows) {
    const int count = static_cast<int>(std::min<int64_t>(kDotRows, n - n0));
    for (int r = 0; r < kDotRows; ++r) {
      float* row = scratch.data() + r * k;
      if (r < count)
        quant::dequantize(type, {w + (n0 + r) * row_bytes, bytes}, {row, static_cast<size_t>(k)});
      rows[r] = r < count ? row : rows[0];
    }
    for (int64_t i = 0; i < m; ++i) {
      kernels.f32(x + i * ldx, rows, k, sums);
      for (int r = 0; r < count; ++r) out[i * ldo + n0 + r] = sums[r];
    }
  }
}

bool cpu_has_avx512_vnni() {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

QuantRowsInt8Fn native_int8(quant::GgmlType type) {
  simd::current();  // also points Highway's tables at the target in use
  return HWY_DYNAMIC_DISPATCH(NativeInt8)(type, cpu_has_avx512_vnni());
}

QuantRowsInterleavedFn native_interleaved(quant::GgmlType type) {
  simd::current();  // also points Highway's tables at the target in use
  return HWY_DYNAMIC_DISPATCH(NativeInterleaved)(type, cpu_has_avx512_vnni());
}

// ggml's vec_dot_type: the format activations take for a product with weights of `type`.
quant::GgmlType activation_format(quant::GgmlType type) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    default:
      return type;  // F32, F16, BF16
  }
}

// What the integer kernels read the weights' values as: value + kOffset, unsigned (Q8_0's
// signed values with their top bit flipped); the activations' records take it out.
int32_t weight_offset(quant::GgmlType type) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::Q4_0:
      return 8;
    case GgmlType::Q5_0:
      return 16;
    case GgmlType::Q8_0:
      return 128;
    default:
      return 0;
  }
}

bool is_pair_format(quant::GgmlType f) {
  return f == quant::GgmlType::Q8_0 || f == quant::GgmlType::Q8_1;
}

// The rounding of ggml's Q8_0 and Q8_1 (quantize_row_q8_0_ref): d = max|x| / 127, values
// x * (1 / d) rounded half away from zero (the reciprocal of the f32 d); d is then kept as
// f16. Returns the f32 d. (NativeRound's vector code computes the same, where there are
// vectors.)
float round_q8_0(const float* x, int8_t* q) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::round(x[j] * id));
  return d;
}

// The rounding of ggml's Q8_K (quantize_row_q8_K_ref): the value of largest magnitude (the
// first, on ties) `max`, iscale = -127 / max, values iscale * x rounded half to even (ggml's
// nearest_int: nearbyint in the default rounding mode), at most 127; d = 1 / iscale. All
// zeros (d = 0) for a block of zeros. Returns d.
float round_q8_k(const float* x, int8_t* q) {
  float amax = 0, max = 0;
  for (int j = 0; j < 256; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0) {
    std::fill(q, q + 256, int8_t{0});
    return 0;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < 256; ++j)
    q[j] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * x[j]))));
  return 1 / iscale;
}

template <typename T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

bool quant_rows_native(quant::GgmlType type) { return native_kernel(type) != nullptr; }

void quant_rows(quant::GgmlType type, const float* x, int64_t ldx, int64_t m, const std::byte* w,
                int64_t row_bytes, int64_t n, int64_t k, float* out, int64_t ldo) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  PRISM_CHECK(quant::can_dequantize(type), "quant_rows: no kernel for ggml type {}", t.name);
  PRISM_CHECK(k >= 0 && k % t.block_elements == 0,
              "quant_rows: {} values are not whole {} blocks of {}", k, t.name, t.block_elements);
  PRISM_CHECK(row_bytes >= k / t.block_elements * t.block_bytes,
              "quant_rows: rows {} bytes apart cannot hold {} {} values", row_bytes, k, t.name);
  PRISM_CHECK(m >= 0 && n >= 0 && (m <= 1 || (ldx >= k && ldo >= n)),
              "quant_rows: bad sizes m={} n={} k={} ldx={} ldo={}", m, n, k, ldx, ldo);
  if (m == 0 || n == 0) return;
  if (QuantRowsFn fn = native_kernel(type)) {
    fn(x, ldx, m, reinterpret_cast<const uint8_t*>(w), row_bytes, n, k, out, ldo);
    return;
  }
  dequantized_rows(type, x, ldx, m, w, row_bytes, n, k, out, ldo);
}

void dequantize_rows(quant::GgmlType type, const std::byte* w, int64_t row_bytes, int64_t n,
                     int64_t k, DType out_dtype, std::byte* out, int64_t ldo) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  PRISM_CHECK(quant::can_dequantize(type), "dequantize_rows: no dequantization for ggml type {}",
              t.name);
  PRISM_CHECK(out_dtype == DType::f32 || out_dtype == DType::bf16,
              "dequantize_rows: into {}, not f32 or bf16", prism::name(out_dtype));
  PRISM_CHECK(k >= 0 && k % t.block_elements == 0,
              "dequantize_rows: {} values are not whole {} blocks of {}", k, t.name,
              t.block_elements);
  const int64_t bytes = k / t.block_elements * t.block_bytes;
  PRISM_CHECK(row_bytes >= bytes, "dequantize_rows: rows {} bytes apart cannot hold {} {} values",
              row_bytes, k, t.name);
  PRISM_CHECK(n >= 0 && (n <= 1 || ldo >= k), "dequantize_rows: bad sizes n={} k={} ldo={}", n, k,
              ldo);
  if (n == 0 || k == 0) return;
  const bool bf16 = out_dtype == DType::bf16;
  const simd::Target target = simd::current();  // also points Highway's tables at it
  if (DequantRowsFn fn = HWY_DYNAMIC_DISPATCH(NativeDequant)(type, bf16, target.avx512_bf16)) {
    fn(reinterpret_cast<const uint8_t*>(w), row_bytes, n, k, reinterpret_cast<uint8_t*>(out), ldo);
    return;
  }
  // No kernel under this target: quant::dequantize, into a row of f32 for bf16.
  thread_local std::vector<float> scratch;
  if (bf16) scratch.resize(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    float* row = bf16 ? scratch.data() : reinterpret_cast<float*>(out) + r * ldo;
    quant::dequantize(type, {w + r * row_bytes, static_cast<size_t>(bytes)},
                      {row, static_cast<size_t>(k)});
    if (bf16) {
      auto* o = reinterpret_cast<uint16_t*>(out) + r * ldo;
      for (int64_t j = 0; j < k; ++j) o[j] = f32_to_bf16(row[j]);
    }
  }
}

int64_t QuantizedRows::block_elements() const {
  return format_ == quant::GgmlType::Q8_K ? 256 : is_pair_format(format_) ? 32 : 1;
}

const int8_t* QuantizedRows::quants(int64_t i, int64_t b) const {
  PRISM_CHECK(format_ == quant::GgmlType::Q8_K || is_pair_format(format_),
              "QuantizedRows: {} rows hold no quantized values", quant::name(format_));
  const std::byte* row = data() + i * stride_;
  const std::byte* p = format_ == quant::GgmlType::Q8_K
                           ? row + b * KRecord::kBytes
                           : row + b / 2 * PairRecord::kBytes + 32 * (b % 2);
  return reinterpret_cast<const int8_t*>(p);
}

float QuantizedRows::scale(int64_t i, int64_t b) const {
  PRISM_CHECK(format_ == quant::GgmlType::Q8_K || is_pair_format(format_),
              "QuantizedRows: {} rows hold no scales", quant::name(format_));
  const std::byte* row = data() + i * stride_;
  if (format_ == quant::GgmlType::Q8_K)
    return get<float>(row + b * KRecord::kBytes + KRecord::kScale);
  return get<float>(row + b / 2 * PairRecord::kBytes + PairRecord::kScales + 32 * (b % 2));
}

int32_t QuantizedRows::sum(int64_t i, int64_t b, int64_t j) const {
  if (format_ == quant::GgmlType::Q8_K)
    return get<int16_t>(data() + i * stride_ + b * KRecord::kBytes + KRecord::kSums + 2 * j);
  const int8_t* q = quants(i, b);
  return std::accumulate(q, q + 32, int32_t{0});
}

void QuantizedRows::dequantize(int64_t i, float* out) const {
  const int64_t block = block_elements();
  if (block == 1) {
    std::memcpy(out, data() + i * stride_, static_cast<size_t>(k_) * sizeof(float));
    return;
  }
  for (int64_t b = 0; b < k_ / block; ++b) {
    const double d = scale(i, b);
    const int8_t* q = quants(i, b);
    for (int64_t j = 0; j < block; ++j) out[b * block + j] = static_cast<float>(d * q[j]);
  }
}

void quantize_activations(quant::GgmlType weights, const float* x, int64_t ldx, int64_t m,
                          int64_t k, QuantizedRows& out, ThreadPool* pool) {
  const quant::GgmlTypeInfo& t = quant::info(weights);
  PRISM_CHECK(quant::can_dequantize(weights), "quantize_activations: no products with ggml type {}",
              t.name);
  PRISM_CHECK(k >= 0 && k % t.block_elements == 0,
              "quantize_activations: {} values are not whole {} blocks of {}", k, t.name,
              t.block_elements);
  PRISM_CHECK(m >= 0 && (m <= 1 || ldx >= k), "quantize_activations: bad sizes m={} k={} ldx={}", m,
              k, ldx);
  using quant::GgmlType;
  const GgmlType format = activation_format(weights);
  const bool packed_copy = format == GgmlType::Q8_0 && quant_rows_int8_interleaved_native(weights);
  int64_t stride;
  if (format == GgmlType::Q8_K) {
    stride = k / 256 * KRecord::kBytes;
  } else if (is_pair_format(format)) {
    stride = pair_records_bytes(k);
    // The packed copy too, where the kernels of interleaved weights read it.
    if (packed_copy) stride = CompactQ8(k).end;
  } else {
    stride = (k * 4 + 63) / 64 * 64;
  }
  out.weights_ = weights;
  out.format_ = format;
  out.m_ = m;
  out.k_ = k;
  out.stride_ = stride;
  out.data_.resize(static_cast<size_t>(m * stride / 64));
  std::byte* data = out.mutable_data();
  const int32_t offset = weight_offset(weights);
  simd::current();  // also points Highway's tables at the target in use
  RoundFns round = HWY_DYNAMIC_DISPATCH(NativeRound)();
  if (!round.q8_0) round = {&round_q8_0, &round_q8_k};
  const bool lanes = m >= 5 && quant_rows_int8_takes_many_rows(weights);
  out.lanes_.resize(lanes ? static_cast<size_t>(int8_lane_bytes(m, k) / 64) : 0);
  auto* lane_data = reinterpret_cast<uint8_t*>(out.lanes_.data());
  // Chunks of 8 rows (int8_lanes' chunks), on the pool where there is one.
  auto rows = [&](int64_t c0, int64_t c1) {
    const int64_t i0 = 8 * c0, i1 = std::min(m, 8 * c1);
    std::memset(data + i0 * stride, 0, static_cast<size_t>((i1 - i0) * stride));
    for (int64_t i = i0; i < i1; ++i) {
      const float* xi = x + i * ldx;
      std::byte* row = data + i * stride;
      if (format == GgmlType::Q8_K) {
        for (int64_t b = 0; b < k / 256; ++b) {
          std::byte* rec = row + b * KRecord::kBytes;
          auto* q = reinterpret_cast<int8_t*>(rec + KRecord::kValues);
          const float d = round.q8_k(xi + 256 * b, q);
          int32_t sums[16];
          for (int j = 0; j < 16; ++j) {
            sums[j] = std::accumulate(q + 16 * j, q + 16 * j + 16, int32_t{0});
            put(rec + KRecord::kSums + 2 * j, static_cast<int16_t>(sums[j]));
          }
          for (int j = 0; j < 8; ++j)
            put(rec + KRecord::kSums32 + 2 * j,
                static_cast<int16_t>(sums[2 * j] + sums[2 * j + 1]));
          for (int j = 0; weights == GgmlType::Q6_K && j < 16; ++j) {  // 0, 2, 1, 3, 4, 6, ...
            const int from = j / 4 * 4 + (j % 4 == 1 ? 2 : j % 4 == 2 ? 1 : j % 4);
            put(rec + KRecord::kSumsPaired + 2 * j, static_cast<int16_t>(sums[from]));
          }
          put(rec + KRecord::kScale, d);
        }
      } else if (is_pair_format(format)) {
        const CompactQ8 packed(k);
        for (int64_t b = 0; b < k / 32; ++b) {
          std::byte* rec = row + b / 2 * PairRecord::kBytes;
          const int64_t half = b % 2;
          auto* q = reinterpret_cast<int8_t*>(rec + PairRecord::kValues + 32 * half);
          const float d = f16_to_f32(f32_to_f16(round.q8_0(xi + 32 * b, q)));
          for (int l = 0; l < 8; ++l) {
            const int64_t lane = 8 * half + l;
            put(rec + PairRecord::kScales + 4 * lane, d);
            if (format == GgmlType::Q8_0)
              put(rec + PairRecord::kExtra + 4 * lane,
                  -offset * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]));
          }
          const int32_t sum = std::accumulate(q, q + 32, int32_t{0});
          if (format == GgmlType::Q8_1) {
            put(rec + PairRecord::kExtra + 4 * 8 * half, d * static_cast<float>(sum));
          } else if (packed_copy) {
            std::memcpy(row + packed.values + 32 * b, q, 32);
            put(row + packed.scales + 4 * b, d);
            put(row + packed.totals + 4 * b, -offset * sum);
          }
        }
      } else {
        auto* v = reinterpret_cast<float*>(row);
        for (int64_t j = 0; j < k; ++j) {
          if (format == GgmlType::F16) {
            v[j] = f16_to_f32(f32_to_f16(xi[j]));
          } else if (format == GgmlType::BF16) {
            v[j] = bf16_to_f32(f32_to_bf16(xi[j]));
          } else {
            v[j] = xi[j];
          }
        }
      }
    }
    if (lanes) {
      int8_lanes({reinterpret_cast<const uint8_t*>(data + i0 * stride), stride, i1 - i0}, k,
                 lane_data + int8_lane_bytes(i0, k));
    }
  };
  const int64_t chunks = (m + 7) / 8;
  if (pool) {
    pool->parallel_for(chunks, 1, rows);
  } else {
    rows(0, chunks);
  }
  out.amx_padded_ = 0;
  if (!quant_rows_on_amx(weights, m)) return;
  // The same values, scales and sums as the tiles take them (AmxQ8Rows).
  const bool k_blocks = format == GgmlType::Q8_K;
  const int64_t padded = amx_int8_padded(m), blocks = k / 32, scaled = k_blocks ? k / 256 : blocks;
  out.amx_padded_ = padded;
  out.amx_tiles_.assign(static_cast<size_t>((blocks * 32 * padded + 63) / 64), {});
  out.amx_scales_.assign(static_cast<size_t>(scaled), {});
  out.amx_sums_.assign(k_blocks ? static_cast<size_t>(4 * scaled) : 0, {});
  auto* tiles = reinterpret_cast<int8_t*>(out.amx_tiles_.data());
  auto* scales = reinterpret_cast<float*>(out.amx_scales_.data());
  auto* sums = reinterpret_cast<int32_t*>(out.amx_sums_.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* q = k_blocks ? out.quants(i, b / 8) + 32 * (b % 8) : out.quants(i, b);
      for (int64_t g = 0; g < 8; ++g)
        std::memcpy(tiles + b * 32 * padded + (g * padded + i) * 4, q + 4 * g, 4);
    }
    for (int64_t b = 0; b < scaled; ++b) {
      const float d = out.scale(i, b);
      for (int64_t p = i; p < 16; p += padded) scales[16 * b + p] = d;
      if (!k_blocks) continue;
      for (int64_t pair = 0; pair < 4; ++pair) {
        auto sum32 = [&](int64_t j) {
          return static_cast<uint16_t>(out.sum(i, b, 2 * j) + out.sum(i, b, 2 * j + 1));
        };
        const auto word =
            static_cast<int32_t>(sum32(2 * pair) | uint32_t{sum32(2 * pair + 1)} << 16);
        for (int64_t p = i; p < 16; p += padded) sums[64 * b + 16 * pair + p] = word;
      }
    }
  }
}

AmxQ8Rows QuantizedRows::amx() const {
  if (amx_padded_ == 0) return {nullptr, nullptr, nullptr, m_, 0};
  return {reinterpret_cast<const int8_t*>(amx_tiles_.data()),
          reinterpret_cast<const float*>(amx_scales_.data()),
          amx_sums_.empty() ? nullptr : reinterpret_cast<const int32_t*>(amx_sums_.data()), m_,
          amx_padded_};
}

bool quant_rows_int8_native(quant::GgmlType type) { return native_int8(type) != nullptr; }

bool quant_rows_int8_takes_many_rows(quant::GgmlType type) {
  return activation_format(type) == quant::GgmlType::Q8_K && native_int8(type) != nullptr &&
         native_int8(type) == int8_rows_avx2(type);
}

// PRISM_CPU_QUANT_ROWS=auto (the default), vnni or amx; a lower forced SIMD target turns the
// tiles off with the rest.
bool quant_rows_on_amx(quant::GgmlType weights, int64_t m) {
  const char* env = std::getenv("PRISM_CPU_QUANT_ROWS");
  const std::string_view want = env && *env ? env : "auto";
  PRISM_CHECK(want == "auto" || want == "amx" || want == "vnni",
              "cpu: PRISM_CPU_QUANT_ROWS must be auto, vnni or amx, not '{}'", want);
  if (want == "vnni") return false;
  const bool available = amx_int8_available() && cpu_has_avx512_vnni();
  PRISM_CHECK(want != "amx" || available,
              "cpu: PRISM_CPU_QUANT_ROWS=amx: this CPU or system has no AMX-INT8");
  // auto: the VNNI kernels take 4 activation rows at a time and read the weights again for
  // more; from 5 rows on the tiles are faster for Q8_0 and Q4_0, from 9 for Q4_K (whose
  // sub-blocks' scales cost the tiles a vector multiply each; prism-bench quant).
  using quant::GgmlType;
  int64_t fewest;
  switch (weights) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
      fewest = 5;
      break;
    case GgmlType::Q4_K:
      fewest = 9;
      break;
    default:
      return false;
  }
  if (want == "amx") fewest = 1;
  return available && simd::current().hwy == HWY_AVX3_DL && m >= fewest && m <= kAmxMaxRows;
}

bool quant_rows_int8_interleaved_native(quant::GgmlType type) {
  // Where AMX tiles take batches (of Q8_0, and of Q4_0 and Q4_K alike), every format stays as
  // stored: Q6_K's prefill then runs on AMX-BF16 panels, which interleaved integer products
  // on VNNI would not reach.
  return native_interleaved(type) != nullptr &&
         !quant_rows_on_amx(quant::GgmlType::Q8_0, kAmxMaxRows);
}

void quant_rows_int8_interleaved(quant::GgmlType type, const QuantizedRows& x, const std::byte* w,
                                 int64_t row_bytes, int64_t r0, int64_t r1, int64_t k, float* out,
                                 int64_t ldo) {
  const QuantRowsInterleavedFn fn = native_interleaved(type);
  PRISM_CHECK(fn, "quant_rows_int8_interleaved: no kernel for {} weights kept interleaved here",
              quant::name(type));
  const quant::GgmlTypeInfo& t = quant::info(type);
  PRISM_CHECK(x.weights() == type && x.cols() == k,
              "quant_rows_int8_interleaved: activations rounded for {} x {} values, not {} x {}",
              quant::name(x.weights()), x.cols(), t.name, k);
  PRISM_CHECK(row_bytes == k / t.block_elements * t.block_bytes && k % t.block_elements == 0,
              "quant_rows_int8_interleaved: rows of {} bytes do not hold {} {} values", row_bytes,
              k, t.name);
  PRISM_CHECK(x.format() != quant::GgmlType::Q8_0 || x.stride() >= CompactQ8(k).end,
              "quant_rows_int8_interleaved: activations rounded without the packed copy it reads");
  const int64_t m = x.rows();
  PRISM_CHECK(0 <= r0 && r0 <= r1 && (m <= 1 || ldo >= r1 - r0),
              "quant_rows_int8_interleaved: bad sizes m={} rows [{}, {}) ldo={}", m, r0, r1, ldo);
  if (m == 0 || r0 == r1) return;
  const Int8Rows rows{reinterpret_cast<const uint8_t*>(x.data()), x.stride(), m, nullptr};
  fn(rows, reinterpret_cast<const uint8_t*>(w), row_bytes, r0, r1, k, out, ldo);
}

void quant_rows_int8(quant::GgmlType type, const QuantizedRows& x, const std::byte* w,
                     int64_t row_bytes, int64_t n, int64_t k, float* out, int64_t ldo) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  PRISM_CHECK(x.weights() == type && x.cols() == k,
              "quant_rows_int8: activations rounded for {} x {} values, not {} x {}",
              quant::name(x.weights()), x.cols(), t.name, k);
  PRISM_CHECK(row_bytes >= k / t.block_elements * t.block_bytes,
              "quant_rows_int8: rows {} bytes apart cannot hold {} {} values", row_bytes, k,
              t.name);
  const int64_t m = x.rows();
  PRISM_CHECK(n >= 0 && (m <= 1 || ldo >= n), "quant_rows_int8: bad sizes m={} n={} ldo={}", m, n,
              ldo);
  if (m == 0 || n == 0) return;
  if (const AmxQ8Rows tiles = x.amx(); tiles.tiles) {
    const auto* blocks = reinterpret_cast<const uint8_t*>(w);
    if (type == quant::GgmlType::Q4_K) {
      amx_k_rows(tiles, blocks, row_bytes, n, k, out, ldo);
    } else {
      amx_q8_rows(type == quant::GgmlType::Q4_0, tiles, blocks, row_bytes, n, k, out, ldo);
    }
    return;
  }
  if (QuantRowsInt8Fn fn = native_int8(type)) {
    const Int8Rows rows{reinterpret_cast<const uint8_t*>(x.data()), x.stride(), m, x.int8_lanes()};
    fn(rows, reinterpret_cast<const uint8_t*>(w), row_bytes, n, k, out, ldo);
    return;
  }
  // No integer kernel: quant_rows on the activations as rounded.
  if (x.block_elements() == 1) {
    quant_rows(type, reinterpret_cast<const float*>(x.data()), x.stride() / 4, m, w, row_bytes, n,
               k, out, ldo);
    return;
  }
  thread_local std::vector<float> values;
  values.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) x.dequantize(i, values.data() + i * k);
  quant_rows(type, values.data(), k, m, w, row_bytes, n, k, out, ldo);
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
