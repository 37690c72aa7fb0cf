// Attention as one kernel: softmax(q.k * scale + mask) . v, causal or not, grouped-query,
// with a sliding window, a mask and a query offset (a KV cache). q {B,H,Sq,D}, k {B,G,Sk,D},
// v {B,G,Sk,E}, mask {B,H,Sq,Sk}, output {B,H,Sq,E}; halves compute in f32.
//
// A work item is a block of query rows of one batch and key/value head: the rows of every
// query head that reads that key head (grouped-query attention), at as many positions as
// make about kBlockRows rows. It reads only the keys some of its rows can see (a causal row
// at position p sees keys up to p, so a KV cache's unwritten tail is never touched), in chunks
// of kChunk keys with the online softmax: each row keeps its running maximum, sum and output,
// rescaled when a chunk raises the maximum, so the scratch stays in cache at any length.
//
// Where the CPU has AMX-BF16, a block of 16 or more bf16 rows (a prompt's) runs its products
// on tiles instead (attend_tiles, amx_attention.h), over chunks of kTileChunk keys regrouped
// once a call for every block that reads them (PackedKv).
//
// Per chunk, the steps run as vector code compiled per SIMD target (hwy_targets.h), with the
// scores transposed (keys x rows) so that the softmax runs down a vector of rows at a time:
// the scores as register tiles of keys x rows from the queries transposed (or, for the few
// rows of a decoding step, one horizontal sum per score), the online softmax, and the output
// sums as tiles of rows x values. f32 keys and values are read in place, halves widened once
// per chunk.
//
// A decoding step in bf16 (at most four rows: one position of the query heads of a key head)
// takes its own path where the CPU has AVX-512 BF16 (attend_decode): keys and values
// read as they are, all the visible keys' scores at once (16 keys per transposing
// reduction), a plain softmax along each row, the weighted sums. One Llama-1B layer at
// position 512 (`prism-bench attention`): 72 us before, 17 us with it. Where the CPU also has
// AMX-BF16, the scores of whole blocks of 16 keys come from tiles (amx_decode_scores: the keys
// as the first operand as the cache keeps them, the rows as the second): at position 4000 with
// the cache from memory, a layer took 391-414 us with the reductions and 284-290 us so (88-90 %
// of the read bandwidth; 2 cores of an Intel Xeon). Without AVX-512 BF16, a decoding step in
// bf16 or f32 takes the same path with AVX2 (attend_decode): keys widened in registers, 8
// keys' scores per transposing reduction.
#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/kernels_attention.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_attention.h"
#include "prism/backends/cpu/avx512_bf16.h"
#include "prism/backends/cpu/bf16-inl.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/fast_math-inl.h"
#include "prism/backends/cpu/fast_math.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/storage.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Tile sizes held in registers: AVX-512 has 32 vector registers, AVX2 16. AVX2's take 12
// running sums (6 keys x 2 vectors of rows; 6 rows x 2 vectors of values), enough chains to
// keep both FMA pipes busy through an FMA's latency: with 8 (4 keys; 2 rows x 4 vectors), one
// Llama-1B layer's 512-token prefill (`prism-bench attention`, Zen 2, 2 threads) ran at 67
// GFLOP/s in bf16 and 71 in f32, with 12 at 99 and 113. The same sums in the same order.
#if HWY_TARGET <= HWY_AVX3
constexpr int kTileKeys = 8;  // scores: keys x 2 vectors of rows
constexpr int kSumRows = 6;   // sums: rows x kSumVectors vectors of values
constexpr int kSumVectors = 4;
#else
constexpr int kTileKeys = 6;
constexpr int kSumRows = 6;
constexpr int kSumVectors = 2;
#endif

// The layout of a chunk: scores transposed, st[j][r], with rows padded to a multiple of the
// vector length (Lanes()); for the tiled scores, queries transposed, qt[d][r], rows padded to
// a multiple of twice the vector length, and keys as they are, k[j][d].
int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

// st[j][r] = sum_d k[j][d] * qt[d][r] for K keys from j0 and all (padded) rows.
template <int K>
void ScoreTile(const float* qt, int64_t ldq, int64_t D, const float* k, float* st, int64_t j0) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  const float* kj = k + j0 * D;
  for (int64_t r = 0; r < ldq; r += 2 * L) {
    V a0[K], a1[K];
    for (int x = 0; x < K; ++x) a0[x] = a1[x] = hn::Zero(d);
    for (int64_t e = 0; e < D; ++e) {
      const V q0 = hn::LoadU(d, qt + e * ldq + r), q1 = hn::LoadU(d, qt + e * ldq + r + L);
      for (int x = 0; x < K; ++x) {
        const V kv = hn::Set(d, kj[x * D + e]);
        a0[x] = hn::MulAdd(kv, q0, a0[x]);
        a1[x] = hn::MulAdd(kv, q1, a1[x]);
      }
    }
    for (int x = 0; x < K; ++x) {
      hn::StoreU(a0[x], d, st + (j0 + x) * ldq + r);
      hn::StoreU(a1[x], d, st + (j0 + x) * ldq + r + L);
    }
  }
}

template <int... K>
void ScoresTransposedImpl(std::integer_sequence<int, K...>, const float* qt, int64_t ldq, int64_t D,
                          const float* k, int64_t n, float* st) {
  using Fn = void (*)(const float*, int64_t, int64_t, const float*, float*, int64_t);
  static constexpr Fn tiles[] = {&ScoreTile<K + 1>...};
  for (int64_t j = 0; j < n; j += kTileKeys)
    tiles[std::min<int64_t>(kTileKeys, n - j) - 1](qt, ldq, D, k, st, j);
}

// st[j][r] = sum_d k[j][d] * qt[d][r] for the n keys and all (padded) rows.
void ScoresTransposed(const float* qt, int64_t ldq, int64_t D, const float* k, int64_t n,
                      float* st) {
  ScoresTransposedImpl(std::make_integer_sequence<int, kTileKeys>{}, qt, ldq, D, k, n, st);
}

// st[j][r] = sum_d q[r][d] * k[j][d] from the queries as they are (rows of D), one
// horizontal sum per score: for a few rows, as in decoding, where the tiles would mostly
// multiply padding.
void ScoresDirect(const float* q, int64_t rows, int64_t D, const float* k, int64_t n, float* st,
                  int64_t ldq) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t whole = D / L * L;
  for (int64_t r = 0; r < rows; r += 4) {
    const int64_t m = std::min<int64_t>(4, rows - r);
    const float* qr = q + r * D;
    for (int64_t j = 0; j < n; ++j) {
      const float* kj = k + j * D;
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      for (int64_t x = 0; x < whole; x += L) {
        const auto kv = hn::LoadU(d, kj + x);
        a0 = hn::MulAdd(hn::LoadU(d, qr + x), kv, a0);
        if (m > 1) a1 = hn::MulAdd(hn::LoadU(d, qr + D + x), kv, a1);
        if (m > 2) a2 = hn::MulAdd(hn::LoadU(d, qr + 2 * D + x), kv, a2);
        if (m > 3) a3 = hn::MulAdd(hn::LoadU(d, qr + 3 * D + x), kv, a3);
      }
      float sums[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), hn::GetLane(hn::SumOfLanes(d, a1)),
                       hn::GetLane(hn::SumOfLanes(d, a2)), hn::GetLane(hn::SumOfLanes(d, a3))};
      for (int64_t x = whole; x < D; ++x)
        for (int64_t i = 0; i < m; ++i) sums[i] += qr[i * D + x] * kj[x];
      for (int64_t i = 0; i < m; ++i) st[j * ldq + r + i] = sums[i];
    }
  }
}

// The online softmax over one chunk of n keys, a vector of rows at a time. Row r sees the
// chunk's keys in [first[r], last[r]) (as floats); the others, and scores of -inf (masked),
// get weight 0. Each row's running maximum rises to the chunk's, alpha[r] is the factor
// that rescales what the row summed before, sum[r] becomes the rescaled sum plus the chunk's
// weights, and st holds the weights exp(score - maximum).
void OnlineSoftmax(float* st, int64_t ldq, int64_t n, const float* first, const float* last,
                   float* max, float* sum, float* alpha) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto minus_inf = hn::Neg(hn::Inf(d)), one = hn::Set(d, 1.0f);
  for (int64_t r = 0; r < ldq; r += L) {
    const auto f = hn::LoadU(d, first + r), l = hn::LoadU(d, last + r);
    auto mx = minus_inf;
    for (int64_t j = 0; j < n; ++j) {
      const auto jv = hn::Set(d, static_cast<float>(j));
      const auto seen = hn::And(hn::Ge(jv, f), hn::Lt(jv, l));
      const auto s = hn::IfThenElse(seen, hn::LoadU(d, st + j * ldq + r), minus_inf);
      hn::StoreU(s, d, st + j * ldq + r);
      mx = hn::Max(mx, s);
    }
    const auto before = hn::LoadU(d, max + r);
    const auto m = hn::Max(before, mx);
    // 0 on the first chunk a row sees; 1 while it has seen nothing (no -inf - -inf).
    const auto a = hn::IfThenElse(hn::Eq(m, minus_inf), one, ExpF32(d, hn::Sub(before, m)));
    // Weights below e^-87 (and masked or unseen keys, where s - m is -inf or NaN) are 0:
    // their exp would be subnormal, which costs the CPU a slow assist per lane, and nothing
    // that small moves a sum that is at least 1.
    const auto floor = hn::Set(d, -87.0f);
    auto acc = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const auto x = hn::Sub(hn::LoadU(d, st + j * ldq + r), m);
      const auto p = hn::IfThenElseZero(hn::Ge(x, floor), ExpNonPositiveF32(d, hn::Max(x, floor)));
      hn::StoreU(p, d, st + j * ldq + r);
      acc = hn::Add(acc, p);
    }
    hn::StoreU(m, d, max + r);
    hn::StoreU(a, d, alpha + r);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, sum + r), a, acc), d, sum + r);
  }
}

// o[r][e] += sum_j pt[j][r] * v[j][e] for R rows and the n value rows of v (each of E), over
// C vectors of e from e0.
template <int R, int C>
void SumTile(const float* pt, int64_t ldq, const float* v, int64_t E, int64_t n, float* o,
             int64_t e0) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = hn::LoadU(d, o + r * E + e0 + c * L);
  for (int64_t j = 0; j < n; ++j) {
    V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = hn::LoadU(d, v + j * E + e0 + c * L);
    for (int r = 0; r < R; ++r) {
      const V pv = hn::Set(d, pt[j * ldq + r]);
      for (int c = 0; c < C; ++c) acc[r][c] = hn::MulAdd(pv, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) hn::StoreU(acc[r][c], d, o + r * E + e0 + c * L);
}

template <int R>
void SumRows(const float* pt, int64_t ldq, const float* v, int64_t E, int64_t n, float* o) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t e = 0;
  for (; e + kSumVectors * L <= E; e += kSumVectors * L)
    SumTile<R, kSumVectors>(pt, ldq, v, E, n, o, e);
  for (; e + L <= E; e += L) SumTile<R, 1>(pt, ldq, v, E, n, o, e);
  for (; e < E; ++e) {
    for (int r = 0; r < R; ++r) {
      float acc = o[r * E + e];
      for (int64_t j = 0; j < n; ++j) acc += pt[j * ldq + r] * v[j * E + e];
      o[r * E + e] = acc;
    }
  }
}

template <int... R>
void WeightedSumsImpl(std::integer_sequence<int, R...>, const float* pt, int64_t ldq, int64_t rows,
                      const float* v, int64_t E, int64_t n, float* o) {
  using Fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*);
  static constexpr Fn tiles[] = {&SumRows<R + 1>...};
  for (int64_t r = 0; r < rows; r += kSumRows) {
    const int64_t m = std::min<int64_t>(kSumRows, rows - r);
    tiles[m - 1](pt + r, ldq, v, E, n, o + r * E);
  }
}

void WeightedSums(const float* pt, int64_t ldq, int64_t rows, const float* v, int64_t E, int64_t n,
                  float* o) {
  WeightedSumsImpl(std::make_integer_sequence<int, kSumRows>{}, pt, ldq, rows, v, E, n, o);
}

// The softmax of one row of n scores in place, keys contiguous: weights exp(s - max) (0
// below e^-87, as in OnlineSoftmax), *max the largest score and *sum the weights' sum; a row
// of -inf only gets weights 0 and sum 0.
void SoftmaxRow(float* s, int64_t n, float* max, float* sum) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto minus_inf = hn::Neg(hn::Inf(d));
  auto mx = minus_inf;
  int64_t j = 0;
  for (; j + L <= n; j += L) mx = hn::Max(mx, hn::LoadU(d, s + j));
  float m = hn::GetLane(hn::MaxOfLanes(d, mx));
  for (; j < n; ++j) m = std::max(m, s[j]);
  *max = m;
  if (m == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + n, 0.0f);
    *sum = 0;
    return;
  }
  const auto mv = hn::Set(d, m), floor = hn::Set(d, -87.0f);
  auto acc = hn::Zero(d);
  for (j = 0; j + L <= n; j += L) {
    const auto x = hn::Sub(hn::LoadU(d, s + j), mv);
    const auto p = hn::IfThenElseZero(hn::Ge(x, floor), ExpNonPositiveF32(d, hn::Max(x, floor)));
    hn::StoreU(p, d, s + j);
    acc = hn::Add(acc, p);
  }
  float total = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; j < n; ++j) {
    const float x = s[j] - m;
    s[j] = x >= -87.0f ? exp_f32(x) : 0.0f;
    total += s[j];
  }
  *sum = total;
}

// to[i] = from[i] widened, bf16 to f32 (a shift of the bits).
void WidenBf16(const uint16_t* from, float* to, int64_t n) { WidenBf16Array(from, to, n); }

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(Lanes);
HWY_EXPORT(ScoresTransposed);
HWY_EXPORT(ScoresDirect);
HWY_EXPORT(OnlineSoftmax);
HWY_EXPORT(WeightedSums);
HWY_EXPORT(WidenBf16);
HWY_EXPORT(SoftmaxRow);

using ir::Op;

namespace {

#if HWY_ARCH_X86
// Decoding steps in bf16 (a few query rows against a long KV cache), with AVX-512 BF16:
// keys and values are read as they are (no widened copy), the scores of 16 keys come out of
// one transposing reduction instead of one horizontal sum per score, and the softmax runs
// along the keys. Products are exact (bf16 x bf16 in f32), sums in f32.

// Lane i of the result: the sum of the lanes of v[i], for 16 vectors.
PRISM_TARGET_AVX512_BF16 inline __m512 lane_sums16(const __m512* v) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {  // per 128-bit block: pairs of lanes of v[2i] and v[2i+1]
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {  // per block: the block's sum of v[4i] .. v[4i+3]
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Blocks summed across: block i of the result is the sum of u[i]'s four blocks.
  const __m512 w0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
  const __m512 w1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

// s[r * ldk + j] = scale * (q[r] . k[j]) for R rows and n keys of D values (D % 32 == 0),
// prefetching `ahead` as it goes (amx_attention.h).
PRISM_TARGET_AVX512_BF16 void decode_scores_bf16(const uint16_t* const* q, int R, int64_t D,
                                                 const uint16_t* k, int64_t n, float scale,
                                                 float* s, int64_t ldk,
                                                 std::span<const DecodeAhead> ahead) {
  const __m512 sc = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const uint16_t* kj = k + j * D;
    prefetch_ahead(ahead, j);
    for (int r = 0; r < R; ++r) {
      __m512 acc[16];
      for (int x = 0; x < 16; ++x) acc[x] = _mm512_setzero_ps();
      for (int64_t e = 0; e < D; e += 32) {
        const __m512bh qv = load_bf16x32(q[r] + e);
#pragma GCC unroll 16
        for (int x = 0; x < 16; ++x)
          acc[x] = _mm512_dpbf16_ps(acc[x], qv, load_bf16x32(kj + x * D + e));
      }
      _mm512_storeu_ps(s + r * ldk + j, _mm512_mul_ps(lane_sums16(acc), sc));
    }
  }
  for (; j < n; ++j) {  // the last few keys, one horizontal sum each
    for (int r = 0; r < R; ++r) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t e = 0; e < D; e += 32)
        acc = _mm512_dpbf16_ps(acc, load_bf16x32(q[r] + e), load_bf16x32(k + j * D + e));
      s[r * ldk + j] = _mm512_reduce_add_ps(acc) * scale;
    }
  }
}

// o[r][e] = sum_j p[r * ldk + j] * v[j][e] for R <= 4 rows and n values of E (E % 64 == 0).
PRISM_TARGET_AVX512_BF16 void decode_sums_bf16(const float* p, int64_t ldk, int R,
                                               const uint16_t* v, int64_t E, int64_t n, float* o) {
  for (int64_t e0 = 0; e0 < E; e0 += 64) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* vj = v + j * E + e0;
      __m512 vv[4];
      for (int c = 0; c < 4; ++c) vv[c] = widen_bf16x16(vj + 16 * c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        if (r >= R) break;
        const __m512 pr = _mm512_set1_ps(p[r * ldk + j]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + r * E + e0 + 16 * c, acc[r][c]);
  }
}
// A prompt's scores in bf16 without AMX (the vector path's transposed layout, as ScoreTile
// writes it): st[j][r] = scale * (q_r . k_j) for the n keys of D values (D even) as the cache
// keeps them, and all ldq rows (a multiple of 32) from qp, the rows' pairs of d side by side
// (qp[p * ldq + r]: values 2p and 2p + 1 of row r). vdpbf16ps takes a pair a lane, twice the
// products of an f32 FMA, and the keys need no widening. Tiles of 8 keys x 32 rows, as
// ScoreTile's on AVX-512.
PRISM_TARGET_AVX512_BF16 void score_pairs_bf16(const uint32_t* qp, int64_t ldq, int64_t D,
                                               const uint16_t* k, int64_t n, float scale,
                                               float* st) {
  const __m512 sc = _mm512_set1_ps(scale);
  const int64_t pairs = D / 2;
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    const int64_t keys = std::min<int64_t>(8, n - j0);
    const auto* kp =
        reinterpret_cast<const uint32_t*>(k + j0 * D);  // key x's pair p: x * pairs + p
    for (int64_t r = 0; r < ldq; r += 32) {
      __m512 a0[8], a1[8];
      for (int x = 0; x < 8; ++x) a0[x] = a1[x] = _mm512_setzero_ps();
      for (int64_t p = 0; p < pairs; ++p) {
        const __m512bh q0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(qp + p * ldq + r));
        const __m512bh q1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(qp + p * ldq + r + 16));
#pragma GCC unroll 8
        for (int x = 0; x < 8; ++x) {
          if (x >= keys) break;
          const __m512bh kv =
              reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(kp[x * pairs + p])));
          a0[x] = _mm512_dpbf16_ps(a0[x], q0, kv);
          a1[x] = _mm512_dpbf16_ps(a1[x], q1, kv);
        }
      }
      for (int x = 0; x < keys; ++x) {
        _mm512_storeu_ps(st + (j0 + x) * ldq + r, _mm512_mul_ps(a0[x], sc));
        _mm512_storeu_ps(st + (j0 + x) * ldq + r + 16, _mm512_mul_ps(a1[x], sc));
      }
    }
  }
}

// The same on CPUs with AVX2 and FMA but not AVX-512 BF16: keys and values widened into
// registers as they are read (a block of 8 keys once, into L1, for all the rows), the scores of
// 8 keys from one transposing reduction, the products and sums in f32. One Llama-1B layer at
// position 512 (`prism-bench attention`, AMD EPYC Zen 3, 2 threads): bf16 101 us before, 67 with
// it; f32 79 and 63-67.
#define PRISM_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))

// 8 values from p (f32, or bf16 widened) as f32.
template <typename S>
PRISM_TARGET_AVX2_FMA inline __m256 load8_f32(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Lane i of the result: the sum of the lanes of v[i], for 8 vectors.
PRISM_TARGET_AVX2_FMA inline __m256 lane_sums8(const __m256* v) {
  // hadd(a, b) = a01 a23 b01 b23 | a45 a67 b45 b67: twice, then the two halves added.
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

PRISM_TARGET_AVX2_FMA inline float lane_sum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// s[r * ldk + j] = scale * (q[r] . k[j]) for R rows (f32) and n keys of D values (D % 8 == 0);
// kw: room for 8 * D floats (bf16 keys widened, 8 at a time).
template <typename S>
PRISM_TARGET_AVX2_FMA void decode_scores_avx2(const float* q, int R, int64_t D, const S* k,
                                              int64_t n, float scale, float* s, int64_t ldk,
                                              float* kw) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* kj;
    if constexpr (std::is_same_v<S, float>) {
      kj = k + j * D;
    } else {
      for (int64_t i = 0; i < 8 * D; i += 8) _mm256_storeu_ps(kw + i, load8_f32(k + j * D + i));
      kj = kw;
    }
    for (int r = 0; r < R; ++r) {
      __m256 acc[8];
      for (int x = 0; x < 8; ++x) acc[x] = _mm256_setzero_ps();
      for (int64_t e = 0; e < D; e += 8) {
        const __m256 qv = _mm256_loadu_ps(q + r * D + e);
#pragma GCC unroll 8
        for (int x = 0; x < 8; ++x)
          acc[x] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kj + x * D + e), acc[x]);
      }
      _mm256_storeu_ps(s + r * ldk + j, _mm256_mul_ps(lane_sums8(acc), sc));
    }
  }
  for (; j < n; ++j) {  // the last few keys, one horizontal sum each
    for (int r = 0; r < R; ++r) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t e = 0; e < D; e += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * D + e), load8_f32(k + j * D + e), acc);
      s[r * ldk + j] = lane_sum(acc) * scale;
    }
  }
}

// o[r][e] = sum_j p[r * ldk + j] * v[j][e] for R <= 4 rows and n values of E (E % 16 == 0).
template <typename S>
PRISM_TARGET_AVX2_FMA void decode_sums_avx2(const float* p, int64_t ldk, int R, const S* v,
                                            int64_t E, int64_t n, float* o) {
  for (int64_t e0 = 0; e0 < E; e0 += 16) {
    __m256 acc[4][2];
    for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m256 v0 = load8_f32(v + j * E + e0), v1 = load8_f32(v + j * E + e0 + 8);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        if (r >= R) break;
        const __m256 pr = _mm256_broadcast_ss(p + r * ldk + j);
        acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(o + r * E + e0, acc[r][0]);
      _mm256_storeu_ps(o + r * E + e0 + 8, acc[r][1]);
    }
  }
}
#else  // never called elsewhere: attend_block takes the pairs only on x86
void score_pairs_bf16(const uint32_t*, int64_t, int64_t, const uint16_t*, int64_t, float, float*) {}
#endif

constexpr int64_t kBlockRows = 64;  // query rows (heads x positions) per work item
constexpr int64_t kChunk = 256;     // keys per step of the online softmax
// keys per step on AMX tiles: a block's 64 rows' scores (128 KiB) stay in L2; 128 keys were
// 12 % slower at Llama 1B's shapes, 1024 no faster
constexpr int64_t kTileChunk = 512;
constexpr int64_t kDirectRows = 8;  // fewer rows than this score keys without transposing

struct Geometry {
  int64_t B, H, Sq, D, G, Sk, E, rep;
  int64_t offset;  // position of query row 0
  bool causal;
  int64_t window;

  // The keys row i can see: [first, last).
  int64_t first(int64_t i) const {
    return window > 0 ? std::clamp(offset + i - window + 1, int64_t{0}, Sk) : 0;
  }
  int64_t last(int64_t i) const { return causal ? std::clamp(offset + i + 1, int64_t{0}, Sk) : Sk; }
};

// The per-chunk steps for f32, as the SIMD target in use compiles them.
struct F32Kernels {
  int64_t lanes = HWY_DYNAMIC_DISPATCH(Lanes)();
  void (*transposed)(const float* qt, int64_t ldq, int64_t D, const float* k, int64_t n,
                     float* st) = &HWY_DYNAMIC_DISPATCH(ScoresTransposed);
  void (*direct)(const float* q, int64_t rows, int64_t D, const float* k, int64_t n, float* st,
                 int64_t ldq) = &HWY_DYNAMIC_DISPATCH(ScoresDirect);
  void (*softmax)(float* st, int64_t ldq, int64_t n, const float* first, const float* last,
                  float* max, float* sum, float* alpha) = &HWY_DYNAMIC_DISPATCH(OnlineSoftmax);
  void (*sums)(const float* pt, int64_t ldq, int64_t rows, const float* v, int64_t E, int64_t n,
               float* o) = &HWY_DYNAMIC_DISPATCH(WeightedSums);
  void (*widen_bf16)(const uint16_t* from, float* to, int64_t n) = &HWY_DYNAMIC_DISPATCH(WidenBf16);
  void (*softmax_row)(float* s, int64_t n, float* max,
                      float* sum) = &HWY_DYNAMIC_DISPATCH(SoftmaxRow);
  // Whether blocks of 16 or more bf16 rows take AMX tiles (attend_tiles): not under a SIMD
  // target without AVX-512 BF16 (one forced for tests), whose CPUs have no AMX.
  bool tiles = amx_attention_available() && simd::current().avx512_bf16;
  // The decoding steps' paths the target in use takes (attend_decode).
#if HWY_ARCH_X86
  bool decode_avx512_bf16 = simd::current().avx512_bf16;
  // A prompt's bf16 scores by pairs of d (score_pairs_bf16) where vdpbf16ps outruns f32 FMAs
  // here, as the few-row products measured it (rows_kernel, PRISM_CPU_ROWS=dpbf16): on an
  // Intel Xeon it runs at half their rate (the pairs made one layer's 512-token prefill 5.7
  // -> 6.5 ms with AMX off), on AMD's Zen 4 at twice.
  bool score_pairs = decode_avx512_bf16 && rows_kernel() == RowsKernel::dpbf16;
  bool decode_avx2 = simd::current().hwy != 0 && simd::current().hwy <= HWY_AVX2;
#endif
};

// The same steps for f64, as plain loops over the same layout (no padding).
void scores_f64(const double* q, int64_t rows, int64_t D, const double* k, int64_t n, double* st,
                int64_t ldq) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += q[r * D + d] * k[j * D + d];
      st[j * ldq + r] = acc;
    }
}

void softmax_f64(double* st, int64_t ldq, int64_t rows, int64_t n, const double* first,
                 const double* last, double* max, double* sum, double* alpha) {
  constexpr double minus_inf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    double mx = minus_inf;
    for (int64_t j = 0; j < n; ++j) {
      double& s = st[j * ldq + r];
      if (j < first[r] || j >= last[r]) s = minus_inf;
      mx = std::max(mx, s);
    }
    const double m = std::max(max[r], mx);
    alpha[r] = m == minus_inf ? 1 : std::exp(max[r] - m);
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) {
      double& s = st[j * ldq + r];
      s = s > minus_inf ? std::exp(s - m) : 0;
      acc += s;
    }
    max[r] = m;
    sum[r] = sum[r] * alpha[r] + acc;
  }
}

void sums_f64(const double* pt, int64_t ldq, int64_t rows, const double* v, int64_t E, int64_t n,
              double* o) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double p = pt[j * ldq + r];
      if (p == 0) continue;
      for (int64_t e = 0; e < E; ++e) o[r * E + e] += p * v[j * E + e];
    }
}

// Per thread: the block's queries (scaled; as they are and transposed), the chunk's keys and
// values, the scores (transposed), and per row the visible keys of the chunk, the running
// maximum, sum, rescaling factor and output.
template <typename T>
struct Scratch {
  std::vector<T> q, qt, keys, values, st, first, last, max, sum, alpha, out;
  std::vector<uint32_t> qp;  // bf16 rows' pairs of d, for score_pairs_bf16
  // The AMX path's (attend_tiles): the rows' queries, the weights in bf16, the scores and
  // sums, and each row's visible keys of the chunk.
  AlignedBuffer<uint16_t> tile_q, tile_p;
  AlignedBuffer<float> tile_s, tile_out;
  std::vector<int64_t> from, to;
};

template <typename S, typename T>
void widen(const S* from, T* to, int64_t n, const F32Kernels& f32) {
  if constexpr (std::is_same_v<S, BF16> && std::is_same_v<T, float>) {
    f32.widen_bf16(reinterpret_cast<const uint16_t*>(from), to, n);
  } else {
    for (int64_t i = 0; i < n; ++i) to[i] = to_compute<T>(from[i]);
  }
}

// n values from `from` in the compute type: the memory itself when it holds that type, else
// widened into `to`.
template <typename S, typename T>
const T* in_compute_type(const S* from, int64_t n, std::vector<T>& to, const F32Kernels& f32) {
  if constexpr (std::is_same_v<S, T>) {
    return from;
  } else {
    to.resize(static_cast<size_t>(n));
    widen(from, to.data(), n, f32);
    return to.data();
  }
}

inline int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The block's rows of output, each of its E sums divided by the row's sum of weights: row r
// into y's row row_of(r). A row that sees nothing gets 0/0, as the softmax over no finite
// score does.
template <typename S, typename T, typename RowOf>
void write_rows(const T* out, const T* sum, int64_t rows, int64_t E, RowOf row_of, S* y) {
  for (int64_t r = 0; r < rows; ++r) {
    S* yr = y + row_of(r) * E;
    const T inv = sum[r] > 0 ? T(1) / sum[r] : std::numeric_limits<T>::quiet_NaN();
    for (int64_t e = 0; e < E; ++e) yr[e] = to_storage<S>(out[r * E + e] * inv);
  }
}

#if HWY_ARCH_X86
// attend_block for a decoding step in bf16 or f32 (see decode_scores_bf16 and
// decode_scores_avx2): the scores of every visible key at once, then the softmax along each
// row, then the weighted sums of the values. `bf16`: with AVX-512 BF16 (S bf16, D % 32 == 0,
// E % 64 == 0), else with AVX2 (D % 8 == 0, E % 16 == 0).
template <typename S, typename RowOf>
void attend_decode(const Geometry& g, std::span<const std::byte* const> in, S* y, int64_t b,
                   int64_t gk, int64_t i0, int64_t nb, int64_t rows, int64_t lo, int64_t hi,
                   float scale, bool bf16, RowOf row_of, Scratch<float>& w, const F32Kernels& f32) {
  const int64_t D = g.D, E = g.E, n = std::max<int64_t>(hi - lo, 0), ldk = n + 16;
  const S* keys = reinterpret_cast<const S*>(in[1]) + ((b * g.G + gk) * g.Sk + lo) * D;
  const S* values = reinterpret_cast<const S*>(in[2]) + ((b * g.G + gk) * g.Sk + lo) * E;
  w.st.resize(static_cast<size_t>(rows * ldk));
  w.out.resize(static_cast<size_t>(4 * E));
  float* s = w.st.data();
  if (n > 0 && bf16) {
    if constexpr (std::is_same_v<S, BF16>) {
      const uint16_t* q[4];
      for (int64_t r = 0; r < rows; ++r)
        q[r] = reinterpret_cast<const uint16_t*>(in[0]) + row_of(r) * D;
      const auto* k16 = reinterpret_cast<const uint16_t*>(keys);
      const auto* v16 = reinterpret_cast<const uint16_t*>(values);
      // Where decoding prefetches (decode_prefetch_bytes: Intel CPUs by default), the keys 1
      // KiB ahead into L1 and the values of the keys in hand into L2, for the sums after the
      // softmax: a layer's cache comes from memory, after the rest of the step streamed the
      // weights. On 2 cores of an Intel Xeon with AMX, the Q4_0 1B-shaped file at position
      // 340-400: the 16 layers' attention 1.11-1.19 -> 0.82 ms a step (2 KiB ahead the same,
      // 8 KiB 0.91-0.95).
      const int64_t ahead = 2 * decode_prefetch_bytes();
      const DecodeAhead streams[2] = {
          {reinterpret_cast<const char*>(k16) + ahead, n - ahead / (D * 2), D * 2, true},
          {reinterpret_cast<const char*>(v16), n, E * 2, false}};
      const std::span<const DecodeAhead> pf(streams, ahead ? 2 : 0);
      // The scores of whole blocks of 16 keys on AMX tiles where the CPU has them, the rest
      // (or all) in vector code.
      const int64_t done =
          f32.tiles ? amx_decode_scores(q, static_cast<int>(rows), D, k16, n, scale, s, ldk, pf)
                    : 0;
      decode_scores_bf16(q, static_cast<int>(rows), D, k16 + done * D, n - done, scale, s + done,
                         ldk, done ? std::span<const DecodeAhead>() : pf);
    }
  } else if (n > 0) {
    w.q.resize(static_cast<size_t>((rows + 8) * D));  // the rows in f32, then 8 keys
    for (int64_t r = 0; r < rows; ++r)
      widen(reinterpret_cast<const S*>(in[0]) + row_of(r) * D, w.q.data() + r * D, D, f32);
    decode_scores_avx2(w.q.data(), static_cast<int>(rows), D, keys, n, scale, s, ldk,
                       w.q.data() + rows * D);
  }
  float sum[4] = {0, 0, 0, 0};
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r % nb;
    const int64_t f = std::clamp(g.first(i) - lo, int64_t{0}, n);
    const int64_t l = std::clamp(g.last(i) - lo, f, n);
    float* sr = s + r * ldk;
    std::fill(sr, sr + f, -std::numeric_limits<float>::infinity());
    std::fill(sr + l, sr + n, -std::numeric_limits<float>::infinity());
    float max;
    f32.softmax_row(sr, n, &max, &sum[r]);
  }
  if (n == 0) {
    std::fill(w.out.begin(), w.out.end(), 0.0f);
  } else if (bf16) {
    if constexpr (std::is_same_v<S, BF16>) {
      decode_sums_bf16(s, ldk, static_cast<int>(rows), reinterpret_cast<const uint16_t*>(values), E,
                       n, w.out.data());
    }
  } else {
    decode_sums_avx2(s, ldk, static_cast<int>(rows), values, E, n, w.out.data());
  }
  write_rows(w.out.data(), sum, rows, E, row_of, y);
}
#endif

// The AMX path's keys and values (attend_tiles), regrouped once a call for all the blocks of
// rows that read them rather than once a block: per batch and key head, per chunk of
// kTileChunk keys from key 0 up to the last key a row sees, the chunk's keys as
// amx_pack_keys lays them out (their count rounded up to 64) and then its values as
// amx_pack_values does (rounded up to 32). A prompt's chunk of 1024 queries reads each key in
// 64 blocks of rows; packing them in each block took 12 % of its attention.
struct PackedKv {
  const uint16_t* data = nullptr;
  int64_t keys = 0;    // the keys packed, [0, keys)
  int64_t chunks = 0;  // per batch and key head
  int64_t D = 0, E = 0, G = 0;

  int64_t chunk_values() const { return (D + E) * kTileChunk; }
  // Chunk c of key head gk of batch b: its keys, and its values after them.
  const uint16_t* chunk(int64_t b, int64_t gk, int64_t c) const {
    return data + ((b * G + gk) * chunks + c) * chunk_values();
  }
  const uint16_t* values(const uint16_t* chunk) const { return chunk + D * kTileChunk; }
  // Keys in chunk c: its keys' rows in amx_pack_keys' layout are this many apart.
  int64_t keys_in(int64_t c) const { return std::min(kTileChunk, keys - c * kTileChunk); }
};

// The packing of keys [0, keys) into `buffer`, or where that takes more than
// kKeptPackedBytes (long contexts: 8 key heads of 64 take 256 MiB at 128 Ki keys), into
// `large`, which the caller frees after the call rather than keep it.
constexpr int64_t kKeptPackedBytes = int64_t{64} << 20;

PackedKv pack_kv(const Geometry& g, std::span<const std::byte* const> in, int64_t keys,
                 AlignedBuffer<uint16_t>& buffer, std::optional<AlignedBuffer<uint16_t>>& large,
                 ThreadPool& pool) {
  PackedKv kv;
  kv.keys = keys;
  kv.chunks = (keys + kTileChunk - 1) / kTileChunk;
  kv.D = g.D;
  kv.E = g.E;
  kv.G = g.G;
  const int64_t values = g.B * g.G * kv.chunks * kv.chunk_values();
  AlignedBuffer<uint16_t>& into =
      values * int64_t{sizeof(uint16_t)} <= kKeptPackedBytes ? buffer : large.emplace();
  uint16_t* data = into.reserve(values);
  kv.data = data;
  const auto* k = reinterpret_cast<const uint16_t*>(in[1]);
  const auto* v = reinterpret_cast<const uint16_t*>(in[2]);
  pool.parallel_for(g.B * g.G * kv.chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c = t % kv.chunks, head = t / kv.chunks;  // head: b * G + gk
      const int64_t c0 = c * kTileChunk, n = kv.keys_in(c);
      uint16_t* at = data + t * kv.chunk_values();
      amx_pack_keys(k + (head * g.Sk + c0) * g.D, n, g.D, round_up(n, 64), at);
      amx_pack_values(v + (head * g.Sk + c0) * g.E, n, g.E, round_up(n, 32), at + g.D * kTileChunk);
    }
  });
  return kv;
}

// attend_block for 16 or more rows in bf16 on AMX tiles (amx_attention.h): per chunk of keys
// (of kv's), the scores by tiles, the online softmax along each row, the weighted sums by
// tiles.
template <typename RowOf>
void attend_tiles(const Geometry& g, std::span<const std::byte* const> in, BF16* y, int64_t b,
                  int64_t gk, int64_t i0, int64_t nb, int64_t rows, int64_t lo, int64_t hi,
                  float scale, RowOf row_of, Scratch<float>& w, const PackedKv& kv) {
  const int64_t D = g.D, E = g.E, padded = round_up(rows, 16);
  const auto* q = reinterpret_cast<const uint16_t*>(in[0]);
  uint16_t* qa = w.tile_q.reserve(padded * D);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(qa + r * D, q + row_of(r) * D, D * 2);
  std::fill(qa + rows * D, qa + padded * D, uint16_t{0});
  float* out = w.tile_out.reserve(padded * E);
  std::fill(out, out + padded * E, 0.0f);
  w.max.assign(static_cast<size_t>(padded), -std::numeric_limits<float>::infinity());
  w.sum.assign(static_cast<size_t>(padded), 0.0f);
  w.alpha.resize(static_cast<size_t>(padded));
  w.from.assign(static_cast<size_t>(padded), 0);  // padding rows see nothing
  w.to.assign(static_cast<size_t>(padded), 0);
  for (int64_t c = lo / kTileChunk; c * kTileChunk < hi; ++c) {
    // The block's keys of the chunk: the scores and sums go as far as they do (and the
    // weights of keys past them are 0).
    const int64_t c0 = c * kTileChunk, n = std::min(kTileChunk, hi - c0);
    const int64_t cols = round_up(n, 64), keys = round_up(n, 32);
    const uint16_t* chunk = kv.chunk(b, gk, c);
    float* s = w.tile_s.reserve(padded * cols);
    amx_scores(qa, padded, D, chunk, round_up(kv.keys_in(c), 64), cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r % nb;
      w.from[r] = std::clamp(g.first(i) - c0, int64_t{0}, n);
      w.to[r] = std::clamp(g.last(i) - c0, w.from[r], n);
    }
    uint16_t* p = w.tile_p.reserve(2 * padded * keys);
    amx_softmax_weights(s, cols, padded, w.from.data(), w.to.data(), scale, keys, w.max.data(),
                        w.sum.data(), w.alpha.data(), p);
    for (int64_t r = 0; r < rows; ++r) {
      if (w.alpha[r] == 1.0f) continue;
      for (int64_t e = 0; e < E; ++e) out[r * E + e] *= w.alpha[r];
    }
    amx_weighted_sums(p, padded, kv.values(chunk), E, keys, out);
  }
  write_rows(out, w.sum.data(), rows, E, row_of, y);
}

// The rows of query positions [i0, i1) of every query head reading key head gk of batch b.
// Row r is head gk * rep + r / nb at position i0 + r % nb.
template <typename S, typename T>
void attend_block(const Geometry& g, const ir::AttentionAttrs& a,
                  std::span<const std::byte* const> in, DType mask_dtype, S* y, int64_t b,
                  int64_t gk, int64_t i0, int64_t i1, Scratch<T>& w, const F32Kernels& f32,
                  const PackedKv* kv) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  const int64_t D = g.D, E = g.E, nb = i1 - i0, rows = g.rep * nb;
  int64_t lo = g.Sk, hi = 0;  // the keys some row of the block sees
  for (int64_t i = i0; i < i1; ++i) {
    if (g.first(i) < g.last(i)) {
      lo = std::min(lo, g.first(i));
      hi = std::max(hi, g.last(i));
    }
  }
  auto row_of = [&](int64_t r) { return (b * g.H + gk * g.rep + r / nb) * g.Sq + i0 + r % nb; };

  if constexpr (std::is_same_v<S, BF16>) {
    if (kv && rows >= 16) {
      attend_tiles(g, in, y, b, gk, i0, nb, rows, lo, hi, static_cast<float>(a.scale), row_of, w,
                   *kv);
      return;
    }
  }
#if HWY_ARCH_X86
  if constexpr (std::is_same_v<S, BF16> || std::is_same_v<S, float>) {
    if (rows <= 4 && !a.has_mask) {
      const bool bf16 =
          std::is_same_v<S, BF16> && g.D % 32 == 0 && g.E % 64 == 0 && f32.decode_avx512_bf16;
      if (bf16 || (g.D % 8 == 0 && g.E % 16 == 0 && f32.decode_avx2)) {
        attend_decode(g, in, y, b, gk, i0, nb, rows, lo, hi, static_cast<float>(a.scale), bf16,
                      row_of, w, f32);
        return;
      }
    }
  }
#endif
  const bool transposed = kF32 && rows >= kDirectRows;
  const int64_t ldq = kF32 ? round_up(rows, transposed ? 2 * f32.lanes : f32.lanes) : rows;
  const T scale = static_cast<T>(a.scale);
  // bf16 rows on AVX-512 BF16 score by pairs of d (score_pairs_bf16), from the rows and keys
  // as they are.
#if HWY_ARCH_X86
  const bool pairs =
      std::is_same_v<S, BF16> && transposed && f32.score_pairs && f32.lanes == 16 && D % 2 == 0;
#else
  const bool pairs = false;
#endif
  if (pairs) {
    w.qp.assign(static_cast<size_t>(D / 2 * ldq), 0);
    for (int64_t r = 0; r < rows; ++r) {
      const auto* qr = reinterpret_cast<const uint32_t*>(in[0]) + row_of(r) * (D / 2);
      for (int64_t p = 0; p < D / 2; ++p) w.qp[p * ldq + r] = qr[p];
    }
  } else {
    w.q.resize(static_cast<size_t>(rows * D));
    for (int64_t r = 0; r < rows; ++r) {
      widen(reinterpret_cast<const S*>(in[0]) + row_of(r) * D, w.q.data() + r * D, D, f32);
      for (int64_t d = 0; d < D; ++d) w.q[r * D + d] *= scale;
    }
  }
  if (transposed && !pairs) {
    w.qt.assign(static_cast<size_t>(D * ldq), T(0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d) w.qt[d * ldq + r] = w.q[r * D + d];
  }
  w.out.assign(static_cast<size_t>(rows * E), T(0));
  w.max.assign(static_cast<size_t>(ldq), minus_inf);
  w.sum.assign(static_cast<size_t>(ldq), T(0));
  w.alpha.resize(static_cast<size_t>(ldq));
  w.first.assign(static_cast<size_t>(ldq), T(0));  // padding rows see nothing
  w.last.assign(static_cast<size_t>(ldq), T(0));

  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int64_t n = std::min(kChunk, hi - c0);
    // GCC 12's code for Highway's SCALAR target (its output sums, vectorized by the compiler
    // across rows it should not touch) loads weights up to three rows past the last and values
    // one row past, and drops them. On that target keys and values are read from copies with a
    // spare row (values straight from the cache would read past the end of its memory), and
    // the scores keep four spare rows.
    const bool spare = f32.lanes == 1;
    auto rows_of = [&](const std::byte* from, int64_t width, std::vector<T>& copy) -> const T* {
      const S* at = reinterpret_cast<const S*>(from) + ((b * g.G + gk) * g.Sk + c0) * width;
      if (!spare) return in_compute_type(at, n * width, copy, f32);
      copy.resize(static_cast<size_t>((n + 1) * width));
      widen(at, copy.data(), n * width, f32);
      return copy.data();
    };
    const T* keys = pairs ? nullptr : rows_of(in[1], D, w.keys);
    const T* values = rows_of(in[2], E, w.values);
    w.st.resize(static_cast<size_t>((n + 4) * ldq));
    if constexpr (kF32) {
      if (pairs) {
        const auto* k = reinterpret_cast<const uint16_t*>(in[1]) + ((b * g.G + gk) * g.Sk + c0) * D;
        score_pairs_bf16(w.qp.data(), ldq, D, k, n, scale, w.st.data());
      } else if (transposed) {
        f32.transposed(w.qt.data(), ldq, D, keys, n, w.st.data());
      } else {
        f32.direct(w.q.data(), rows, D, keys, n, w.st.data(), ldq);
      }
    } else {
      scores_f64(w.q.data(), rows, D, keys, n, w.st.data(), ldq);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r % nb;
      const int64_t f = std::clamp(g.first(i) - c0, int64_t{0}, n);
      w.first[r] = static_cast<T>(f);
      w.last[r] = static_cast<T>(std::clamp(g.last(i) - c0, f, n));
    }
    if (a.has_mask) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = row_of(r) * g.Sk + c0;
        for (auto j = static_cast<int64_t>(w.first[r]); j < static_cast<int64_t>(w.last[r]); ++j) {
          T& s = w.st[j * ldq + r];
          if (mask_dtype == DType::boolean) {
            if (!reinterpret_cast<const uint8_t*>(in[3])[at + j]) s = minus_inf;
          } else {
            s += static_cast<T>(load_f64(mask_dtype, in[3], at + j));
          }
        }
      }
    }
    if constexpr (kF32) {
      f32.softmax(w.st.data(), ldq, n, w.first.data(), w.last.data(), w.max.data(), w.sum.data(),
                  w.alpha.data());
    } else {
      softmax_f64(w.st.data(), ldq, rows, n, w.first.data(), w.last.data(), w.max.data(),
                  w.sum.data(), w.alpha.data());
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (w.alpha[r] == T(1)) continue;
      for (int64_t e = 0; e < E; ++e) w.out[r * E + e] *= w.alpha[r];
    }
    if constexpr (kF32) {
      f32.sums(w.st.data(), ldq, rows, values, E, n, w.out.data());
    } else {
      sums_f64(w.st.data(), ldq, rows, values, E, n, w.out.data());
    }
  }

  write_rows(w.out.data(), w.sum.data(), rows, E, row_of, y);
}

}  // namespace

Kernel make_attention_kernel(const ir::Graph& graph, ir::ValueId id) {
  const ir::Node& n = graph.node(id);
  if (n.op != Op::attention) return nullptr;
  const auto a = n.attr<ir::AttentionAttrs>();
  Shape q = graph.node(n.inputs[0]).shape, k = graph.node(n.inputs[1]).shape;
  Shape v = graph.node(n.inputs[2]).shape;
  DType mask_dtype = a.has_mask ? graph.node(n.inputs[3]).shape.dtype() : DType::boolean;
  DType offset_dtype = a.has_offset ? graph.node(n.inputs.back()).shape.dtype() : DType::i64;
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    [[maybe_unused]] simd::Target target = simd::current();  // points Highway's tables at it
    const F32Kernels f32;
    Geometry g{q.size(0), q.size(1), q.size(2), q.size(3),
               k.size(1), k.size(2), v.size(3), q.size(1) / k.size(1),
               0,         a.causal,  a.window};
    g.offset = a.has_offset ? load_index(offset_dtype, in.back(), 0) : g.Sk - g.Sq;
    const int64_t nb = std::clamp<int64_t>(kBlockRows / g.rep, 1, g.Sq);  // positions per item
    const int64_t blocks = (g.Sq + nb - 1) / nb;
    visit_storage(q.dtype(), [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, double> || std::is_same_v<S, float> ||
                    std::is_same_v<S, F16> || std::is_same_v<S, BF16>) {
        using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
        S* y = reinterpret_cast<S*>(out);
        // Blocks of 16 or more bf16 rows take AMX tiles where the CPU has them (attend_tiles),
        // their keys and values packed first.
        PackedKv packed;
        std::optional<AlignedBuffer<uint16_t>> large;  // where it takes too much to keep
        const PackedKv* kv = nullptr;
        if constexpr (std::is_same_v<S, BF16>) {
          if (f32.tiles && g.rep * nb >= 16 && !a.has_mask && g.D % 32 == 0 && g.E % 16 == 0) {
            int64_t keys = 0;  // the last key a row sees
            for (int64_t i = 0; i < g.Sq; ++i)
              if (g.first(i) < g.last(i)) keys = std::max(keys, g.last(i));
            thread_local AlignedBuffer<uint16_t> buffer;  // kept for the next call
            packed = pack_kv(g, in, keys, buffer, large, pool);
            kv = &packed;
          }
        }
        // Later query blocks see more keys: hand them out first.
        pool.parallel_for(g.B * g.G * blocks, 1, [&](int64_t t0, int64_t t1) {
          thread_local Scratch<T> scratch;
          for (int64_t t = t0; t < t1; ++t) {
            int64_t block = blocks - 1 - t % blocks, gk = (t / blocks) % g.G,
                    b = t / (blocks * g.G);
            int64_t i0 = block * nb, i1 = std::min(g.Sq, i0 + nb);
            attend_block<S, T>(g, a, in, mask_dtype, y, b, gk, i0, i1, scratch, f32, kv);
          }
        });
      } else {
        fail("cpu: attention needs a floating-point dtype, got {}", name(q.dtype()));
      }
    });
  };
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
