// quant_rows_int8's kernels for CPUs with AVX2 but not AVX-512 VNNI (AMD's Zen 1-3, Intel's
// Haswell to Comet Lake, and AVX-512 CPUs without VNNI): llama.cpp's arithmetic on 256-bit
// vectors, with the records and exact block sums of the VNNI kernels (quant_rows.h).
//
// AVX2 has no vpdpbusd; vpmaddubsw multiplies unsigned weight bytes by signed activation bytes
// and adds neighbours into 16 bits (saturating), and vpmaddwd by ones adds those pairs into 32
// bits: each 32-bit lane then sums four products, as a vpdpbusd lane does. Saturation cannot
// happen: the weights' unsigned values are at most 63 (Q6_K) and the activations within
// +-127, so a pair stays under 16002. Q8_0's weights are signed; they go in as |w| against the
// activations given w's sign (vpsignb), at most 128 * 127 * 2.
//
// The K-quants take vpmaddwd by each sub-block's scale (16-bit words) instead of ones, so a
// 32-bit lane holds scale * its pair sums. Every block's sum over the lanes is then an exact
// integer, and each (weight row, activation row) pair adds it into one f32 lane, block after
// block, as the VNNI and AMX kernels do:
//   - Q8_0, Q4_0, Q5_0: acc = fma(float(T), d_w * d_x, acc), T the block's integer product of
//     the weights' values (less their offset, which the records take out) and the activations.
//   - Q4_1, Q5_1: the same, then acc = fma(m_w, d_x * sum x, acc) (the record's f32 sum).
//   - Q4_K, Q5_K: acc = fma(float(T), d_w * d_x, acc), T = sum_j scale_j * (sub-block j's
//     integer product), then acc = fma(float(M), -dmin_w * d_x, acc), M = sum_j min_j * (the
//     activations' sum over sub-block j).
//   - Q6_K: T less 32 * sum_j scale_j * (the activations' sum over the 16 values of j).
// So these kernels give the VNNI and AMX kernels' bits for every format without a minimum and
// for the K-quants, and a row's result never depends on the rows batched with it. Q4_0 weights
// kept with each 16 rows' blocks interleaved (weight_layout.h) take a kernel of their own
// (InterleavedQ4_0Rows, below), with the same bits.
//
// A tile takes four weight rows (from four quarters of the range, prefetched 1 KiB ahead, as
// the other kernels) against up to 8 activation rows; more rows go in chunks of 8 over the
// same weight rows, which later chunks read from cache. The pairs of a tile, p = r * G + g
// for weight row r and activation row g, go in groups of 8: each pair's 8 lanes are summed
// (vphaddd) into one lane of the group's vector, which is scaled and added into the group's
// accumulator. The K-quants' chunks of 5-8 rows (Q6_K: 6-8) go to lane tiles instead
// (KLaneTile): a row of activations in each 32-bit lane, from a copy of the rows laid out by
// int8_lanes, so a block's sums need no reduction; and since a product's lanes then all belong
// to one sub-block, up to 8 (Q4_K), 4 (Q5_K) or 2 (Q6_K) vpmaddubsw add in 16 bits before one
// vpmaddwd by its scale, where the pair tiles take a vpmaddwd for each.
//
// Measured with prism-bench quant on an AMD EPYC (Zen 3, AVX2 only; a virtual machine of 2
// cores, plain read 21.3 GB/s; figures vary by 10-15 % between runs), 8192 x 2048 weights
// streamed from 1 GiB, two threads; quant_rows (f32 activations) -> these kernels:
//   one row, GB/s of weights:  Q8_0 16.6 -> 19.0, Q4_0 10.5 -> 14.4, Q4_K 8.3 -> 16.1,
//                              Q6_K 8.6 -> 17.8
//   16 rows, billions of multiply-adds a second:  Q8_0 26.5 -> 42.7, Q4_0 21.3 -> 38.9,
//                              Q4_K 20.2 -> 46.2, Q6_K 16.4 -> 51.5
// On another such EPYC (plain read 38-52 GB/s), 16 rows: Q4_K 106, Q6_K 96 billion a second
// with the pair tiles; 122 and 116 once each pair's running sum stayed in a register (asm in
// KGroup: the compiler had spilled a tree of the products); 172 and 128 on the lane tiles
// (8 rows: 167 and 126). vpmaddubsw and vpmaddwd issue two a cycle per core there (3.2 GHz):
// the pair tiles, one of each per 32 multiply-adds, cannot pass 205 billion a second on two
// cores; the lane tiles' Q4_K, 9 per 256, could reach 360 (Q6_K, 6 per 128: 270). Batches of the
// pair formats are bound by the instructions around the products (the lane sums' reduction and each
// block's scaling take about as many as the products), one row of the 4-bit formats by unpacking
// the nibbles: Q4_K reads at 77-88 % of a plain read, Q8_0 at 86-90 %. A prefill's many chunks of
// lane tiles unpacked each block once a chunk; the first now keeps them for the others
// (LaneCached): a 512-token prefill of the 1B shape's Q4_K_M file on two Zen 2 cores, three
// alternating runs, 98.5, 104.0, 98.6 -> 105.3, 109.1, 105.7 tok/s.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/int8_rows.h"
#include "prism/backends/cpu/weight_layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PRISM_HAVE_INT8_AVX2 1
#include <immintrin.h>
#endif

namespace prism::cpu {

namespace {

// int8_lanes' layout: the rows in chunks of kLaneRows (the last padded with zeros), each chunk
// its rows' values interleaved, 32 bytes a group of four consecutive values of each of its
// rows (k / 4 groups), then a KSide record a block.
constexpr int kLaneRows = 8;

// What KLaneTile reads of a chunk besides its values, a record per block (zeros for rows past
// the chunk): the sums of sub-blocks 2 i and 2 i + 1 of row g as the 16-bit words 2 g and 2 g + 1
// of 32 bytes at kSums16 + 32 i (sub-blocks of 16 values, i < 8) and kSums32 + 32 i (of 32,
// i < 4), and the rows' d as f32 at kScales.
struct KSide {
  static constexpr int64_t kSums16 = 0, kSums32 = 256, kScales = 384, kBytes = 448;
};

int64_t LaneValueBytes(int64_t k) { return k * kLaneRows; }
int64_t LaneChunkBytes(int64_t k) { return LaneValueBytes(k) + k / 256 * KSide::kBytes; }

// The chunk of rows [0, g) of x (records `stride` bytes apart, `blocks` blocks each) into
// values and side.
void Interleave(const uint8_t* x, int64_t stride, int g, int64_t blocks, uint8_t* values,
                uint8_t* side) {
  std::memset(values, 0, static_cast<size_t>(blocks * 256 * kLaneRows));
  std::memset(side, 0, static_cast<size_t>(blocks * KSide::kBytes));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* s = side + b * KSide::kBytes;
    for (int r = 0; r < g; ++r) {
      const uint8_t* rec = x + r * stride + b * KRecord::kBytes;
      for (int i = 0; i < 64; ++i)
        std::memcpy(values + (b * 64 + i) * 32 + 4 * r, rec + KRecord::kValues + 4 * i, 4);
      for (int j = 0; j < 16; ++j)
        std::memcpy(s + KSide::kSums16 + 32 * (j / 2) + 4 * r + 2 * (j % 2),
                    rec + KRecord::kSums + 2 * j, 2);
      for (int j = 0; j < 8; ++j)
        std::memcpy(s + KSide::kSums32 + 32 * (j / 2) + 4 * r + 2 * (j % 2),
                    rec + KRecord::kSums32 + 2 * j, 2);
      std::memcpy(s + KSide::kScales + 4 * r, rec + KRecord::kScale, 4);
    }
  }
}

}  // namespace

int64_t int8_lane_bytes(int64_t m, int64_t k) {
  return (m + kLaneRows - 1) / kLaneRows * LaneChunkBytes(k);
}

void int8_lanes(const Int8Rows& x, int64_t k, uint8_t* out) {
  const int64_t blocks = k / 256;
  for (int64_t c = 0; c * kLaneRows < x.m; ++c) {
    uint8_t* at = out + c * LaneChunkBytes(k);
    Interleave(x.x + c * kLaneRows * x.stride, x.stride,
               static_cast<int>(std::min<int64_t>(kLaneRows, x.m - c * kLaneRows)), blocks, at,
               at + LaneValueBytes(k));
  }
}

void interleaved_tiles(std::span<const InterleavedTileFn> tiles, const Int8Rows& x,
                       const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, int64_t blocks,
                       const CompactQ8& packed, float* out, int64_t ldo) {
  constexpr int64_t kBand = 64, kGroup = kQuantGroupRows;
  const int64_t chunk = static_cast<int64_t>(tiles.size());
  for (int64_t i0 = 0; i0 < x.m; i0 += kBand) {
    const int64_t i1 = std::min(x.m, i0 + kBand);
    for (int64_t g0 = r0 / kGroup * kGroup; g0 < r1; g0 += kGroup) {
      const int first = static_cast<int>(std::max(r0, g0) - g0);
      const int last = static_cast<int>(std::min(r1, g0 + kGroup) - g0);
      for (int64_t i = i0; i < i1; i += chunk) {
        const int64_t rows = std::min(chunk, i1 - i);
        tiles[rows - 1](x.x + i * x.stride, x.stride, packed, w + g0 * row_bytes, blocks,
                        out + i * ldo + (g0 + first - r0), ldo, first, last, i == i0);
      }
    }
  }
}

#if PRISM_HAVE_INT8_AVX2
namespace {

#define PRISM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PRISM_AVX2_INLINE PRISM_AVX2 inline __attribute__((always_inline))

constexpr int kRows = kDotRows;  // weight rows a tile takes
constexpr int kMaxG = 8;         // activation rows a tile takes
// How far ahead of the block in use the weights are prefetched (quant_rows.cpp measured it).
constexpr int64_t kPrefetchAhead = 1024;

PRISM_AVX2_INLINE __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
PRISM_AVX2_INLINE __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
template <typename T>
PRISM_AVX2_INLINE T Scalar(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
PRISM_AVX2_INLINE __m256i Bytes(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// The f16 values at p[r] + at of the four weight rows as f32 in lanes 0-3, and with kTwo those
// at p[r] + at2 in lanes 4-7.
template <bool kTwo>
PRISM_AVX2_INLINE __m256 Halves(const uint8_t* const* p, int64_t at, int64_t at2) {
  __m128i h = _mm_cvtsi32_si128(Scalar<uint16_t>(p[0] + at));
  h = _mm_insert_epi16(h, Scalar<uint16_t>(p[1] + at), 1);
  h = _mm_insert_epi16(h, Scalar<uint16_t>(p[2] + at), 2);
  h = _mm_insert_epi16(h, Scalar<uint16_t>(p[3] + at), 3);
  if constexpr (kTwo) {
    h = _mm_insert_epi16(h, Scalar<uint16_t>(p[0] + at2), 4);
    h = _mm_insert_epi16(h, Scalar<uint16_t>(p[1] + at2), 5);
    h = _mm_insert_epi16(h, Scalar<uint16_t>(p[2] + at2), 6);
    h = _mm_insert_epi16(h, Scalar<uint16_t>(p[3] + at2), 7);
  }
  return _mm256_cvtph_ps(h);
}

// The f32 at x + g * stride + at of activation rows g < G in lanes g (zeros after).
template <int G>
PRISM_AVX2_INLINE __m256 ActFloats(const uint8_t* x, int64_t stride, int64_t at) {
  float v[8] = {};
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) v[g] = Scalar<float>(x + g * stride + at);
  return _mm256_setr_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

// The permutations (vpermps) that spread the weight rows' lanes (0-3) and the activation rows'
// (0-7) over the pairs of group v: lane i holds pair p = 8 v + i, weight row p / G, activation
// row p % G (lanes past the tile's 4 G pairs: zeros).
struct PairLanes {
  alignas(32) int32_t w[kMaxG][4][8], x[kMaxG][4][8];
};
constexpr PairLanes MakePairLanes() {
  PairLanes t{};
  for (int g = 1; g <= kMaxG; ++g) {
    for (int v = 0; v < 4; ++v) {
      for (int i = 0; i < 8; ++i) {
        const int p = 8 * v + i;
        t.w[g - 1][v][i] = p < kRows * g ? p / g : 0;
        t.x[g - 1][v][i] = p < kRows * g ? p % g : 0;
      }
    }
  }
  return t;
}
alignas(32) constexpr PairLanes kPairLanes = MakePairLanes();

PRISM_AVX2_INLINE __m256i LoadLanes(const int32_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// Lane i < N of the result: the sum of s[i]'s eight lanes (N is 4 or 8; lanes 4-7 zero for 4).
template <int N>
PRISM_AVX2_INLINE __m256i LaneSums(const __m256i* s) {
  static_assert(N == 4 || N == 8);
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
  if constexpr (N == 4) {
    return _mm256_zextsi128_si256(
        _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
  } else {
    const __m256i b =
        _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
  }
}

// The same for vectors of four lanes.
template <int N>
PRISM_AVX2_INLINE __m256i LaneSums(const __m128i* s) {
  static_assert(N == 4 || N == 8);
  const __m128i a = _mm_hadd_epi32(_mm_hadd_epi32(s[0], s[1]), _mm_hadd_epi32(s[2], s[3]));
  if constexpr (N == 4) {
    return _mm256_zextsi128_si256(a);
  } else {
    const __m128i b = _mm_hadd_epi32(_mm_hadd_epi32(s[4], s[5]), _mm_hadd_epi32(s[6], s[7]));
    return _mm256_set_m128i(b, a);
  }
}

// The weight rows' values (lanes w_offset to w_offset + 3 of w) spread over the pairs of group
// V, and the activation rows' (lanes 0 to G - 1 of x).
template <int G, int V>
PRISM_AVX2_INLINE __m256 SpreadW(__m256 w, int w_offset) {
  return _mm256_permutevar8x32_ps(
      w, _mm256_add_epi32(LoadLanes(kPairLanes.w[G - 1][V]), _mm256_set1_epi32(w_offset)));
}
template <int G, int V>
PRISM_AVX2_INLINE __m256 SpreadX(__m256 x) {
  return _mm256_permutevar8x32_ps(x, LoadLanes(kPairLanes.x[G - 1][V]));
}

// acc = fma(float(sums), w * x, acc), w and x spread over the pairs of group V.
template <int G, int V>
PRISM_AVX2_INLINE __m256 Scale(__m256 acc, __m256i sums, __m256 w, int w_offset, __m256 x) {
  const __m256 d = _mm256_mul_ps(SpreadW<G, V>(w, w_offset), SpreadX<G, V>(x));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
}

// The pairs' results (lane i of acc[v]: pair 8 v + i) into out.
template <int G, int V>
PRISM_AVX2_INLINE void Store(const __m256 (&acc)[V], float* out, int64_t ldo, const int64_t* rows) {
  alignas(32) float lanes[8 * V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) _mm256_store_ps(lanes + 8 * v, acc[v]);
#pragma GCC unroll 32
  for (int p = 0; p < kRows * G; ++p) out[p % G * ldo + rows[p / G]] = lanes[p];
}

// --- Blocks of 32 values: Quants(p) gives a block's 32 values as bytes: unsigned (kOffset:
// less an offset the records take out; kMin: times d, plus m), or for kSigned as they are.

struct Q8_0 {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kSigned = true, kMin = false;
  static PRISM_AVX2_INLINE __m256i Quants(const uint8_t* p) { return Load(p + 2); }
};

// 16 bytes of nibbles as Q4_0's 32 values: the low nibbles, then the high ones.
PRISM_AVX2_INLINE __m256i Nibbles(const uint8_t* p) {
  const __m128i b = Load128(p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), Bytes(15));
}

template <bool kMinT>  // Q4_0, Q4_1: d, (m,) 16 nibble bytes
struct Q4 {
  static constexpr int64_t kBytes = kMinT ? 20 : 18;
  static constexpr bool kSigned = false, kMin = kMinT;
  static PRISM_AVX2_INLINE __m256i Quants(const uint8_t* p) { return Nibbles(p + (kMin ? 4 : 2)); }
};

template <bool kMinT>  // Q5_0, Q5_1: d, (m,) 32 bits (value j's fifth bit: bit j), 16 nibble bytes
struct Q5 {
  static constexpr int64_t kBytes = kMinT ? 24 : 22, kHigh = kMinT ? 4 : 2;
  static constexpr bool kSigned = false, kMin = kMinT;
  static PRISM_AVX2_INLINE __m256i Quants(const uint8_t* p) {
    // Byte j of the 32 bits' spread: byte j / 8 of them, tested against bit j % 8.
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    __m256i high = _mm256_shuffle_epi8(_mm256_set1_epi32(Scalar<int32_t>(p + kHigh)), spread);
    high = _mm256_cmpeq_epi8(_mm256_and_si256(high, bit), bit);
    return _mm256_or_si256(Nibbles(p + kHigh + 4), _mm256_and_si256(high, Bytes(16)));
  }
};

// Group V of a tile of blocks of 32: the pairs' block sums, scaled into acc.
template <typename F, int G, int V>
PRISM_AVX2_INLINE void PairGroup(const __m256i* u, const __m256i* q, const uint8_t* x,
                                 int64_t stride, int64_t at, __m256 dw, __m256 dx, __m256 sx,
                                 __m256& acc) {
  constexpr int N = std::min(8, kRows * G - 8 * V);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s[8];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    const int p = 8 * V + i, r = p / G;
    const uint8_t* rec = x + p % G * stride + at;
    __m256i xv = Load(rec + PairRecord::kValues);
    if constexpr (F::kSigned) xv = _mm256_sign_epi8(xv, q[r]);
    s[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xv), ones);
    if constexpr (!F::kSigned && !F::kMin)
      s[i] = _mm256_add_epi32(s[i], Load(rec + PairRecord::kExtra));
  }
  acc = Scale<G, V>(acc, LaneSums<N>(s), dw, 0, dx);
  if constexpr (F::kMin) acc = _mm256_fmadd_ps(SpreadW<G, V>(dw, 4), SpreadX<G, V>(sx), acc);
}

template <typename F, int G, int... V>
PRISM_AVX2_INLINE void PairGroups(std::integer_sequence<int, V...>, const __m256i* u,
                                  const __m256i* q, const uint8_t* x, int64_t stride, int64_t at,
                                  __m256 dw, __m256 dx, __m256 sx, __m256* acc) {
  (PairGroup<F, G, V>(u, q, x, stride, at, dw, dx, sx, acc[V]), ...);
}

// out[g * ldo + rows[r]] = x_g . W[r] for G activation rows (records `stride` bytes apart at
// x) and the four weight rows w[r], blocks of 32 values each; `prefetch` when the weights come
// from memory (the first chunk of activation rows), not from cache.
template <typename F, int G>
PRISM_AVX2 __attribute__((noinline)) void PairTile(const uint8_t* x, int64_t stride,
                                                   const uint8_t* const* w, int64_t blocks,
                                                   float* out, int64_t ldo, const int64_t* rows,
                                                   bool prefetch) {
  constexpr int V = (kRows * G + 7) / 8;
  __m256 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b / 2 * PairRecord::kBytes + 32 * (b % 2);  // the block in its record
    const uint8_t* ws[kRows];
    __m256i q[kRows], u[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      ws[r] = w[r] + b * F::kBytes;
      if (prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(ws[r] + kPrefetchAhead), _MM_HINT_T0);
      q[r] = F::Quants(ws[r]);
      u[r] = F::kSigned ? _mm256_abs_epi8(q[r]) : q[r];
    }
    const __m256 dw = Halves<F::kMin>(ws, 0, 2);  // d in lanes 0-3, (m in 4-7)
    const __m256 dx = ActFloats<G>(x, stride, at + PairRecord::kScales);
    __m256 sx = _mm256_setzero_ps();  // d * the block's sum
    if constexpr (F::kMin) sx = ActFloats<G>(x, stride, at + PairRecord::kExtra);
    PairGroups<F, G>(std::make_integer_sequence<int, V>{}, u, q, x, stride, at, dw, dx, sx, acc);
  }
  Store<G, V>(acc, out, ldo, rows);
}

// --- K-quants, blocks of 256 values. Prepare(p) reads what a block's steps share; Step(row,
// j, ...) gives its values 64 j to 64 j + 31 in a and 64 j + 32 to 64 j + 63 in b as unsigned
// bytes, and the scales of each 16 of them in the 16-bit words of sa and sb.

// Byte indices (vpshufb) that repeat one 16-bit word of a 128-bit lane over it: kWord[j] word j
// in both lanes (Q4_K, Q5_K: one scale for 32 values); kWords[s] word 2 s in the low lane and
// 2 s + 1 in the high one (Q6_K: a scale for each 16 values).
struct WordIndices {
  alignas(32) uint8_t one[8][32], two[4][32];
};
constexpr WordIndices MakeWordIndices() {
  WordIndices t{};
  for (int j = 0; j < 8; ++j) {
    for (int i = 0; i < 32; ++i) t.one[j][i] = static_cast<uint8_t>(2 * j + i % 2);
  }
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 32; ++i) t.two[s][i] = static_cast<uint8_t>(2 * (2 * s + i / 16) + i % 2);
  }
  return t;
}
alignas(32) constexpr WordIndices kWordIndices = MakeWordIndices();

PRISM_AVX2_INLINE __m256i Word(__m256i words, const uint8_t* indices) {
  return _mm256_shuffle_epi8(words, _mm256_load_si256(reinterpret_cast<const __m256i*>(indices)));
}

// Q4_K and Q5_K: d, dmin (f16), 12 bytes of 6-bit scales and minimums, (Q5_K: 32 bytes of
// fifth bits: value i of sub-block j has bit j of byte i,) 128 bytes of nibbles (sub-block 2 j
// in the low nibbles of bytes 32 j to 32 j + 31, 2 j + 1 in their high ones).
template <bool kFive>
struct QK {
  static constexpr int64_t kBytes = kFive ? 176 : 144, kScaleAt = 0, kMinAt = 2;
  static constexpr bool kMin = true;
  struct Row {
    const uint8_t* p;
    __m256i scales, high;  // scales: the 8 scales as words, in both lanes
    __m128i mins;          // the 8 minimums as words
  };
  static PRISM_AVX2_INLINE Row Prepare(const uint8_t* p) {
    // ggml's get_scale_min_k4, four at a time: scales 0-3 are the low 6 bits of bytes 0-3,
    // minimums 0-3 of bytes 4-7; scales 4-7 the low nibbles of bytes 8-11 under the top two
    // bits of bytes 0-3, minimums 4-7 the high nibbles under those of bytes 4-7.
    const uint32_t u0 = Scalar<uint32_t>(p + 4), u1 = Scalar<uint32_t>(p + 8),
                   u2 = Scalar<uint32_t>(p + 12);
    const uint32_t s_lo = u0 & 0x3f3f3f3f, m_lo = u1 & 0x3f3f3f3f;
    const uint32_t s_hi = (u2 & 0x0f0f0f0f) | ((u0 >> 6) & 0x03030303) << 4;
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0f) | ((u1 >> 6) & 0x03030303) << 4;
    Row row;
    row.p = p;
    row.scales = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(uint64_t{s_hi} << 32 | s_lo))));
    row.mins =
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(uint64_t{m_hi} << 32 | m_lo)));
    row.high = kFive ? Load(p + 16) : _mm256_setzero_si256();
    return row;
  }
  static PRISM_AVX2_INLINE void Step(const Row& row, int j, __m256i& a, __m256i& b, __m256i& sa,
                                     __m256i& sb) {
    const __m256i bytes = Load(row.p + (kFive ? 48 : 16) + 32 * j);
    a = _mm256_and_si256(bytes, Bytes(15));
    b = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), Bytes(15));
    if constexpr (kFive) {
      const __m256i bit_a = Bytes(1 << (2 * j)), bit_b = Bytes(2 << (2 * j));
      const __m256i sixteen = Bytes(16);
      a = _mm256_or_si256(
          a,
          _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(row.high, bit_a), bit_a), sixteen));
      b = _mm256_or_si256(
          b,
          _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(row.high, bit_b), bit_b), sixteen));
    }
    sa = Word(row.scales, kWordIndices.one[2 * j]);
    sb = Word(row.scales, kWordIndices.one[2 * j + 1]);
  }
};

// Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16 signed scales (one per 16 values),
// d (f16). Half h (values 128 h on) has nibbles at 64 h and bit pairs at 128 + 32 h: value 32 s
// + l of the half (s < 4, l < 32) is nibble byte l + 32 (s % 2) (low nibble for s < 2, high
// for s >= 2) under bits 2 s, 2 s + 1 of bit-pair byte l, less 32.
struct Q6_K {
  static constexpr int64_t kBytes = 210, kScaleAt = 208, kMinAt = 208;
  static constexpr bool kMin = false;
  struct Row {
    const uint8_t* p;
    __m256i scales[2], offset;  // scales[h]: scales 8 h to 8 h + 7 as words, in both lanes
    __m128i mins;               // unused
  };
  static PRISM_AVX2_INLINE Row Prepare(const uint8_t* p) {
    const __m256i scales = _mm256_cvtepi8_epi16(Load128(p + 192));
    Row row;
    row.p = p;
    row.scales[0] = _mm256_permute2x128_si256(scales, scales, 0x00);
    row.scales[1] = _mm256_permute2x128_si256(scales, scales, 0x11);
    row.offset = _mm256_mullo_epi16(scales, _mm256_set1_epi16(-32));
    row.mins = _mm_setzero_si128();
    return row;
  }
  static PRISM_AVX2_INLINE void Step(const Row& row, int j, __m256i& a, __m256i& b, __m256i& sa,
                                     __m256i& sb) {
    const int h = j / 2, odd = j % 2;  // values 64 odd to 64 odd + 63 of half h: s = 2 odd, + 1
    const __m256i low0 = Load(row.p + 64 * h), low1 = Load(row.p + 64 * h + 32);
    const __m256i pairs = Load(row.p + 128 + 32 * h), mask = Bytes(0x30), nibble = Bytes(15);
    if (odd == 0) {
      a = _mm256_or_si256(_mm256_and_si256(low0, nibble),
                          _mm256_and_si256(_mm256_slli_epi16(pairs, 4), mask));
      b = _mm256_or_si256(_mm256_and_si256(low1, nibble),
                          _mm256_and_si256(_mm256_slli_epi16(pairs, 2), mask));
    } else {
      a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), nibble),
                          _mm256_and_si256(pairs, mask));
      b = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), nibble),
                          _mm256_and_si256(_mm256_srli_epi16(pairs, 2), mask));
    }
    sa = Word(row.scales[h], kWordIndices.two[2 * odd]);
    sb = Word(row.scales[h], kWordIndices.two[2 * odd + 1]);
  }
};

// F::Prepare(p), the K-quant block at p, and with `prefetch` (the weights come from memory)
// a prefetch of the block kPrefetchAhead bytes on.
template <typename F>
PRISM_AVX2_INLINE typename F::Row Fetch(const uint8_t* p, bool prefetch) {
  if (prefetch) {
    for (int64_t j = 0; j < F::kBytes; j += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + j), _MM_HINT_T0);
  }
  return F::Prepare(p);
}

// Group V of a tile of K-quant blocks: each pair's T (and M), scaled into acc.
template <typename F, int G, int V>
PRISM_AVX2_INLINE void KGroup(const typename F::Row* row, const uint8_t* x, int64_t stride,
                              int64_t at, __m256 dw, __m256 dx, __m256& acc) {
  constexpr int N = std::min(8, kRows * G - 8 * V);
  __m256i t[8];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) t[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m256i a, b, sa, sb;
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const int p = 8 * V + i;
      if (i == 0 || p % G == 0) F::Step(row[p / G], j, a, b, sa, sb);
      const uint8_t* rec = x + p % G * stride + at + 64 * j;
      const __m256i pa = _mm256_madd_epi16(_mm256_maddubs_epi16(a, Load(rec)), sa);
      const __m256i pb = _mm256_madd_epi16(_mm256_maddubs_epi16(b, Load(rec + 32)), sb);
      t[i] = _mm256_add_epi32(t[i], _mm256_add_epi32(pa, pb));
      // One running sum a pair: left to itself, the compiler reassociates the 32 products of a
      // group into a tree whose leaves do not fit in the registers, and spills them.
      asm("" : "+x"(t[i]));
    }
  }
  if constexpr (!F::kMin) {  // Q6_K's offset
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const int p = 8 * V + i;
      const __m256i sums = Load(x + p % G * stride + at + KRecord::kSums);
      t[i] = _mm256_add_epi32(t[i], _mm256_madd_epi16(row[p / G].offset, sums));
    }
  }
  acc = Scale<G, V>(acc, LaneSums<N>(t), dw, 0, dx);
  if constexpr (F::kMin) {
    __m128i m[8];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const int p = 8 * V + i;
      m[i] = _mm_madd_epi16(row[p / G].mins, Load128(x + p % G * stride + at + KRecord::kSums32));
    }
    acc = Scale<G, V>(acc, LaneSums<N>(m), dw, 4, dx);
  }
}

template <typename F, int G, int... V>
PRISM_AVX2_INLINE void KGroups(std::integer_sequence<int, V...>, const typename F::Row* row,
                               const uint8_t* x, int64_t stride, int64_t at, __m256 dw, __m256 dx,
                               __m256* acc) {
  (KGroup<F, G, V>(row, x, stride, at, dw, dx, acc[V]), ...);
}

// PairTile's contract for K-quant blocks.
template <typename F, int G>
PRISM_AVX2 __attribute__((noinline)) void KTile(const uint8_t* x, int64_t stride,
                                                const uint8_t* const* w, int64_t blocks, float* out,
                                                int64_t ldo, const int64_t* rows, bool prefetch) {
  constexpr int V = (kRows * G + 7) / 8;
  __m256 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  // -dmin: the minimums are subtracted.
  const __m256 negate_mins = _mm256_setr_ps(0, 0, 0, 0, -0.0f, -0.0f, -0.0f, -0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * KRecord::kBytes;
    const uint8_t* ws[kRows];
    typename F::Row row[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      ws[r] = w[r] + b * F::kBytes;
      row[r] = Fetch<F>(ws[r], prefetch);
    }
    // d in lanes 0-3, -dmin in 4-7
    const __m256 dw = _mm256_xor_ps(Halves<F::kMin>(ws, F::kScaleAt, F::kMinAt), negate_mins);
    const __m256 dx = ActFloats<G>(x, stride, at + KRecord::kScale);
    KGroups<F, G>(std::make_integer_sequence<int, V>{}, row, x, stride, at, dw, dx, acc);
  }
  Store<G, V>(acc, out, ldo, rows);
}

// --- K-quant tiles with a row of activations in each 32-bit lane (KLaneTile), for chunks of
// 5-8 rows (Q6_K: 6-8; with fewer, KTile is faster) laid out by int8_lanes: 32 bytes hold four
// consecutive values of each of the chunk's eight rows, so that vpmaddubsw against four weight
// values broadcast to every lane leaves each row's products in its own lane. A block's sums then
// need no horizontal adds, and since every lane of a product belongs to one sub-block, the 16-bit
// products of up to kRun groups of four values add in 16 bits before the one vpmaddwd by the
// sub-block's scale (their sums stay within 16 bits: at most kRun * 2 * max weight * 127).

// Lane g: the sum over i < N of row g's sums at side + 32 i (two 16-bit words) times dwords
// i % 4 of words[i / 4] (the weight row's two words for the same sub-blocks, in both 128-bit
// lanes of words[i / 4]).
template <int N>
PRISM_AVX2_INLINE __m256i AcrossRows(const __m256i* words, const uint8_t* side) {
  __m256i sum = _mm256_setzero_si256();
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((sum =
          _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi32(words[I / 4], I % 4 * 0x55),
                                                  Load(side + 32 * I)))),
     ...);
  }
  (std::make_integer_sequence<int, N>{});
  return sum;
}

// How KLaneTile takes each format: sub-blocks of kScaleValues values (one scale each), the
// 16-bit products of kRun groups of four added before their vpmaddwd.
template <typename F>
struct LaneFormat;
template <bool kFive>
struct LaneFormat<QK<kFive>> {
  static constexpr int kScaleValues = 32, kRun = kFive ? 4 : 8, kFewest = 5;
};
template <>
struct LaneFormat<Q6_K> {
  static constexpr int kScaleValues = 16, kRun = 2, kFewest = 6;
};

// A weight row's block as KLaneTile reads it: its 256 values as unsigned bytes, and the scale
// of each sub-block as a 16-bit word.
struct LaneBlock {
  alignas(32) uint8_t values[256];
  alignas(32) int16_t scales[16];
};

template <typename F>
PRISM_AVX2_INLINE void Unpack(const typename F::Row& row, LaneBlock& out) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m256i a, b, sa, sb;
    F::Step(row, j, a, b, sa, sb);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out.values + 64 * j), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out.values + 64 * j + 32), b);
  }
  if constexpr (F::kMin) {
    _mm_store_si128(reinterpret_cast<__m128i*>(out.scales), _mm256_castsi256_si128(row.scales));
  } else {
    _mm_store_si128(reinterpret_cast<__m128i*>(out.scales), _mm256_castsi256_si128(row.scales[0]));
    _mm_store_si128(reinterpret_cast<__m128i*>(out.scales + 8),
                    _mm256_castsi256_si128(row.scales[1]));
  }
}

// A weight row's block unpacked for KLaneTile, kept for the next chunks of activation rows.
template <typename F>
struct LaneCached {
  LaneBlock block;
  typename F::Row row;
};

// KTile's contract for the first g rows of a chunk of int8_lanes' layout: values at xi, KSide
// records at side. The `first` chunk of a band reads the weights from memory (prefetching);
// with `cache` (blocks * kRows entries) it keeps each block's unpacked rows there, and the
// others read them back rather than unpack them again.
template <typename F>
PRISM_AVX2 __attribute__((noinline)) void KLaneTile(const uint8_t* xi, const uint8_t* side,
                                                    const uint8_t* const* w, int64_t blocks,
                                                    float* out, int64_t ldo, const int64_t* rows,
                                                    int g, bool first, LaneCached<F>* cache) {
  using L = LaneFormat<F>;
  constexpr int kScales = 256 / L::kScaleValues, kGroups = L::kScaleValues / 4;
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  LaneCached<F> own[kRows];
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* s = side + b * KSide::kBytes;
    const uint8_t* x = xi + b * 256 * kLaneRows;
    const uint8_t* p[kRows];
    LaneCached<F>* c = cache ? cache + b * kRows : own;
    const LaneBlock* lb[kRows];
    const typename F::Row* row[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      p[r] = w[r] + b * F::kBytes;
      if (!cache || first) {
        c[r].row = Fetch<F>(p[r], first);
        Unpack<F>(c[r].row, c[r].block);
      }
      lb[r] = &c[r].block;
      row[r] = &c[r].row;
    }
    __m256i t[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) t[r] = _mm256_setzero_si256();
    for (int j = 0; j < kScales; ++j) {
      __m256i s16[kRows];
#pragma GCC unroll 8
      for (int i = 0; i < kGroups; ++i) {
        __m256i xv = Load(x + (j * kGroups + i) * 32);
        asm("" : "+x"(xv));  // loaded once for the four weight rows
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          const __m256i wv =
              _mm256_set1_epi32(Scalar<int32_t>(lb[r]->values + (j * kGroups + i) * 4));
          const __m256i product = _mm256_maddubs_epi16(wv, xv);
          s16[r] = i % L::kRun == 0 ? product : _mm256_add_epi16(s16[r], product);
          asm("" : "+x"(s16[r]));  // a running sum, not a tree of the products
          if (i % L::kRun == L::kRun - 1) {
            t[r] = _mm256_add_epi32(t[r],
                                    _mm256_madd_epi16(s16[r], _mm256_set1_epi16(lb[r]->scales[j])));
          }
        }
      }
    }
    const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(s + KSide::kScales));
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      __m256i sums = t[r];
      if constexpr (!F::kMin) {  // Q6_K's offset: 32 * the scales times the sums of 16
        sums = _mm256_sub_epi32(
            sums, _mm256_slli_epi32(AcrossRows<8>(row[r]->scales, s + KSide::kSums16), 5));
      }
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(Scalar<uint16_t>(p[r] + F::kScaleAt)));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d, dx), acc[r]);
      if constexpr (F::kMin) {
        const __m256i mins = _mm256_broadcastsi128_si256(row[r]->mins);
        const __m256i m = AcrossRows<4>(&mins, s + KSide::kSums32);
        const __m256 dmin = _mm256_set1_ps(-_cvtsh_ss(Scalar<uint16_t>(p[r] + F::kMinAt)));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, dx), acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[r]);
    for (int i = 0; i < g; ++i) out[i * ldo + rows[r]] = lanes[i];
  }
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, int64_t, float*, int64_t,
                        const int64_t*, bool);

template <typename F, bool kK, int... G>
constexpr std::array<TileFn, sizeof...(G)> Tiles(std::integer_sequence<int, G...>) {
  if constexpr (kK) {
    return {&KTile<F, G + 1>...};
  } else {
    return {&PairTile<F, G + 1>...};
  }
}

// All the weight rows, four at a time from four quarters of [0, n) (for_row_groups), each
// group against the activation rows in chunks of up to kMaxG.
template <typename F, bool kK>
void Rows(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, float* out,
          int64_t ldo) {
  static_assert(kMaxG == kLaneRows);
  static constexpr std::array<TileFn, kMaxG> kTiles =
      Tiles<F, kK>(std::make_integer_sequence<int, kMaxG>{});
  const int64_t blocks = k / (kK ? 256 : 32);
  // The chunks KLaneTile takes (all but a short last one) from int8_lanes' layout.
  int64_t lane_chunks = 0;
  if constexpr (kK) {
    if (x.lanes) lane_chunks = x.m / kMaxG + (x.m % kMaxG >= LaneFormat<F>::kFewest ? 1 : 0);
  }
  // Groups of weight rows from for_row_groups, a band of them at a time against each chunk of
  // activation rows in turn. With many chunks (a prefill's) a chunk is then read from L3 once
  // per band rather than once per group, while the band's weights (up to 128 KiB) stay in L2:
  // a 512-token prefill of Llama 1B's shapes in Q4_K_M ran 10 % faster with bands of 8 groups
  // than of 1 (AMD EPYC Zen 3; 4: 7 %, 12 and 16 as 8). With few chunks, one group at a time
  // reads its weights from L1 for each.
  struct Group {
    int64_t rows[kRows];
    const uint8_t* ptrs[kRows];
  };
  constexpr int kMostGroups = 8;
  const int band_size =
      x.m > 2 * kMaxG
          ? static_cast<int>(std::clamp<int64_t>((128 << 10) / (kRows * row_bytes), 1, kMostGroups))
          : 1;
  Group band[kMostGroups];
  int filled = 0;
  // With several chunks of lane tiles (a prefill's), the band's blocks unpacked once, by the
  // first chunk, for all of them (a tenth of a lane tile's instructions unpack its blocks).
  using Cached = LaneCached<std::conditional_t<kK, F, Q6_K>>;
  thread_local std::vector<Cached> cache;
  const bool caching = kK && lane_chunks > 1;
  if (caching) cache.resize(static_cast<size_t>(band_size * kRows * blocks));
  auto run_band = [&] {
    for (int64_t i = 0; i < x.m; i += kMaxG) {
      const int64_t g = std::min<int64_t>(kMaxG, x.m - i);
      for (int b = 0; b < filled; ++b) {
        const Group& group = band[b];
        if constexpr (kK) {
          if (i / kMaxG < lane_chunks) {
            const uint8_t* at = x.lanes + i / kMaxG * LaneChunkBytes(k);
            KLaneTile<F>(at, at + LaneValueBytes(k), group.ptrs, blocks, out + i * ldo, ldo,
                         group.rows, static_cast<int>(g), i == 0,
                         caching ? cache.data() + b * kRows * blocks : nullptr);
            continue;
          }
        }
        kTiles[g - 1](x.x + i * x.stride, x.stride, group.ptrs, blocks, out + i * ldo, ldo,
                      group.rows, i == 0);
      }
    }
    filled = 0;
  };
  for_row_groups(0, n, [&](const int64_t* rows) {
    Group& group = band[filled++];
    for (int r = 0; r < kRows; ++r) {
      group.rows[r] = rows[r];
      group.ptrs[r] = w + rows[r] * row_bytes;
    }
    if (filled == band_size) run_band();
  });
  if (filled > 0) run_band();
}

// --- Q4_0 weights kept with the blocks of 16 rows interleaved (weight_layout.h): the VNNI
// kernels' layout and arithmetic (quant_rows.cpp's InterleavedTile) on 256-bit vectors. Each
// 64-byte run of a block (bytes 4c..4c+3 of each of the 16 rows) is two vectors of 8 rows, a row
// in each 32-bit lane, the group's rows 0-7 and 8-15; a tile takes both against up to
// kQ4_0TileRows activation rows. vpmaddubsw of a run's nibbles (the values 4c..4c+3, or 16 +
// 4c.. from the high nibbles) against the activations' four values broadcast to every lane
// leaves each row's pair sums in its own lane: a block's eight of them add in 16 bits (at most
// 8 * 2 * 15 * 127, no overflow), one vpmaddwd by ones makes each lane its row's exact integer
// sum, and nothing is summed across lanes. Then, as InterleavedTile: the record's total (-8 *
// the activations' sum) added, fma(float(sum), d_w * d_x) into the row's f32 accumulator, block
// after block: the stored kernels' bits. A block goes run by run (Q4_0Block): each run is loaded
// and split into nibbles once, each broadcast of the activations serves both halves, and only
// the 16-bit running sums stay in registers across the block, so up to four activation rows
// take the whole group in one pass; more go in chunks of four, the later ones reading the group
// from cache. A group's first chunk asks for its lines kPrefetchAhead bytes ahead (one row, one
// core streamed: 64 -> 73 % of a plain read; 2 and 4 KiB did less).
// Q8_0 stays as stored here: interleaved, it takes vpsignb and a vpmaddwd for every run (its
// 16-bit sums cannot add up), and so ran at 0.55-0.62x the stored kernels' speed for one row,
// 0.8x for four and 1.1x for 16 (same bench, same run).
//
// One row walks a thread's whole groups as kDecodeStreams streams side by side (Q4_0Streams),
// each prefetched kStreamAhead bytes ahead. How much more than one stream a core reads at once
// varies on the same host from hour to hour (a Zen 2 virtual machine, weights in 2 MiB pages:
// a plain read of one stream a core at 21-32 GB/s when four read 34-42, and an earlier day
// one stream as fast as four, when this was tried and not kept). Measured in one process,
// alternating, a decoding step's Q4_0 products (16 layers of the 1B shape, the threads meeting
// after each product): one stream 27.4-27.9 GB/s, 2 streams +5 %, 3 +27 %, 4 +29 %, 8 -10 %;
// 4 KiB ahead +14 %, 512 bytes +17 %. prism llm on the Q4_0 file, 128 tokens, eight
// alternating runs: 29.8 -> 32.9 tok/s (median; faster in 7 of 8).
// Prefetching the next group while a batch's later chunks run from cache gave nothing.
// For batches, GCC's code for Q4_0Block from intrinsics kept a 4-row tile's running sums on the
// stack (asm barriers, a loop over the runs and keeping the accumulators in memory did not
// stop it); a 16-row batch ran at about 62 billion multiply-adds a second a core from memory or
// cache alike. Each run's products and adds are now a few lines of assembly (Q4_0Run) with the
// sums in registers: prism-bench quant, two threads, from memory, median of 3 alternating
// runs: 4 rows 111 -> 125, 8 rows 115 -> 125, 16 rows 116 -> 131 billion a second (Zen 2);
// still about 70 % of one vpmaddubsw a cycle, which the block's 64 vpaddw share a pipe with.
// The same for one row was 3-4 % slower from memory (eight alternating runs), so one row keeps
// its own order. Adding a block's 16-bit pairs with shifts instead of vpmaddwd (off that pipe)
// was slower (4 rows 113 -> 103). Not unrolling the runs' loop took 2 and 3 rows 5-12 % faster
// and 4 rows 3 % slower (intrinsics); a half at a time for 4 rows was slower; not kept.
//
// prism-bench quant on an AMD EPYC (Zen 2, AVX2 only; 2 cores, plain read 47 GB/s), 8192 x
// 2048 weights streamed from 1 GiB, billions of multiply-adds a second, Q4_0 as stored (the
// pair tiles) -> interleaved: one row 35.2 -> 54.0 (42 -> 65 % of the read), 2 rows 48.5 ->
// 87.1, 4 rows 53.9 -> 103.5, 16 rows 58.4 -> 113.3. One row from cache runs at 118 % of the
// read, so a decoding step's 65 % is its stalls on memory, not its arithmetic.
// Both halves in one pass for 2-4 rows (before, 3-4 rows took a half at a time, and 1-2 rows
// held a half's 8 vectors of nibbles): the same kernels on 75 MB of weights in 2 MiB pages, two
// threads, weight bytes a second, alternating old and new: 2 rows +6-20 %, 3 rows +20 %,
// 4 rows +16 %, 8 rows +10 %, 16 rows +5-8 %; one row unchanged.

constexpr int kQ4_0TileRows = 4;  // activation rows a tile takes

// One run of a block against one activation row (its four values 4c.. at `values`, and 16 +
// 4c.. after them): s0 and s1 (the group's rows 0-7 and 8-15) add the products with the run's
// low nibbles lo and high nibbles hi; kFirst starts them (rather than adding to zeros: two
// vpaddw fewer a row and block, 1-2 % faster on 4-16 rows, nine alternating runs). In assembly
// so that each product is added into its running sum at once: from intrinsics GCC kept a 4-row
// tile's sums on the stack (asm barriers did not stop it), every add a load and a store.
template <bool kFirst>
PRISM_AVX2_INLINE void Q4_0Run(const __m256i (&lo)[2], const __m256i (&hi)[2],
                               const uint8_t* values, __m256i& s0, __m256i& s1) {
  __m256i t, u;
  const int32_t& xl = *reinterpret_cast<const int32_t*>(values);
  const int32_t& xh = *reinterpret_cast<const int32_t*>(values + 16);
  if constexpr (kFirst) {
    asm("vpbroadcastd %[xl], %[t]\n\t"
        "vpmaddubsw %[t], %[lo0], %[s0]\n\t"
        "vpmaddubsw %[t], %[lo1], %[s1]\n\t"
        "vpbroadcastd %[xh], %[t]\n\t"
        "vpmaddubsw %[t], %[hi0], %[u]\n\t"
        "vpaddw %[u], %[s0], %[s0]\n\t"
        "vpmaddubsw %[t], %[hi1], %[u]\n\t"
        "vpaddw %[u], %[s1], %[s1]"
        : [s0] "=&x"(s0), [s1] "=&x"(s1), [t] "=&x"(t), [u] "=&x"(u)
        : [lo0] "x"(lo[0]), [lo1] "x"(lo[1]), [hi0] "x"(hi[0]), [hi1] "x"(hi[1]), [xl] "m"(xl),
          [xh] "m"(xh));
  } else {
    asm("vpbroadcastd %[xl], %[t]\n\t"
        "vpmaddubsw %[t], %[lo0], %[u]\n\t"
        "vpaddw %[u], %[s0], %[s0]\n\t"
        "vpmaddubsw %[t], %[lo1], %[u]\n\t"
        "vpaddw %[u], %[s1], %[s1]\n\t"
        "vpbroadcastd %[xh], %[t]\n\t"
        "vpmaddubsw %[t], %[hi0], %[u]\n\t"
        "vpaddw %[u], %[s0], %[s0]\n\t"
        "vpmaddubsw %[t], %[hi1], %[u]\n\t"
        "vpaddw %[u], %[s1], %[s1]"
        : [s0] "+x"(s0), [s1] "+x"(s1), [t] "=&x"(t), [u] "=&x"(u)
        : [lo0] "x"(lo[0]), [lo1] "x"(lo[1]), [hi0] "x"(hi[0]), [hi1] "x"(hi[1]), [xl] "m"(xl),
          [xh] "m"(xh));
  }
}

// Block b of a group of 16 interleaved Q4_0 rows (its runs at `runs`, its 16 d at `scales`)
// against G activation rows, into acc[0][g] (the group's rows 0-7) and acc[1][g] (rows 8-15),
// run by run: each run's two vectors are loaded and split into nibbles once, and each
// activation's broadcast serves both halves, so that only the running sums stay in registers
// across the block.
template <int G>
PRISM_AVX2_INLINE void Q4_0Block(const uint8_t* x, int64_t stride, const CompactQ8& packed,
                                 int64_t b, const uint8_t* runs, const uint8_t* scales,
                                 __m256 (*acc)[G]) {
  const __m256i low = Bytes(15), ones = _mm256_set1_epi16(1);
  __m256i sums[2][G];
  if constexpr (G == 1) {
    // One row (a decoding step): a half at a time, its 8 vectors of nibbles first. The same
    // sums; a decoding step read its weights 2-4 % faster in this order.
    const uint8_t* values = x + packed.values + 32 * b;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i q[8];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i v = Load(runs + 64 * c + 32 * h);
        q[c] = _mm256_and_si256(v, low);
        q[4 + c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
      sums[h][0] = _mm256_maddubs_epi16(q[0], _mm256_set1_epi32(Scalar<int32_t>(values)));
#pragma GCC unroll 8
      for (int j = 1; j < 8; ++j) {
        sums[h][0] = _mm256_add_epi16(
            sums[h][0],
            _mm256_maddubs_epi16(q[j], _mm256_set1_epi32(Scalar<int32_t>(values + 4 * j))));
      }
    }
  } else {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i lo[2], hi[2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = Load(runs + 64 * c + 32 * h);
        lo[h] = _mm256_and_si256(v, low);
        hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const uint8_t* values = x + g * stride + packed.values + 32 * b + 4 * c;
        if (c == 0) {
          Q4_0Run<true>(lo, hi, values, sums[0][g], sums[1][g]);
        } else {
          Q4_0Run<false>(lo, hi, values, sums[0][g], sums[1][g]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 dw = _mm256_cvtph_ps(Load128(scales + 16 * h));
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* row = x + g * stride;
      const __m256i total =
          _mm256_add_epi32(_mm256_madd_epi16(sums[h][g], ones),
                           _mm256_set1_epi32(Scalar<int32_t>(row + packed.totals + 4 * b)));
      const __m256 d =
          _mm256_mul_ps(dw, _mm256_set1_ps(Scalar<float>(row + packed.scales + 4 * b)));
      acc[h][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), d, acc[h][g]);
    }
  }
}

// S groups of 16 interleaved Q4_0 rows, those at w + s * step (`blocks` blocks a row), against
// G activation rows (their packed Q8_0 copies at x, `stride` bytes apart), into acc[s] (as
// Q4_0Block's acc), side by side a pair of blocks at a time; each group's lines asked for
// `ahead` bytes ahead where `ahead` is not 0 (the weights come from memory).
template <int G, int S>
PRISM_AVX2_INLINE void Q4_0Groups(const uint8_t* x, int64_t stride, const CompactQ8& packed,
                                  const uint8_t* w, int64_t step, int64_t blocks, int64_t ahead,
                                  __m256 (&acc)[S][2][G]) {
#pragma GCC unroll 8
  for (int i = 0; i < S * 2 * G; ++i) acc[i / (2 * G)][i / G % 2][i % G] = _mm256_setzero_ps();
  constexpr int64_t kRun = 64, kPair = 64 + 2 * 4 * kRun;  // two blocks' d, then their runs
  for (int64_t b = 0; b + 1 < blocks; b += 2) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint8_t* p = w + s * step + b / 2 * kPair;
      if (ahead) {
        for (int64_t line = 0; line < kPair; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p + ahead + line), _MM_HINT_T0);
      }
      Q4_0Block<G>(x, stride, packed, b, p + 64, p, acc[s]);
      Q4_0Block<G>(x, stride, packed, b + 1, p + 64 + 4 * kRun, p + 32, acc[s]);
    }
  }
  if (blocks % 2) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint8_t* p = w + s * step + blocks / 2 * kPair;
      Q4_0Block<G>(x, stride, packed, blocks - 1, p + 32, p, acc[s]);
    }
  }
}

// A group of 16 interleaved Q4_0 rows at w (`blocks` blocks a row) against G activation rows
// (their packed Q8_0 copies at x, `stride` bytes apart): out[g * ldo + r - first] = x[g] . W[r]
// for the group's rows r in [first, last); with `stream`, the weights come from memory and are
// prefetched kPrefetchAhead bytes ahead.
template <int G>
PRISM_AVX2 __attribute__((noinline)) void Q4_0Tile(const uint8_t* x, int64_t stride,
                                                   const CompactQ8& packed, const uint8_t* w,
                                                   int64_t blocks, float* out, int64_t ldo,
                                                   int first, int last, bool stream) {
  __m256 acc[1][2][G];
  Q4_0Groups<G, 1>(x, stride, packed, w, 0, blocks, stream ? kPrefetchAhead : 0, acc);
  // Lane l of acc[0][h] is the group's row 8 h + l.
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int at = 8 * h, from = std::max(first, at), to = std::min(last, at + 8);
    if (from >= to) continue;
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[0][h][g]);
      std::memcpy(out + g * ldo + from - first, lanes + from - at,
                  sizeof(float) * static_cast<size_t>(to - from));
    }
  }
}

// One activation row against kDecodeStreams groups of 16 interleaved Q4_0 rows, those at w +
// s * step, read side by side, kStreamAhead bytes prefetched ahead: out[s * ostep + r] = x .
// (group s's row r) for r < 16. The same bits as Q4_0Tile<1> on each group.
constexpr int kDecodeStreams = 4;
constexpr int64_t kStreamAhead = 2048;
PRISM_AVX2 __attribute__((noinline)) void Q4_0Streams(const uint8_t* x, const CompactQ8& packed,
                                                      const uint8_t* w, int64_t step,
                                                      int64_t blocks, float* out, int64_t ostep) {
  __m256 acc[kDecodeStreams][2][1];
  Q4_0Groups<1, kDecodeStreams>(x, 0, packed, w, step, blocks, kStreamAhead, acc);
#pragma GCC unroll 4
  for (int s = 0; s < kDecodeStreams; ++s) {
    _mm256_storeu_ps(out + s * ostep, acc[s][0][0]);
    _mm256_storeu_ps(out + s * ostep + 8, acc[s][1][0]);
  }
}

// QuantRowsInterleavedFn for Q4_0: interleaved_tiles with chunks of up to kQ4_0TileRows
// activation rows. One row (a decoding step) reads the whole groups of its range as
// kDecodeStreams streams, one from each quarter (Q4_0Streams).
void InterleavedQ4_0Rows(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t r0,
                         int64_t r1, int64_t k, float* out, int64_t ldo) {
  static constexpr InterleavedTileFn kTiles[kQ4_0TileRows] = {&Q4_0Tile<1>, &Q4_0Tile<2>,
                                                              &Q4_0Tile<3>, &Q4_0Tile<4>};
  constexpr int64_t kGroup = kQuantGroupRows;
  const int64_t blocks = k / 32;
  const CompactQ8 packed(k);
  // Rows [from, to), their results at out + from - r0.
  auto tiles = [&](int64_t from, int64_t to) {
    interleaved_tiles(kTiles, x, w, row_bytes, from, to, blocks, packed, out + (from - r0), ldo);
  };
  const int64_t whole0 = (r0 + kGroup - 1) / kGroup * kGroup, whole1 = r1 / kGroup * kGroup;
  const int64_t per = (whole1 - whole0) / kGroup / kDecodeStreams;  // groups a stream
  if (x.m > 1 || per == 0) return tiles(r0, r1);
  if (r0 < whole0) tiles(r0, whole0);
  const int64_t step = per * kGroup;  // rows from one stream to the next
  for (int64_t g = 0; g < per; ++g) {
    Q4_0Streams(x.x, packed, w + (whole0 + g * kGroup) * row_bytes, step * row_bytes, blocks,
                out + (whole0 - r0) + g * kGroup, step);
  }
  tiles(whole0 + kDecodeStreams * step, r1);
}

#undef PRISM_AVX2_INLINE
#undef PRISM_AVX2

}  // namespace
#endif

QuantRowsInt8Fn int8_rows_avx2(quant::GgmlType type) {
#if PRISM_HAVE_INT8_AVX2
  using quant::GgmlType;
  switch (type) {
    case GgmlType::Q8_0:
      return Rows<Q8_0, false>;
    case GgmlType::Q4_0:
      return Rows<Q4<false>, false>;
    case GgmlType::Q4_1:
      return Rows<Q4<true>, false>;
    case GgmlType::Q5_0:
      return Rows<Q5<false>, false>;
    case GgmlType::Q5_1:
      return Rows<Q5<true>, false>;
    case GgmlType::Q4_K:
      return Rows<QK<false>, true>;
    case GgmlType::Q5_K:
      return Rows<QK<true>, true>;
    case GgmlType::Q6_K:
      return Rows<Q6_K, true>;
    default:
      return nullptr;
  }
#else
  (void)type;
  return nullptr;
#endif
}

QuantRowsInterleavedFn int8_interleaved_avx2(quant::GgmlType type) {
#if PRISM_HAVE_INT8_AVX2
  if (type == quant::GgmlType::Q4_0) return InterleavedQ4_0Rows;
#endif
  (void)type;
  return nullptr;
}

}  // namespace prism::cpu
