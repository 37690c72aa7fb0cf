// Products of f32 activation rows with weights kept in ggml's quantized block formats (as a
// GGUF file stores them): the decode step of a quantized model, run on the blocks as they are.
// Each block is loaded once, turned into f32 in vector registers (its quants widened, scaled
// by the block's scales, offset by its minimums) and multiplied there into the activation
// rows, so that a weight byte is read from memory once per product whatever the number of
// rows, and its f32 values never go to memory.
//
// The activations stay in f32 (llama.cpp quantizes them to int8 blocks and multiplies
// integers): the result is the f32 product of the activations with the dequantized weights,
// as accurate as the float reference, and decoding is bound by reading the weights, not by
// the arithmetic, so int8 activations would not make one row faster here.
//
// The kernels (quant_rows.cpp) take four weight rows at a time from four quarters of the range
// (four streams, as in dot_rows.h), prefetched 1 KiB ahead, against up to 4 activation rows in
// register accumulators (2 with AVX2); more activation rows go in chunks of 4 over the same
// weight rows, which the later chunks read from cache. With AVX-512, 4-bit quants (Q4_0,
// Q4_1, Q4_K) are dequantized by a lookup in a 16-value table per block or sub-block.
// The K-quants' minimums could be taken out of the loop (d * sc * sum(q x) - dmin * m *
// sum(x), with the sums of x computed once per call). With the tables that saves nothing (a
// table folds scale and minimum in once per 16 values); without them it would save one
// multiply-add per two vectors for one row and cost more for several, so every weight is
// dequantized whole.
//
// Measured on one core of an Intel Xeon with AVX-512 (a virtual machine; figures vary by
// 10-20 % between runs), 8192 x 2048 weights, 1 GiB of them streamed from memory:
//   one row:    Q4_K 10 GB/s of weights (0.94 ms a matrix), Q8_0 13, Q6_K 8.4, Q5_K 7.8,
//               Q4_0 8; a plain read of the same bytes: 12.5 GB/s as one stream, 15 as four;
//   16 rows:    Q4_K 57 GFLOP/s, Q8_0 65, Q6_K 47 (bound by the f32 multiply-adds: f32
//               weights from cache reach about 85 GFLOP/s on this core).
// Q4_K and Q6_K with one row are bound by the core, not by memory (from L3 they run hardly
// faster, while a plain read does 25 GB/s there): unpacking the quants costs about as much as
// the multiply-adds, on the same two ports.
//
// dequantize_rows writes rows of weights as f32 or bf16, for prefill, where the products take
// panels of dequantized rows into a float matrix product: the same in-register dequantization,
// with dequantize's roundings, stored as it comes; bf16 rounded by vcvtneps2bf16 where the CPU
// has AVX-512 BF16, else by integer operations. Measured on the same core, 8192 x 2048 weights
// to bf16, in panels of 512 rows (2 MiB, as prefill writes them) and against dequantize then
// f32_to_bf16 a value at a time: Q4_K 0.11 ns a weight (0.36 scalar), Q6_K 0.15 (1.5), Q8_0
// 0.13 (0.3); the whole matrix at once is bound by writing it to memory (0.3 ns a weight).
#pragma once

#include <cstddef>
#include <cstdint>

#include "prism/core/dtype.h"
#include "prism/quant/ggml_type.h"

namespace prism::cpu {

// Whether quant_rows has a kernel of its own for this type under the SIMD target in use (the
// others: quant_rows falls back to dequantizing each row into f32 with
// prism::quant::dequantize and a plain f32 dot).
bool quant_rows_native(quant::GgmlType type);

// out[i * ldo + r] = sum_j x[i * ldx + j] * W[r][j]  for i < m, r < n,
// where W[r] is row r of the weights: `w + r * row_bytes` holds k / block_elements blocks of
// `type` (ggml's layout, as in a GGUF file), k a multiple of the type's block_elements.
// m is 1..16 (decode and batched decode; more rows work too); x in f32. Single-threaded: the
// caller splits n over threads. Any type prism::quant::can_dequantize accepts works (F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K); throws prism::Error otherwise.
void quant_rows(quant::GgmlType type, const float* x, int64_t ldx, int64_t m, const std::byte* w,
                int64_t row_bytes, int64_t n, int64_t k, float* out, int64_t ldo);

// Rows [0, n) of the blocks at w (row_bytes apart, k values each, ggml's layout) dequantized
// into out: row r at out + r * ldo elements, in f32 (DType::f32) or rounded to bf16
// (DType::bf16, round to nearest even, as prism::f32_to_bf16). Single-threaded: the caller
// splits n over threads. Every type quant::can_dequantize accepts; throws prism::Error
// otherwise (and for any other out_dtype). The values are prism::quant::dequantize's, bit for
// bit.
void dequantize_rows(quant::GgmlType type, const std::byte* w, int64_t row_bytes, int64_t n,
                     int64_t k, DType out_dtype, std::byte* out, int64_t ldo);

}  // namespace prism::cpu
