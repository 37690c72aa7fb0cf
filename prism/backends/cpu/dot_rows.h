// Dot products of an activation row with weight rows, the inner loop of decoding, which is
// bound by how fast the weights stream in from memory. A core keeps more loads in flight
// over several streams than over one, so the kernels take four rows at a time, and their
// caller picks them far apart (dot_rows_* below): four streams instead of one running
// through consecutive rows. With AVX-512 BF16, bf16 activations and weights multiply as
// they are (exact products, f32 sums); with AVX-512 alone, bf16 weights widen with one
// shift; elsewhere plain loops over 16 independent lanes, which compilers vectorize
// without reassociating.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "prism/core/dtype.h"

namespace prism::cpu {

inline constexpr int kDotRows = 4;
// How far ahead (in values) each weight stream is prefetched: the hardware prefetchers stop
// at every 4 KiB page boundary, which a stream through weights mapped from a file crosses
// every 2048 bf16 values.
inline constexpr int64_t kPrefetch = 1024;

// out[r] = x . w[r] for the four rows w[0..3], k values each; x in f32.
inline void dot4_f32x_bf16w(const float* x, const uint16_t* const w[kDotRows], int64_t k,
                            float out[kDotRows]) {
  int64_t i = 0;
  for (int r = 0; r < kDotRows; ++r) out[r] = 0;
#if defined(__AVX512F__)
  __m512 acc[kDotRows] = {};
  for (; i + 16 <= k; i += 16) {
    __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < kDotRows; ++r) {
      __m512i wv =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + i)));
      acc[r] = _mm512_fmadd_ps(xv, _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16)), acc[r]);
    }
  }
  for (int r = 0; r < kDotRows; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
#else
  for (int r = 0; r < kDotRows; ++r) {
    float lanes[16] = {};
    int64_t j = 0;
    for (; j + 16 <= k; j += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += x[j + l] * bf16_to_f32(w[r][j + l]);
    for (float v : lanes) out[r] += v;
  }
  i = k / 16 * 16;
#endif
  for (; i < k; ++i)
    for (int r = 0; r < kDotRows; ++r) out[r] += x[i] * bf16_to_f32(w[r][i]);
}

// out[r] = x . w[r] with x in bf16 too (as it is when the computation is in bf16).
inline void dot4_bf16(const uint16_t* x, const float* x_f32, const uint16_t* const w[kDotRows],
                      int64_t k, float out[kDotRows]) {
#if defined(__AVX512BF16__)
  int64_t i = 0;
  __m512 acc[kDotRows] = {};
  for (; i + 32 <= k; i += 32) {
    __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + i));
    for (int r = 0; r < kDotRows; ++r) _mm_prefetch(w[r] + i + kPrefetch, _MM_HINT_T0);
    for (int r = 0; r < kDotRows; ++r) {
      acc[r] =
          _mm512_dpbf16_ps(acc[r], xv, reinterpret_cast<__m512bh>(_mm512_loadu_si512(w[r] + i)));
    }
  }
  for (int r = 0; r < kDotRows; ++r) {
    out[r] = _mm512_reduce_add_ps(acc[r]);
    for (int64_t j = i; j < k; ++j) out[r] += x_f32[j] * bf16_to_f32(w[r][j]);
  }
#else
  (void)x;
  dot4_f32x_bf16w(x_f32, w, k, out);
#endif
}

inline float dot_row_f32(const float* x, const float* w, int64_t k) {
  int64_t i = 0;
  float sum = 0;
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (; i + 32 <= k; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(w + i + 16), a1);
  }
  sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#else
  float lanes[16] = {};
  for (; i + 16 <= k; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j] * w[i + j];
  for (float v : lanes) sum += v;
#endif
  for (; i < k; ++i) sum += x[i] * w[i];
  return sum;
}

// Calls visit(rows[kDotRows]) for groups of row indices covering [n0, n1): group j holds
// rows n0 + j, n0 + j + q, n0 + j + 2q, n0 + j + 3q (q = a quarter of the range, rounded
// down), so the four streams run through four separate quarters; the rows left over go in
// groups that repeat their last row.
template <typename Visit>
void for_row_groups(int64_t n0, int64_t n1, Visit visit) {
  int64_t q = (n1 - n0) / kDotRows;
  int64_t rows[kDotRows];
  for (int64_t j = 0; j < q; ++j) {
    for (int r = 0; r < kDotRows; ++r) rows[r] = n0 + j + r * q;
    visit(rows);
  }
  for (int64_t n = n0 + kDotRows * q; n < n1; n += kDotRows) {
    for (int r = 0; r < kDotRows; ++r) rows[r] = std::min(n + r, n1 - 1);
    visit(rows);
  }
}

}  // namespace prism::cpu
