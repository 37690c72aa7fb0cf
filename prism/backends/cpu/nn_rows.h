// The row loops of the composites softmax, log_softmax, rms_norm, layer_norm and rope
// (kernels_nn.cpp), and the loads and stores of kernels that compute in f32, compiled once per
// SIMD target (nn_rows.cpp); nn_row_kernels() hands out those of the target in use (simd.h). A row
// is n contiguous values of one floating-point dtype (f64, f32, bf16 or f16); halves compute in
// f32, norms sum in double. y may be x.
#pragma once

#include <cstddef>
#include <cstdint>

#include "prism/core/dtype.h"

namespace prism::cpu {

struct NnRowKernels {
  // y = softmax(x), or log_softmax(x) when `log`, over one row of n values.
  void (*softmax)(DType t, const std::byte* x, std::byte* y, int64_t n, bool log);
  // y = (x - mean) / sqrt(mean((x - mean)^2) + eps) over one row of n values: layer_norm
  // when `center`, else rms_norm (mean taken as 0).
  void (*norm)(DType t, const std::byte* x, std::byte* y, int64_t n, bool center, double eps);
  // Rotary embedding of `rows` rows of d values, row r rotated by cos and sin rows of d / 2
  // values at r * (d / 2): pairs (i, i + d/2), or (2i, 2i + 1) when `interleaved`.
  void (*rope)(DType t, bool interleaved, const std::byte* x, const std::byte* cos,
               const std::byte* sin, std::byte* y, int64_t rows, int64_t d);
  // y = x as f32, n values of dtype t (f64, f32, bf16 or f16): exact but for f64.
  void (*to_f32)(DType t, const std::byte* x, float* y, int64_t n);
  // y = x rounded to dtype t (to nearest even: bf16 as f32_to_bf16, NaN stays NaN), n values.
  void (*from_f32)(DType t, const float* x, std::byte* y, int64_t n);
};

// The kernels of the SIMD target in use.
NnRowKernels nn_row_kernels();

}  // namespace prism::cpu
