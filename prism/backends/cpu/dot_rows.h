// Dot products of a float row with a weight row, the inner loop of decoding. With AVX-512
// the bf16 weights widen with one shift per 16 values; elsewhere plain loops over 16
// independent lanes, which compilers vectorize without reassociating.
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "prism/core/dtype.h"

namespace prism::cpu {

inline float dot_row_bf16(const float* x, const uint16_t* w, int64_t k) {
  int64_t i = 0;
  float sum = 0;
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (; i + 32 <= k; i += 32) {
    __m512i w0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
    __m512i w1 =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16)));
    a0 =
        _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16),
                         _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a1);
  }
  sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#else
  float lanes[16] = {};
  for (; i + 16 <= k; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j] * bf16_to_f32(w[i + j]);
  for (float v : lanes) sum += v;
#endif
  for (; i < k; ++i) sum += x[i] * bf16_to_f32(w[i]);
  return sum;
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

}  // namespace prism::cpu
