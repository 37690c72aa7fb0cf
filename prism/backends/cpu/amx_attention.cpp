#include "prism/backends/cpu/amx_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/fast_math.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define PRISM_HAVE_AMX_ATTENTION 1
#include <immintrin.h>
#endif

namespace prism::cpu {

bool amx_attention_available() { return amx_gemm_available(); }

void amx_pack_values(const uint16_t* v, int64_t n, int64_t E, int64_t keys, uint16_t* vp) {
  for (int64_t p = 0; p < keys / 2; ++p) {
    uint16_t* out = vp + p * E * 2;
    const int64_t j = 2 * p;
    const uint16_t* a = j < n ? v + j * E : nullptr;
    const uint16_t* b = j + 1 < n ? v + (j + 1) * E : nullptr;
    for (int64_t e = 0; e < E; ++e) {
      out[2 * e] = a ? a[e] : 0;
      out[2 * e + 1] = b ? b[e] : 0;
    }
  }
}

#if PRISM_HAVE_AMX_ATTENTION

#define PRISM_TARGET_AMX_ATTENTION __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16")))

namespace {

PRISM_TARGET_AMX_ATTENTION void configure() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) config.set(t, 16, 64);
  _tile_loadconfig(&config);
}

}  // namespace

// Pairs of d as 32-bit words: a transpose of n x D / 2 words into D / 2 x ld, 16 keys at a
// time by gathers (the scalar transpose took 3 % of a 1536-token prefill).
PRISM_TARGET_AMX_ATTENTION void amx_pack_keys(const uint16_t* k, int64_t n, int64_t D, int64_t ld,
                                              uint16_t* kt) {
  auto* out = reinterpret_cast<uint32_t*>(kt);
  const int64_t words = D / 2;
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(words)));
  for (int64_t j = 0; j < ld; j += 16) {
    const int64_t here = std::clamp<int64_t>(n - j, 0, 16);
    const __mmask16 keys = static_cast<__mmask16>((uint32_t{1} << here) - 1);
    const auto* base = reinterpret_cast<const int*>(k + j * D);
    for (int64_t p = 0; p < words; ++p) {
      const __m512i v = here > 0 ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), keys, rows,
                                                               base + p, sizeof(uint32_t))
                                 : _mm512_setzero_si512();
      _mm512_storeu_si512(out + p * ld + j, v);
    }
  }
}

// Tiles: 0-3 the scores of 16 rows by 4 x 16 keys, 4 the rows' 32 values of d, 6 and 7 the
// keys' (in turn).
PRISM_TARGET_AMX_ATTENTION void amx_scores(const uint16_t* q, int64_t rows, int64_t D,
                                           const uint16_t* kt, int64_t ld, int64_t cols, float* s) {
  configure();
  const int64_t q_stride = D * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t k_stride = ld * 2 * static_cast<int64_t>(sizeof(uint16_t));  // a pair of d
  const int64_t s_stride = cols * static_cast<int64_t>(sizeof(float));
  for (int64_t r = 0; r < rows; r += 16) {
    for (int64_t j = 0; j < cols; j += 64) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t d = 0; d < D; d += 32) {
        const uint16_t* keys = kt + (d / 2 * ld + j) * 2;  // pairs d / 2.., keys j..
        _tile_loadd(4, q + r * D + d, q_stride);
        _tile_loadd(6, keys, k_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, keys + 32, k_stride);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(6, keys + 64, k_stride);
        _tile_dpbf16ps(2, 4, 6);
        _tile_loadd(7, keys + 96, k_stride);
        _tile_dpbf16ps(3, 4, 7);
      }
      float* out = s + r * cols + j;
      _tile_stored(0, out, s_stride);
      _tile_stored(1, out + 16, s_stride);
      _tile_stored(2, out + 32, s_stride);
      _tile_stored(3, out + 48, s_stride);
    }
  }
  _tile_release();
}

// exp(x) for x in [-87, 0] (a score less its row's maximum, as the softmax below takes it)
// by the steps of fast_math-inl.h's ExpF32, so with its bits there, without the handling of
// arguments outside that range: the result is a normal float, 2^k by one vscalefps.
PRISM_TARGET_AMX_ATTENTION inline __m512 exp_nonpositive(__m512 x) {
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 k =
      _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  const __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860682030941723212e-6f),
                                    _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x));
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (float coefficient : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(coefficient));
  return _mm512_maskz_scalef_ps(0xffff, p, k);  // (maskz: see amx_softmax_weights)
}

// The largest of the lanes and their sum, pairwise (GCC 12 warns of the undefined sources in
// its own reductions' intrinsics).
inline float largest_lane(const float* lanes) {
  float m = lanes[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, lanes[i]);
  return m;
}
inline float lanes_sum(float* lanes) {
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

// The lanes of keys j..j + 15 that lie in [from, to).
inline __mmask16 keys_seen(int64_t j, int64_t from, int64_t to) {
  const int64_t lo = std::clamp<int64_t>(from - j, 0, 16), hi = std::clamp<int64_t>(to - j, 0, 16);
  const uint32_t below_hi = (uint32_t{1} << hi) - 1, below_lo = (uint32_t{1} << lo) - 1;
  return static_cast<__mmask16>(below_hi & ~below_lo);
}

PRISM_TARGET_AMX_ATTENTION void amx_softmax_weights(const float* s, int64_t ld, int64_t rows,
                                                    const int64_t* first, const int64_t* last,
                                                    float scale, int64_t keys, float* max,
                                                    float* sum, float* alpha, uint16_t* p) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  const __m512 scaled = _mm512_set1_ps(scale), floor = _mm512_set1_ps(-87.0f);
  uint16_t* p_lo = p + rows * keys;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * ld;
    uint16_t* hi_row = p + r * keys;
    uint16_t* lo_row = p_lo + r * keys;
    const int64_t from = first[r], to = std::min(last[r], keys);
    __m512 mx = _mm512_set1_ps(kMinusInf);
    for (int64_t j = from / 16 * 16; j < to; j += 16) {
      const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row + j), scaled);
      mx = _mm512_mask_max_ps(mx, keys_seen(j, from, to), mx, x);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, mx);
    const float before = max[r], m = std::max(before, largest_lane(lanes));
    if (m == kMinusInf) {  // nothing seen yet: no weights, nothing to rescale
      std::memset(hi_row, 0, keys * sizeof(uint16_t));
      std::memset(lo_row, 0, keys * sizeof(uint16_t));
      alpha[r] = 1.0f;
      continue;
    }
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < keys; j += 16) {
      const __mmask16 seen = keys_seen(j, from, to);
      __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
      if (seen != 0) {
        const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(row + j), scaled), mv);
        const __mmask16 kept = seen & _mm512_cmp_ps_mask(x, floor, _CMP_GE_OQ);
        const __m512 w =
            _mm512_maskz_mov_ps(kept, exp_nonpositive(_mm512_maskz_max_ps(0xffff, x, floor)));
        acc = _mm512_add_ps(acc, w);
        hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(w));
        // (The maskz forms here and above: GCC 12 warns of the unmasked ones' undefined source.)
        const __m512 widened = _mm512_castsi512_ps(
            _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, hi), 16));
        lo = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(w, widened)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi_row + j), hi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo_row + j), lo);
    }
    // 0 on the first chunk a row sees.
    const float a = before == kMinusInf ? 0.0f : exp_f32(before - m);
    max[r] = m;
    alpha[r] = a;
    _mm512_store_ps(lanes, acc);
    sum[r] = sum[r] * a + lanes_sum(lanes);
  }
}

// Tiles: 0-3 the sums of 16 rows by 4 x 16 values, 4 and 5 the rows' 32 weights (hi, lo), 6
// and 7 the values of those 32 keys (in turn).
PRISM_TARGET_AMX_ATTENTION void amx_weighted_sums(const uint16_t* p, int64_t rows,
                                                  const uint16_t* vp, int64_t E, int64_t keys,
                                                  float* o) {
  const uint16_t* p_lo = p + rows * keys;
  configure();
  const int64_t p_stride = keys * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t v_stride = E * 2 * static_cast<int64_t>(sizeof(uint16_t));  // a pair of keys
  const int64_t o_stride = E * static_cast<int64_t>(sizeof(float));
  for (int64_t r = 0; r < rows; r += 16) {
    for (int64_t e = 0; e < E; e += 64) {
      // Up to 4 tiles of 16 values: E a multiple of 16.
      const int64_t tiles = E - e >= 64 ? 4 : (E - e) / 16;
      float* out = o + r * E + e;
      _tile_loadd(0, out, o_stride);
      if (tiles > 1) _tile_loadd(1, out + 16, o_stride);
      if (tiles > 2) _tile_loadd(2, out + 32, o_stride);
      if (tiles > 3) _tile_loadd(3, out + 48, o_stride);
      for (int64_t j = 0; j < keys; j += 32) {
        const uint16_t* values = vp + (j / 2 * E + e) * 2;  // pairs j / 2.., values e..
        _tile_loadd(4, p + r * keys + j, p_stride);
        _tile_loadd(5, p_lo + r * keys + j, p_stride);
        _tile_loadd(6, values, v_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(0, 5, 6);
        if (tiles > 1) {
          _tile_loadd(7, values + 32, v_stride);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(1, 5, 7);
        }
        if (tiles > 2) {
          _tile_loadd(6, values + 64, v_stride);
          _tile_dpbf16ps(2, 4, 6);
          _tile_dpbf16ps(2, 5, 6);
        }
        if (tiles > 3) {
          _tile_loadd(7, values + 96, v_stride);
          _tile_dpbf16ps(3, 4, 7);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, out, o_stride);
      if (tiles > 1) _tile_stored(1, out + 16, o_stride);
      if (tiles > 2) _tile_stored(2, out + 32, o_stride);
      if (tiles > 3) _tile_stored(3, out + 48, o_stride);
    }
  }
  _tile_release();
}

// Tiles: 0 the scores of 16 keys by the 4 rows, 1 the keys' 32 values of d, 2 the rows'.
PRISM_TARGET_AMX_ATTENTION int64_t amx_decode_scores(const uint16_t* const* q, int rows, int64_t D,
                                                     const uint16_t* k, int64_t n, float scale,
                                                     float* s, int64_t ldk,
                                                     std::span<const DecodeAhead> ahead) {
  const int64_t steps = D / 32;
  if (rows > 4 || D % 32 != 0 || steps > kAmxDecodeMaxSteps) return 0;
  // Per step of 32 values of d, the second operand: 16 pairs of d by 4 rows (zeros past
  // `rows`).
  alignas(64) uint16_t qb[kAmxDecodeMaxSteps * 16 * 4 * 2];
  for (int64_t t = 0; t < steps; ++t)
    for (int p = 0; p < 16; ++p)
      for (int r = 0; r < 4; ++r)
        for (int u = 0; u < 2; ++u)
          qb[((t * 16 + p) * 4 + r) * 2 + u] = r < rows ? q[r][32 * t + 2 * p + u] : uint16_t{0};
  AmxTileConfig config;
  config.set(0, 16, 16);
  config.set(1, 16, 64);
  config.set(2, 16, 16);
  _tile_loadconfig(&config);
  const int64_t k_stride = D * static_cast<int64_t>(sizeof(uint16_t));
  // Lanes of four 4-key vectors of the 16 x 4 scores (lane 4i + r: key i, row r) gathered for
  // rows 0-1 and 2-3, keys 0-3 of the first and 0-3 of the second vector.
  const __m512i rows01 = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i rows23 =
      _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
  const __m512i low = _mm512_set_epi32(23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i high =
      _mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
  const __m512 sc = _mm512_set1_ps(scale);
  alignas(64) float c[16 * 4];
  const int64_t full = n / 16 * 16;
  for (int64_t j = 0; j < full; j += 16) {
    const uint16_t* kj = k + j * D;
    prefetch_ahead(ahead, j);
    _tile_zero(0);
    for (int64_t t = 0; t < steps; ++t) {
      _tile_loadd(1, kj + 32 * t, k_stride);
      _tile_loadd(2, qb + t * 128, 16);
      _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, c, 16);
    const __m512 z0 = _mm512_load_ps(c), z1 = _mm512_load_ps(c + 16);
    const __m512 z2 = _mm512_load_ps(c + 32), z3 = _mm512_load_ps(c + 48);
    const __m512 p01 = _mm512_permutex2var_ps(z0, rows01, z1);  // rows 0, 1 of keys 0-7
    const __m512 p23 = _mm512_permutex2var_ps(z2, rows01, z3);  // rows 0, 1 of keys 8-15
    const __m512 q01 = _mm512_permutex2var_ps(z0, rows23, z1);
    const __m512 q23 = _mm512_permutex2var_ps(z2, rows23, z3);
    // Row r: the first 8 lanes of one vector and of the other (or the last 8 of each).
    const __m512 row0 = _mm512_permutex2var_ps(p01, low, p23);
    const __m512 row1 = _mm512_permutex2var_ps(p01, high, p23);
    const __m512 row2 = _mm512_permutex2var_ps(q01, low, q23);
    const __m512 row3 = _mm512_permutex2var_ps(q01, high, q23);
    _mm512_storeu_ps(s + j, _mm512_mul_ps(row0, sc));
    if (rows > 1) _mm512_storeu_ps(s + ldk + j, _mm512_mul_ps(row1, sc));
    if (rows > 2) _mm512_storeu_ps(s + 2 * ldk + j, _mm512_mul_ps(row2, sc));
    if (rows > 3) _mm512_storeu_ps(s + 3 * ldk + j, _mm512_mul_ps(row3, sc));
  }
  _tile_release();
  return full;
}

#else  // no AMX here: amx_attention_available() is false and these are never called

void amx_pack_keys(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {}
void amx_scores(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*) {}
void amx_softmax_weights(const float*, int64_t, int64_t, const int64_t*, const int64_t*, float,
                         int64_t, float*, float*, float*, uint16_t*) {}
void amx_weighted_sums(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*) {}
int64_t amx_decode_scores(const uint16_t* const*, int, int64_t, const uint16_t*, int64_t, float,
                          float*, int64_t, std::span<const DecodeAhead>) {
  return 0;
}

#endif

}  // namespace prism::cpu
