// dot_rows.h's kernels, compiled once per SIMD target (hwy_targets.h), plus the AVX-512 BF16
// one, which Highway 1.0.3 cannot express: it is compiled with a function target attribute
// and chosen at run time by a CPU feature check (simd.h).
#include "prism/backends/cpu/dot_rows.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/dot_rows.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "prism/backends/cpu/simd.h"
#include "prism/core/dtype.h"

#if HWY_ONCE && HWY_ARCH_X86
#include "prism/backends/cpu/avx512_bf16.h"
#endif
#if HWY_ONCE
#include <charconv>
#include <cstdlib>
#if HWY_ARCH_X86
#include <cpuid.h>
#endif
#include <string_view>

#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/core/error.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128

// No vectors in Highway's sense: plain loops over 16 independent lanes, which the compiler
// vectorizes with the baseline's instructions without reassociating.
void DotRowsF32xBf16w(const float* x, const uint16_t* const* w, int64_t k, float* out) {
  int64_t whole = k / 16 * 16;
  for (int r = 0; r < kDotRows; ++r) {
    float lanes[16] = {};
    for (int64_t i = 0; i < whole; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += x[i + l] * bf16_to_f32(w[r][i + l]);
    out[r] = 0;
    for (float v : lanes) out[r] += v;
    for (int64_t i = whole; i < k; ++i) out[r] += x[i] * bf16_to_f32(w[r][i]);
  }
}

void DotRowsF32(const float* x, const float* const* w, int64_t k, float* out) {
  int64_t whole = k / 16 * 16;
  for (int r = 0; r < kDotRows; ++r) {
    float lanes[16] = {};
    for (int64_t i = 0; i < whole; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += x[i + l] * w[r][i + l];
    out[r] = 0;
    for (float v : lanes) out[r] += v;
    for (int64_t i = whole; i < k; ++i) out[r] += x[i] * w[r][i];
  }
}

#else

namespace hn = hwy::HWY_NAMESPACE;

// Two vectors of each row per step (a 64-byte line of bf16 under AVX-512), two accumulators
// a row.
void DotRowsF32xBf16w(const float* x, const uint16_t* const* w, int64_t k, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint16_t, decltype(df)> dw;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  auto widen = [&](const uint16_t* p) {  // bf16 -> f32: the bits go to the top half
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dw, p))));
  };
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
  const uint16_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  int64_t i = 0;
  for (; i + 2 * n <= k; i += 2 * n) {
    const auto x0 = hn::LoadU(df, x + i), x1 = hn::LoadU(df, x + i + n);
    a0 = hn::MulAdd(x0, widen(w0 + i), a0);
    a1 = hn::MulAdd(x0, widen(w1 + i), a1);
    a2 = hn::MulAdd(x0, widen(w2 + i), a2);
    a3 = hn::MulAdd(x0, widen(w3 + i), a3);
    b0 = hn::MulAdd(x1, widen(w0 + i + n), b0);
    b1 = hn::MulAdd(x1, widen(w1 + i + n), b1);
    b2 = hn::MulAdd(x1, widen(w2 + i + n), b2);
    b3 = hn::MulAdd(x1, widen(w3 + i + n), b3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, b0)));
  out[1] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a1, b1)));
  out[2] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a2, b2)));
  out[3] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a3, b3)));
  for (; i < k; ++i)
    for (int r = 0; r < kDotRows; ++r) out[r] += x[i] * bf16_to_f32(w[r][i]);
}

// Two vectors of each row per step, two accumulators a row, as for bf16.
void DotRowsF32(const float* x, const float* const* w, int64_t k, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
  const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  int64_t i = 0;
  for (; i + 2 * n <= k; i += 2 * n) {
    const auto x0 = hn::LoadU(df, x + i), x1 = hn::LoadU(df, x + i + n);
    a0 = hn::MulAdd(x0, hn::LoadU(df, w0 + i), a0);
    a1 = hn::MulAdd(x0, hn::LoadU(df, w1 + i), a1);
    a2 = hn::MulAdd(x0, hn::LoadU(df, w2 + i), a2);
    a3 = hn::MulAdd(x0, hn::LoadU(df, w3 + i), a3);
    b0 = hn::MulAdd(x1, hn::LoadU(df, w0 + i + n), b0);
    b1 = hn::MulAdd(x1, hn::LoadU(df, w1 + i + n), b1);
    b2 = hn::MulAdd(x1, hn::LoadU(df, w2 + i + n), b2);
    b3 = hn::MulAdd(x1, hn::LoadU(df, w3 + i + n), b3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, b0)));
  out[1] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a1, b1)));
  out[2] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a2, b2)));
  out[3] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a3, b3)));
  for (; i < k; ++i)
    for (int r = 0; r < kDotRows; ++r) out[r] += x[i] * w[r][i];
}

#endif

// f32_rows_plain's layout of x (dot_rows.h): each run of 2n values (n: the target's f32
// lanes) as its n even-indexed values, then its n odd-indexed ones, as the weights widen
// (below); the values past the last whole run as they are.
void PackRowsPlain(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, float* packed) {
  namespace hw = hwy::HWY_NAMESPACE;
  const int64_t n = static_cast<int64_t>(hw::Lanes(hw::ScalableTag<float>()));
  const int64_t whole = k / (2 * n) * (2 * n), stride = plain_rows_stride(k);
  for (int64_t m = 0; m < rows; ++m) {
    const uint16_t* src = x + m * ldx;
    float* dst = packed + m * stride;
    for (int64_t i = 0; i < whole; i += 2 * n)
      for (int64_t j = 0; j < n; ++j) {
        dst[i + j] = bf16_to_f32(src[i + 2 * j]);
        dst[i + n + j] = bf16_to_f32(src[i + 2 * j + 1]);
      }
    for (int64_t i = whole; i < k; ++i) dst[i] = bf16_to_f32(src[i]);
    std::fill(dst + k, dst + stride, 0.0f);
  }
}

constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Keeps v in a register from here on: GCC otherwise folds x's loads into every multiply-add
// that reads them (four loads of each instead of one) and a weight vector's load into both
// its shift and its mask, and the loads, not the multiply-adds, bound the kernel.
template <class V>
HWY_INLINE void InRegister(V& v) {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

// A pair (G = 2) or one (G = 1) of x's rows (packed) against four weight rows over `len`
// values (a multiple of 2n), adding to the sums per lane at `lanes` (four slots of kMaxLanes
// a row of x). Each vector of 2n bf16 weights read as n 32-bit lanes holds a pair of values
// in each: shifted up by 16 bits, the even ones in f32; masked, the odd ones. Registers: 4 G
// sums, the even and odd halves of x's G rows, one row's two weight vectors.
template <int G>
HWY_INLINE void PlainRowsPiece(const float* const* x, const uint16_t* const* w, int64_t len,
                               float* lanes) {
  namespace hw = hwy::HWY_NAMESPACE;
  const hw::ScalableTag<float> df;
  const hw::RebindToUnsigned<decltype(df)> du;
  const int64_t n = static_cast<int64_t>(hw::Lanes(df));
  const auto high = hw::Set(du, 0xFFFF0000u);
  using V = decltype(hw::Zero(df));
  V acc[G][kDotRows];
#pragma GCC unroll 8
  for (int i = 0; i < G * kDotRows; ++i)
    acc[i / kDotRows][i % kDotRows] = hw::LoadU(df, lanes + i * kMaxLanes);
  for (int64_t i = 0; i < len; i += 2 * n) {
    V even_x[G], odd_x[G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      even_x[g] = hw::LoadU(df, x[g] + i);
      odd_x[g] = hw::LoadU(df, x[g] + i + n);
      InRegister(even_x[g]);
      InRegister(odd_x[g]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kDotRows; ++r) {
      auto v = hw::LoadU(du, reinterpret_cast<const uint32_t*>(w[r] + i));
      InRegister(v);
      const V even = hw::BitCast(df, hw::ShiftLeft<16>(v)), odd = hw::BitCast(df, hw::And(v, high));
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        acc[g][r] = hw::MulAdd(even_x[g], even, acc[g][r]);
        acc[g][r] = hw::MulAdd(odd_x[g], odd, acc[g][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < G * kDotRows; ++i)
    hw::StoreU(acc[i / kDotRows][i % kDotRows], df, lanes + i * kMaxLanes);
}

// dot_rows.h's f32_rows_plain. Four weight rows at a time from four quarters of the columns
// (for_row_groups: four streams), k in pieces (piece_len values): the first pair of x's
// rows reads a piece of the four rows from memory, the other pairs from L1, each widening
// them in registers; the sums stay in lanes between pieces and are added up at the end.
void RowsF32Plain(const float* x, int64_t rows, const uint16_t* w, int64_t k, int64_t cols,
                  float* out, int64_t ldo) {
  namespace hw = hwy::HWY_NAMESPACE;
  const hw::ScalableTag<float> df;
  const int64_t n = static_cast<int64_t>(hw::Lanes(df));
  const int64_t whole = k / (2 * n) * (2 * n), ldx = plain_rows_stride(k);
  constexpr int64_t kRows = 16;  // of x at a time (beyond, the weights are read again)
  HWY_ALIGN float lanes[kRows * kDotRows * kMaxLanes];
  float tail[kRows * kDotRows];  // the products past the last whole run of 2n values
  for (int64_t m0 = 0; m0 < rows; m0 += kRows) {
    const int64_t mr = std::min(kRows, rows - m0);
    // Pieces of k as long as the four weight rows' piece and x's rows' stay within 24 KiB
    // together (L1 holds 32 or 48): longer for fewer rows of x, as fewer sums go in and out
    // of registers. A power of two from 256 on, so a multiple of every target's 2n.
    int64_t piece_len = 256;
    while (piece_len < 2048 && 2 * piece_len * (4 * mr + 2 * kDotRows) <= 24 * 1024) piece_len *= 2;
    for_row_groups(0, cols, [&](const int64_t* ids) {
      std::fill(lanes, lanes + mr * kDotRows * kMaxLanes, 0.0f);
      const uint16_t* wr[kDotRows];
      for (int r = 0; r < kDotRows; ++r) wr[r] = w + ids[r] * k;
      for (int64_t k0 = 0; k0 < whole; k0 += piece_len) {
        const int64_t len = std::min(piece_len, whole - k0);
        const uint16_t* piece[kDotRows];
        for (int r = 0; r < kDotRows; ++r) piece[r] = wr[r] + k0;
        int64_t m = 0;
        for (; m + 2 <= mr; m += 2) {
          const float* xs[2] = {x + (m0 + m) * ldx + k0, x + (m0 + m + 1) * ldx + k0};
          PlainRowsPiece<2>(xs, piece, len, lanes + m * kDotRows * kMaxLanes);
        }
        if (m < mr) {
          const float* xs[1] = {x + (m0 + m) * ldx + k0};
          PlainRowsPiece<1>(xs, piece, len, lanes + m * kDotRows * kMaxLanes);
        }
      }
      std::fill(tail, tail + mr * kDotRows, 0.0f);
      for (int64_t i = whole; i < k; ++i)
        for (int64_t j = 0; j < mr; ++j)
          for (int r = 0; r < kDotRows; ++r)
            tail[j * kDotRows + r] += x[(m0 + j) * ldx + i] * bf16_to_f32(wr[r][i]);
      for (int64_t j = 0; j < mr; ++j)
        for (int r = 0; r < kDotRows; ++r) {
          const float* l = lanes + (j * kDotRows + r) * kMaxLanes;
          out[(m0 + j) * ldo + ids[r]] =
              hw::GetLane(hw::SumOfLanes(df, hw::LoadU(df, l))) + tail[j * kDotRows + r];
        }
    });
  }
}

// Without AVX-512 BF16 the activations are multiplied in f32.
void DotRowsBf16(const uint16_t*, const float* x_f32, const uint16_t* const* w, int64_t k,
                 float* out) {
  DotRowsF32xBf16w(x_f32, w, k, out);
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(DotRowsF32xBf16w);
HWY_EXPORT(DotRowsBf16);
HWY_EXPORT(DotRowsF32);
HWY_EXPORT(RowsF32Plain);
HWY_EXPORT(PackRowsPlain);

#if HWY_ARCH_X86
namespace {

// vdpbf16ps: pairs of bf16 products summed into f32 lanes, 64 values of each row per step
// in two accumulators, so that one thread alone is not held up by the instruction's latency.
PRISM_TARGET_AVX512_BF16 void dot_rows_bf16_avx512(const uint16_t* x, const float* x_f32,
                                                   const uint16_t* const* w, int64_t k,
                                                   float* out) {
  __m512 a[kDotRows], b[kDotRows];
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) a[r] = b[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    __m512bh x0 = load_bf16x32(x + i), x1 = load_bf16x32(x + i + 32);
#pragma GCC unroll 4
    for (int r = 0; r < kDotRows; ++r) {
      a[r] = _mm512_dpbf16_ps(a[r], x0, load_bf16x32(w[r] + i));
      b[r] = _mm512_dpbf16_ps(b[r], x1, load_bf16x32(w[r] + i + 32));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));
  for (; i < k; ++i)
    for (int r = 0; r < kDotRows; ++r) out[r] += x_f32[i] * bf16_to_f32(w[r][i]);
}

// Blocked weights: each pair of x's values, broadcast, against the same pair of 64 rows (four
// vectors of 16 rows), summed into 16 rows' lanes with no reduction at the end. Four blocks at
// a time from four quarters of the range, so that four streams run as in dot_rows_bf16_avx512;
// each stream's lines `ahead` bytes on prefetched into L2 where decode_prefetch_bytes says so.
PRISM_TARGET_AVX512_BF16 void blocks_bf16_avx512(const uint16_t* x, const uint16_t* w, int64_t k,
                                                 int64_t blocks, float* out) {
  constexpr int kVectors = 4;  // of 16 rows in a block of 64
  const int64_t block = 64 * k, q = blocks / kDotRows, ahead = decode_prefetch_bytes();
  auto run = [&](const int64_t* ids, auto count) PRISM_TARGET_AVX512_BF16 {
    constexpr int n = decltype(count)::value;
    __m512 acc[n][kVectors];
#pragma GCC unroll 16
    for (int i = 0; i < n * kVectors; ++i) acc[i / kVectors][i % kVectors] = _mm512_setzero_ps();
    const uint16_t* p[n];
    for (int b = 0; b < n; ++b) p[b] = w + ids[b] * block;
    for (int64_t i = 0; i < k; i += 2) {
      if (ahead) {
#pragma GCC unroll 16
        for (int v = 0; v < n * kVectors; ++v) {
          const auto* line = p[v / kVectors] + i * 64 + (v % kVectors) * 32;
          _mm_prefetch(reinterpret_cast<const char*>(line) + ahead, _MM_HINT_T1);
        }
      }
      uint32_t pair;
      std::memcpy(&pair, x + i, sizeof pair);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 16
      for (int v = 0; v < n * kVectors; ++v) {
        const int b = v / kVectors, c = v % kVectors;
        acc[b][c] = _mm512_dpbf16_ps(acc[b][c], xv, load_bf16x32(p[b] + i * 64 + c * 32));
      }
    }
    for (int b = 0; b < n; ++b)
      for (int c = 0; c < kVectors; ++c) _mm512_storeu_ps(out + ids[b] * 64 + c * 16, acc[b][c]);
  };
  int64_t ids[kDotRows];
  for (int64_t j = 0; j < q; ++j) {
    for (int r = 0; r < kDotRows; ++r) ids[r] = j + r * q;
    run(ids, std::integral_constant<int, kDotRows>{});
  }
  for (int64_t b = kDotRows * q; b < blocks; ++b) {
    ids[0] = b;
    run(ids, std::integral_constant<int, 1>{});
  }
}

// G rows of x against the 64 rows of a block over pairs [p0, p1) of k, adding to the sums at
// out (G x 64, rows ldo apart); prefetches `lines` cache lines a pair from `ahead` (null:
// none) into L2. A vector of a pair holds 16 weight rows' two values: the low halves of its
// 32-bit lanes are the even k's, the high halves the odd k's. Registers: 4 G sums, 2 G
// broadcast values of x, the weights' vector and its two halves.
template <int G>
PRISM_TARGET_AVX512_BF16 void rows_blocked_group(const float* x, int64_t ldx, const uint16_t* block,
                                                 int64_t p0, int64_t p1, float* out, int64_t ldo,
                                                 const char* ahead, int64_t lines) {
  __m512 acc[G][4];
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(out + r * ldo + c * 16);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = p0; p < p1; ++p) {
    if (ahead) {
      for (int64_t j = 0; j < lines; ++j)
        _mm_prefetch(ahead + ((p - p0) * lines + j) * 64, _MM_HINT_T1);
    }
    __m512 even_x[G], odd_x[G];
#pragma GCC unroll 4
    for (int r = 0; r < G; ++r) {
      even_x[r] = _mm512_set1_ps(x[r * ldx + 2 * p]);
      odd_x[r] = _mm512_set1_ps(x[r * ldx + 2 * p + 1]);
    }
    const uint16_t* w = block + p * 128;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(w + c * 32);
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v, high));
#pragma GCC unroll 4
      for (int r = 0; r < G; ++r) {
        acc[r][c] = _mm512_fmadd_ps(even_x[r], even, acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(odd_x[r], odd, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + r * ldo + c * 16, acc[r][c]);
}

// The walk of both kernels of blocked weights: each block in pieces of kPairs pairs of k (64
// rows x 256 values, 32 KiB), x's rows in groups of at most N - 1 (groups[n] takes n rows; the
// groups as even as they come: 7 rows of at most 6 as 4 + 3), and the next piece (the rest of
// this block, then the next block's start: contiguous) prefetched into L2, spread over every
// group's pairs.
template <typename X, size_t N>
PRISM_TARGET_AVX512_BF16 void walk_blocks(
    const X* x, int64_t ldx, int64_t rows, const uint16_t* w, int64_t k, int64_t blocks, float* out,
    int64_t ldo,
    const std::array<void (*)(const X*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t,
                              const char*, int64_t),
                     N>& groups) {
  constexpr int64_t kPairs = 128;
  constexpr int64_t most = static_cast<int64_t>(N) - 1;
  const int64_t group_count = (rows + most - 1) / most;
  const int64_t size = (rows + group_count - 1) / group_count;
  for (int64_t b = 0; b < blocks; ++b) {
    float* o = out + b * 64;
    for (int64_t m = 0; m < rows; ++m) std::fill(o + m * ldo, o + m * ldo + 64, 0.0f);
    const uint16_t* block = w + b * 64 * k;
    for (int64_t p0 = 0; p0 < k / 2; p0 += kPairs) {
      const int64_t p1 = std::min(k / 2, p0 + kPairs), pairs = p1 - p0;
      const bool last = b + 1 == blocks && p1 == k / 2;
      const char* next = reinterpret_cast<const char*>(block + p1 * 128);
      const int64_t lines = (pairs * 256 / 64 + group_count * pairs - 1) / (group_count * pairs);
      for (int64_t m = 0, g = 0; m < rows; m += size, ++g) {
        const int n = static_cast<int>(std::min<int64_t>(size, rows - m));
        groups[n](x + m * ldx, ldx, block, p0, p1, o + m * ldo, ldo,
                  last ? nullptr : next + g * pairs * lines * 64, lines);
      }
    }
  }
}

// Measured on 2 cores of an Intel Xeon (Llama-1B-shaped weights): 16 rows at 223 GFLOP/s with
// the prefetches, 151 without; pieces of 16 or 64 KiB, or prefetching into L1, did no better.
// Groups of up to 4 rows: 16 sums, 8 broadcast values, the weights' vector and its halves.
PRISM_TARGET_AVX512_BF16 void rows_blocked_avx512(const float* x, int64_t ldx, int64_t rows,
                                                  const uint16_t* w, int64_t k, int64_t blocks,
                                                  float* out, int64_t ldo) {
  walk_blocks<float, 5>(x, ldx, rows, w, k, blocks, out, ldo,
                        {nullptr, rows_blocked_group<1>, rows_blocked_group<2>,
                         rows_blocked_group<3>, rows_blocked_group<4>});
}

// G rows of x (bf16) against the 64 rows of a block over pairs [p0, p1) of k, adding to the
// sums at out (G x 64, rows ldo apart), with vdpbf16ps: each of x's pairs, broadcast, against
// the weights' vectors as stored, one accumulator per 16 weight rows, pairs in k's order, as
// blocks_bf16_avx512 sums one row (so each row's sums are its bits). Prefetches as
// rows_blocked_group. Registers: 4 G sums, the 4 weight vectors and a broadcast pair.
template <int G>
PRISM_TARGET_AVX512_BF16 void rows_bf16_group(const uint16_t* x, int64_t ldx, const uint16_t* block,
                                              int64_t p0, int64_t p1, float* out, int64_t ldo,
                                              const char* ahead, int64_t lines) {
  __m512 acc[G][4];
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(out + r * ldo + c * 16);
  for (int64_t p = p0; p < p1; ++p) {
    if (ahead) {
      for (int64_t j = 0; j < lines; ++j)
        _mm_prefetch(ahead + ((p - p0) * lines + j) * 64, _MM_HINT_T1);
    }
    const uint16_t* w = block + p * 128;
    __m512bh v[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) v[c] = load_bf16x32(w + c * 32);
#pragma GCC unroll 8
    for (int r = 0; r < G; ++r) {
      uint32_t pair;
      std::memcpy(&pair, x + r * ldx + 2 * p, sizeof pair);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, v[c]);
    }
  }
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + r * ldo + c * 16, acc[r][c]);
}

// walk_blocks with rows_bf16_group: groups of up to 6 rows of x, whose 24 sums, 4 weight
// vectors and a pair fill the 32 registers but three.
PRISM_TARGET_AVX512_BF16 void rows_bf16_blocked_avx512(const uint16_t* x, int64_t ldx, int64_t rows,
                                                       const uint16_t* w, int64_t k, int64_t blocks,
                                                       float* out, int64_t ldo) {
  walk_blocks<uint16_t, 7>(x, ldx, rows, w, k, blocks, out, ldo,
                           {nullptr, rows_bf16_group<1>, rows_bf16_group<2>, rows_bf16_group<3>,
                            rows_bf16_group<4>, rows_bf16_group<5>, rows_bf16_group<6>});
}
}  // namespace
#endif

namespace {

bool intel_cpu() {
#if HWY_ARCH_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  return std::string_view(vendor, 12) == "GenuineIntel";
#else
  return false;
#endif
}

}  // namespace

int64_t decode_prefetch_bytes() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("PRISM_CPU_PREFETCH");
    if (!env || !*env) return intel_cpu() ? int64_t{512} : int64_t{0};
    const std::string_view want = env;
    int64_t n = -1;
    const auto [end, ec] = std::from_chars(want.data(), want.data() + want.size(), n);
    PRISM_CHECK(ec == std::errc() && end == want.data() + want.size() && n >= 0 && n <= 65536 &&
                    n % 64 == 0,
                "PRISM_CPU_PREFETCH={}: expected a number of bytes, a multiple of 64 up to 65536 "
                "(0: none)",
                want);
    return n;
  }();
  return bytes;
}

RowsKernel rows_kernel() {
  static const RowsKernel chosen = [] {
    // Both blocked-weight kernels come with AVX-512 BF16.
    const bool blocked = dot_row_kernels().f32_rows_blocked != nullptr;
    const char* env = std::getenv("PRISM_CPU_ROWS");
    const std::string_view want = env ? env : "";
    if (want.empty()) {
      if (amx_available()) return RowsKernel::amx;
      if (blocked) return bf16_rows_products().pairs ? RowsKernel::dpbf16 : RowsKernel::fma;
      return onednn::multiplies_bf16() ? RowsKernel::onednn : RowsKernel::widen;
    }
    if (want == "onednn") return RowsKernel::onednn;
    if (want == "widen") return RowsKernel::widen;
    PRISM_CHECK(want == "amx" || want == "fma" || want == "dpbf16",
                "PRISM_CPU_ROWS={}: expected amx, fma, dpbf16, widen or onednn", want);
    PRISM_CHECK(want != "amx" || amx_available(),
                "PRISM_CPU_ROWS=amx: this CPU or system has no AMX-BF16");
    PRISM_CHECK(want == "amx" || blocked, "PRISM_CPU_ROWS={}: needs AVX-512 BF16", want);
    return want == "amx" ? RowsKernel::amx : want == "fma" ? RowsKernel::fma : RowsKernel::dpbf16;
  }();
  return chosen;
}

DotRowKernels dot_row_kernels() {
  [[maybe_unused]] simd::Target target = simd::current();  // also points Highway's tables at it
  DotRowKernels k{&HWY_DYNAMIC_DISPATCH(DotRowsF32xBf16w), &HWY_DYNAMIC_DISPATCH(DotRowsBf16),
                  &HWY_DYNAMIC_DISPATCH(DotRowsF32)};
  k.f32_rows_plain = &HWY_DYNAMIC_DISPATCH(RowsF32Plain);
  k.pack_rows_plain = &HWY_DYNAMIC_DISPATCH(PackRowsPlain);
#if HWY_ARCH_X86
  if (target.avx512_bf16) {
    k.bf16 = dot_rows_bf16_avx512;
    k.bf16_native_block = 64;
    k.bf16_blocked = blocks_bf16_avx512;
    k.f32_rows_blocked = rows_blocked_avx512;
    k.bf16_rows_blocked = rows_bf16_blocked_avx512;
  }
#endif
  return k;
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
