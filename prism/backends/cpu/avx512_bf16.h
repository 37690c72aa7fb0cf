// What the kernels that use AVX-512 BF16 share (dot_rows.cpp, kernels_attention.cpp): the
// instructions Highway 1.0.3 cannot express (vdpbf16ps) are compiled with a function target
// attribute and called only where simd::current().avx512_bf16 says the CPU runs them.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstdint>

// The target attribute of every function that uses AVX-512 BF16.
#define PRISM_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace prism::cpu {

// 32 bf16 values as they are.
PRISM_TARGET_AVX512_BF16 inline __m512bh load_bf16x32(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// 16 bf16 values widened to f32: the bits go to the top half.
PRISM_TARGET_AVX512_BF16 inline __m512 widen_bf16x16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace prism::cpu
#endif
