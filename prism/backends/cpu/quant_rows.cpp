// quant_rows.h's kernels, compiled once per SIMD target (hwy_targets.h). A block format is a
// struct whose Block() turns one block into f32 vectors and hands each, with its offset in the
// block, to a callback; Tile<Format, R, G> runs the blocks of R weight rows through it against
// G activation rows held in R x G vector accumulators; DequantRows stores the vectors of
// Block<true> (the reference's roundings) as f32 or bf16. Targets without vectors in Highway's
// sense (SCALAR, EMU128) have no kernels of their own: quant_rows and dequantize_rows run
// prism::quant::dequantize there, as they do for the types without a block format here.
#include "prism/backends/cpu/quant_rows.h"

#include "prism/backends/cpu/hwy_targets.h"

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

#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/core/dtype.h"

#if HWY_ONCE
#include <span>
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
}  // namespace prism::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || HWY_HAVE_SCALABLE

QuantRowsFn NativeKernel(quant::GgmlType) { return nullptr; }
DequantRowsFn NativeDequant(quant::GgmlType, bool, bool) { return nullptr; }

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

// The K-quants' eight sub-block scales and minimums (dequantize.cpp's k_scale_min) as
// sm[s] = d * scale and sm[8 + s] = -(dmin * min). The 6-bit fields are unpacked with 32-bit
// word operations, as llama.cpp does, on one 128-bit vector (scalar words written to memory
// and read back as one vector would stall the load: stores of 4 bytes do not forward to a
// load of 16), then converted and multiplied as one vector and stored, so that the blocks'
// loops broadcast them with loads.
template <typename D = DF>  // a template, so that the branch for other vector sizes is not compiled
HWY_INLINE void KScales(const uint8_t* p, float* HWY_RESTRICT sm) {
  const D df;
  const hn::Full128<uint32_t> d4;
  const hn::Full128<float> f4;
  // Lanes: d and dmin (f16), then scale bytes 0-3 (u0), 4-7 (u1) and 8-11 (u2).
  const auto v = hn::LoadU(d4, reinterpret_cast<const uint32_t*>(p));
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
  const auto bytes = hn::BitCast(hn::Full128<uint8_t>(), w);  // scales 0-7, minimums 0-7
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

// out[g * ldo + rows[r]] = x[g] . W[r] for R weight rows w[r] and G activation rows ldx
// apart, k values each; `prefetch` when the weights come from memory (the first chunk of
// activation rows), not from cache.
template <typename Format, int R, int G>
HWY_NOINLINE void Tile(const float* HWY_RESTRICT x, int64_t ldx, const uint8_t* const* w, int64_t k,
                       float* out, int64_t ldo, const int64_t* rows, bool prefetch) {
  const DF df;
  // Two accumulators a row where registers allow, taking the block's vectors in turn: a
  // K-quant block is 16 multiply-adds into each, whose latency one chain would wait out.
  constexpr int S = R * G <= kAccumulators / 2 && !kPlain<Format> ? 2 : 1;
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

// Tile<Format, kRows, G> for G = 1..kChunk, at index G - 1.
template <typename Format, int... G>
constexpr auto TileTable(std::integer_sequence<int, G...>) {
  return std::array<TileFn, sizeof...(G)>{&Tile<Format, kRows, G + 1>...};
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

// v rounded to bf16 (to nearest even; a NaN keeps its sign and the top of its payload, made
// quiet, as prism::f32_to_bf16 does) and stored at p. (AVX-512's vcvtneps2bf16 would round
// subnormals to zero.)
HWY_INLINE void StoreBF16(VF v, uint16_t* p) {
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  const VU bits = hn::BitCast(du, v);
  const VU rounded = hn::Add(
      bits, hn::Add(hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)), hn::Set(du, 0x7fffu)));
  const VU r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)),
                              hn::Or(bits, hn::Set(du, 0x400000u)), rounded);
  // The top halves, as 16-bit lanes (no value saturates).
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(DI(), hn::ShiftRight<16>(r))), d16, p);
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
          StoreBF16(v, ob + e);
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
// avx512_bf16.h), vcvtneps2bf16 rounds 16 values in one instruction where StoreBF16 takes
// nine, to the same bits (to nearest even; a NaN's top half, made quiet) except that it reads
// f32 subnormals as zeros. The block formats never produce one: their values are sums of
// products of f16 scales with integers, integer multiples of 2^-24, zero or at least 2^-24
// in magnitude (F16 rows likewise); F32 and BF16 rows may hold subnormals and take
// StoreBF16.
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

}  // namespace

QuantRowsFn NativeKernel(quant::GgmlType type) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::F32:
      return Rows<F32>;
    case GgmlType::F16:
      return Rows<F16>;
    case GgmlType::BF16:
      return Rows<BF16>;
    case GgmlType::Q8_0:
      return Rows<Q8_0>;
    case GgmlType::Q4_0:
      return Rows<Q4_0>;
    case GgmlType::Q4_1:
      return Rows<Q4_1>;
    case GgmlType::Q5_0:
      return Rows<Q5_0>;
    case GgmlType::Q5_1:
      return Rows<Q5_1>;
    case GgmlType::Q4_K:
      return Rows<Q4_K>;
    case GgmlType::Q5_K:
      return Rows<Q5_K>;
    case GgmlType::Q6_K:
      return Rows<Q6_K>;
    default:
      return nullptr;
  }
}

DequantRowsFn NativeDequant(quant::GgmlType type, bool bf16, bool avx512_bf16) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::F32:
      return DequantTo<F32>(bf16, avx512_bf16);
    case GgmlType::F16:
      return DequantTo<F16>(bf16, avx512_bf16);
    case GgmlType::BF16:
      return DequantTo<BF16>(bf16, avx512_bf16);
    case GgmlType::Q8_0:
      return DequantTo<Q8_0>(bf16, avx512_bf16);
    case GgmlType::Q4_0:
      return DequantTo<Q4_0>(bf16, avx512_bf16);
    case GgmlType::Q4_1:
      return DequantTo<Q4_1>(bf16, avx512_bf16);
    case GgmlType::Q5_0:
      return DequantTo<Q5_0>(bf16, avx512_bf16);
    case GgmlType::Q5_1:
      return DequantTo<Q5_1>(bf16, avx512_bf16);
    case GgmlType::Q4_K:
      return DequantTo<Q4_K>(bf16, avx512_bf16);
    case GgmlType::Q5_K:
      return DequantTo<Q5_K>(bf16, avx512_bf16);
    case GgmlType::Q6_K:
      return DequantTo<Q6_K>(bf16, avx512_bf16);
    default:
      return nullptr;
  }
}

#endif

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(NativeKernel);
HWY_EXPORT(NativeDequant);

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

}  // namespace prism::cpu
#endif  // HWY_ONCE
