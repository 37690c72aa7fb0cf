// exp for floats without libm's scalar call: exp(x) = 2^k * e^r with k = round(x / ln 2) and
// |r| <= ln(2) / 2, e^r by its Taylor polynomial of degree 7, 2^k built from exponent bits in two
// halves so that results down to the smallest subnormals come out right. Accurate to a few ulp;
// inf, 0 and NaN as std::exp. fast_math-inl.h has the same algorithm as vector code, for the loops
// compiled per SIMD target; exp_f32_simd runs it over an array.
#pragma once

#include <cstdint>
#include <cstring>

namespace prism::cpu {

inline float exp_f32(float x) {
  const float hi = 88.72283935546875f, lo = -103.972084045410f;
  float c = x > hi ? hi : (x < lo ? lo : x);
  // Round to nearest through the 1.5 * 2^23 trick (exact for |v| < 2^22).
  float k = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - k * 0.693145751953125f - k * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t ki = static_cast<int32_t>(k);
  int32_t half = ki >> 1;
  int32_t b1 = (half + 127) << 23, b2 = (ki - half + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > hi ? __builtin_inff() : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}

// y[i] = exp(x[i]) with the vector code of the SIMD target in use (simd.h, fast_math.cpp).
void exp_f32_simd(const float* x, float* y, int64_t n);
// The same for x[i] in [-87, 0] only, as the softmaxes take it (fast_math-inl.h's
// ExpNonPositiveF32): the same bits there.
void exp_nonpositive_f32_simd(const float* x, float* y, int64_t n);

}  // namespace prism::cpu
