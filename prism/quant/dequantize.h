// ggml's block formats to f32: plain scalar code, correct first (no SIMD yet).
//
// The results are bit for bit those of the `gguf` Python package's dequantization (and so of
// ggml's reference code where it rounds the same way): each product and difference is rounded
// to f32 in the order the reference computes it, e.g. Q4_K's (d * scale) * q - (dmin * min)
// as two rounded products and a rounded difference. That is why this layer is compiled with
// floating-point contraction off: a fused multiply-add would skip a rounding and differ in the
// last bit. tests/unit/gguf_test.cpp compares every type against the package's output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "prism/quant/ggml_type.h"

namespace prism::quant {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K.
bool can_dequantize(GgmlType type);

// Dequantizes whole blocks: `src` holds n blocks of `type` (n * block_bytes bytes, in file
// order, little-endian), `dst` receives their n * block_elements values. A range of a tensor's
// blocks is a subspan of each. Throws prism::Error for a type without a dequantizer or sizes
// that disagree.
void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst);

}  // namespace prism::quant
