// Products of f32 activation rows with weights kept in ggml's quantized block formats (as a
// GGUF file stores them): the decode step of a quantized model, run on the blocks as they are.
// Each block is loaded once, turned into f32 in vector registers (its quants widened, scaled
// by the block's scales, offset by its minimums) and multiplied there into the activation
// rows, so that a weight byte is read from memory once per product whatever the number of
// rows, and its f32 values never go to memory.
//
// The activations stay in f32: the result is the f32 product of the activations with the
// dequantized weights, as accurate as the float reference. Its cost is the arithmetic, not
// the reading of the weights, for the 4-bit and 6-bit formats (figures below).
// quant_rows_int8 (further down) is llama.cpp's arithmetic instead: the activations rounded
// to 8-bit blocks once per product, and products in integers, which reads the weights at
// the speed of memory.
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
#include <vector>

#include "prism/backends/cpu/amx_rows.h"
#include "prism/core/dtype.h"
#include "prism/quant/ggml_type.h"

namespace prism::cpu {

class ThreadPool;

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

// --- llama.cpp's arithmetic: activations rounded to 8 bits, integer products -------------
//
// quantize_activations rounds the activation rows once per product into the 8-bit blocks that
// ggml multiplies the weights' type with (its vec_dot_type), exactly as ggml's reference
// rounding does (quantize_row_q8_0_ref, quantize_row_q8_1_ref, quantize_row_q8_K_ref):
//   - Q8_0 for Q4_0, Q5_0 and Q8_0 weights, Q8_1 for Q4_1 and Q5_1: blocks of 32 values,
//     d = max|x| / 127 in f32, q = x * (1 / d) rounded half away from zero (roundf), d kept
//     as f16 (the product takes the f16 value: a value is f16(d) * q).
//   - Q8_K for Q4_K, Q5_K and Q6_K: blocks of 256, the value of largest magnitude (the first,
//     on ties) `max`, q = min(127, x * (-127 / max) rounded half to even), d = 1 / (-127 /
//     max) in f32, and the sums of each 16 q.
//   - F32, F16 and BF16 weights multiply activations of their own type: rounded to nearest
//     even into f16 or bf16 (kept as f32 values), or left as they are.
// quant_rows_int8 then multiplies blocks of weights by blocks of activations in integers and
// scales each block's sum in f32, as llama.cpp does: the result is the product of the
// dequantized weights with the *rounded* activations (up to f32 rounding of the block sums),
// which differs from quant_rows' by the activations' rounding (about max|x| / 254 a value).
// Two things differ from ggml's own kernels: Q8_1's s = f16(d * sum q) is not used (the
// product takes d * sum q unrounded, so that it is the exact product with the rounded
// activations), and the order of the f32 sums.
//
// The integer kernels (quant_rows.cpp) use AVX-512 VNNI (vpdpbusd, vpdpwssd), which Highway
// 1.0.3 cannot express: they are compiled with a function target attribute under Highway's
// AVX-512 targets (AVX3_DL, whose CPUs all have VNNI: Ice Lake and later, Zen 4 and later;
// AVX3, for Cascade Lake) and run where the CPU has VNNI (a run-time check, as simd.h does for
// AVX-512 BF16). Like quant_rows' kernels they take four weight rows from four quarters of
// the range, prefetched 1 KiB ahead, against up to 4 activation rows in f32 accumulators (more
// rows go in chunks of 4 over the same weight rows, read again from cache). Weights are
// unpacked into unsigned bytes (nibbles with AND and a shift, Q5's and Q6_K's high bits merged
// under a mask) and multiplied with the signed activations by vpdpbusd, four products a
// 32-bit lane:
//   - blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): two blocks a 512-bit vector; the
//     weights' offset (-8, -16; Q8_0's signed values are made unsigned by adding 128) is
//     taken out by starting each lane at -offset * (its four activations' sum), stored with
//     the activations. Without a minimum (Q4_0, Q5_0, Q8_0) the 8 lanes of a block are summed
//     exactly (a transposition of the lane sums of 4 weight rows by up to 4 activation rows)
//     and each block's sum scaled by d_w * d_x into one f32 sum, block after block, as the
//     AMX tiles do (quant_rows_on_amx): the same bits. Q4_1's and Q5_1's lane sums are
//     converted and scaled each, their minimums added as m * d_x * sum q.
//   - K-quants: a block's 32-bit lane sums (each four products of one sub-block) are packed
//     into 16 bits and multiplied by the sub-block scales with vpdpwssd; Q6_K's offset -32
//     goes in as -32 * scale times the activations' sums of 16 (vpdpwssd again). The lanes
//     are then reduced exactly (the transposition above) to one integer T per block and pair
//     of rows, and Q4_K's and Q5_K's minimums to another, M = sum of min_j * (the
//     activations' sum over sub-block j) (four vpdpwssd of word pairs); each block adds
//     fma(float(T), d_w * d_x) and fma(float(M), -dmin_w * d_x) in f32, block after block:
//     amx_k_rows' arithmetic, so Q4_K takes either by its number of rows. Each block is
//     unpacked once for up to 16 activation rows (in chunks of 4 from cache).
//   - Q4_0, Q8_0, Q4_K, Q5_K and Q6_K weights kept with each 16 rows' blocks interleaved
//     (weight_layout.h; quant_rows_int8_interleaved): a block of 16 rows is runs of 64 bytes,
//     four bytes of each row, and one vpdpbusd multiplies a run by four activations broadcast
//     from memory (in every lane): the lanes are the rows' exact block sums (the K-quants:
//     sub-block sums times their scales by vpmulld, the minimums and Q6_K's offset by
//     vpdpwssd of scale pairs with the activations' sums) with no reduction, scaled and summed
//     as above (the same bits). Up to 8 activation rows a tile (4 for the K-quants), more in
//     tiles over the same group of 16 rows (from cache), many in bands of 64.
// x86 CPUs without VNNI (AVX2; AVX-512 without VNNI) run AVX2 kernels
// (int8_rows_avx2.cpp): vpmaddubsw and vpmaddwd make the same 32-bit lane sums vpdpbusd does,
// and every block's sum is reduced to an exact integer and scaled as above, up to 8
// activation rows a tile (the K-quants' chunks of 5-8 with a row in each 32-bit lane, from a
// copy quantize_activations lays out: int8_lanes()), so Q8_0, Q4_0, Q5_0 and the K-quants give
// the VNNI and AMX kernels' bits (Q4_1 and Q5_1 add m * d_x * sum x per block, not per lane). Other
// targets (SCALAR, EMU128, other architectures) and types have no integer kernels: quant_rows_int8
// runs quant_rows on the activations as rounded (dequantized into f32), which gives the same
// result up to the order of the f32 sums. quantize_activations rounds a vector at a time
// (Highway), about 0.8 ns a value.
//
// Measured on an Intel Xeon with AVX-512 VNNI, BF16, FP16 and AMX ("Intel(R) Xeon(R)
// Processor" in /proc/cpuinfo: a virtual machine of 2 cores; figures vary by 5-10 % between
// runs), weights of 8192 x 2048 | 2048 x 8192 values, 1 GiB of them streamed from memory, in
// GB/s of weights (of the bytes as stored); quant_rows (f32 activations) -> quant_rows_int8,
// quantize_activations not included (one row: 2-7 us; 16 rows of 8192: 0.1 ms):
//                     one core                         two cores (n split in halves)
//   plain read   14.0 | 13.1 (one stream), 14.9 | 15.1   25.3 | 25.5, 28.5 | 28.4 (4 streams)
//   one row:
//     Q4_0        8.7 -> 14.3 |  9.2 -> 14.7            17.5 -> 26.3 | 17.6 -> 27.7
//     Q4_K        9.7 -> 13.9 |  9.9 -> 14.7            18.8 -> 28.0 | 20.2 -> 28.8
//     Q6_K        9.2 -> 14.2 | 10.0 -> 14.6            17.7 -> 27.3 | 17.4 -> 27.1
//     Q8_0       13.3 -> 14.4 | 13.2 -> 14.7            26.1 -> 28.4 | 26.1 -> 28.4
//   16 rows, in billions of multiply-adds a second:
//     Q4_0         38 -> 67   |   39 -> 69                71 -> 128  |   66 -> 137
//     Q4_K         31 -> 73   |   32 -> 78                59 -> 140  |   60 -> 148
//     Q6_K         24 -> 66   |   31 -> 75                47 -> 123  |   48 -> 133
//     Q8_0         35 -> 61   |   39 -> 60                65 -> 118  |   69 -> 116
// One row reads the weights at 92-100 % of a plain read's speed (quant_rows: 60-70 % for the
// 4- and 6-bit formats, 90 % for Q8_0). 16 rows are bound by the integer instructions and
// the f32 scaling of each block's sums (one 512-bit port does most of them on this CPU).

// Activation rows rounded for one weights' type (quantize_activations). Owns its memory, and
// keeps it from one call to the next: a decode step reuses one object. The values are stored
// in records laid out for the kernels; the accessors give ggml's fields.
class QuantizedRows {
 public:
  // The weights' type the rows were rounded for, and ggml's format of the rounded rows:
  // Q8_0, Q8_1, Q8_K, or for F32, F16 and BF16 weights their own type.
  quant::GgmlType weights() const { return weights_; }
  quant::GgmlType format() const { return format_; }
  int64_t rows() const { return m_; }
  int64_t cols() const { return k_; }
  // Values a block of format() holds: 32, 256, or 1 for the plain formats.
  int64_t block_elements() const;
  // Row i's block b: its block_elements() rounded values, its scale d (Q8_0, Q8_1: the f16
  // value as f32), and the sums of its values, of each 16 (Q8_K's bsums, j < 16) or of the
  // whole block (Q8_0, Q8_1, j = 0; Q8_1's s is scale * that sum, rounded to f16). The
  // quantized formats only.
  const int8_t* quants(int64_t i, int64_t b) const;
  float scale(int64_t i, int64_t b) const;
  int32_t sum(int64_t i, int64_t b, int64_t j) const;
  // Row i as the product takes it, k values into out: scale * q for each value in double
  // precision rounded to f32 (exact for Q8_0 and Q8_1), or the plain formats' values.
  void dequantize(int64_t i, float* out) const;

  // Where a row's records lie (for quant_rows.cpp): `stride` bytes a row, 64-byte aligned.
  const std::byte* data() const { return reinterpret_cast<const std::byte*>(data_.data()); }
  int64_t stride() const { return stride_; }
  // The rows as AMX tiles take them (amx_rows.h), where quantize_activations laid them out so
  // (quant_rows_int8 then runs amx_q8_rows); tiles null otherwise.
  AmxQ8Rows amx() const;
  // The rows as the AVX2 K-quant kernels' lane tiles take them (int8_rows.h's int8_lanes),
  // where quantize_activations laid them out so (Q8_K rows, 5 or more, where those kernels
  // run); null otherwise.
  const uint8_t* int8_lanes() const {
    return lanes_.empty() ? nullptr : reinterpret_cast<const uint8_t*>(lanes_.data());
  }

 private:
  friend void quantize_activations(quant::GgmlType weights, const float* x, int64_t ldx, int64_t m,
                                   int64_t k, QuantizedRows& out, ThreadPool* pool);
  struct alignas(64) Line {
    std::byte bytes[64];
  };
  std::byte* mutable_data() { return reinterpret_cast<std::byte*>(data_.data()); }

  quant::GgmlType weights_ = quant::GgmlType::F32, format_ = quant::GgmlType::F32;
  int64_t m_ = 0, k_ = 0, stride_ = 0, amx_padded_ = 0;
  std::vector<Line> data_, amx_tiles_, amx_scales_, amx_sums_, lanes_;
};

// Rounds rows [0, m) of x (rows ldx apart, k values each, finite) for a product with weights
// of type `weights` into `out`, replacing what it held, in chunks of 8 rows on `pool` where
// one is given (a prefill's rows: 0.5-1 ms of 512 x 2048 on one core). Every type
// quant::can_dequantize accepts; k a multiple of the weights' block_elements. Throws
// prism::Error otherwise.
void quantize_activations(quant::GgmlType weights, const float* x, int64_t ldx, int64_t m,
                          int64_t k, QuantizedRows& out, ThreadPool* pool = nullptr);

// out[i * ldo + r] = x_i . W[r] for i < x.rows(), r < n, with x_i as rounded in x (whose
// weights() must be `type` and cols() k): integer products per block, scaled and summed in
// f32. W as for quant_rows (row r at w + r * row_bytes, k values of `type`). x.rows() 1..16
// (more work too). Single-threaded: the caller splits n over threads, each reading the same x.
void quant_rows_int8(quant::GgmlType type, const QuantizedRows& x, const std::byte* w,
                     int64_t row_bytes, int64_t n, int64_t k, float* out, int64_t ldo);

// Whether weights of this type may be kept with the blocks of each 16 rows interleaved
// (weight_layout.h) for quant_rows_int8_interleaved: Q4_0, Q8_0, Q4_K, Q5_K and Q6_K under the
// AVX-512 targets on a CPU with VNNI, where AMX tiles do not take batches (quant_rows_on_amx;
// the tiles read the weights as stored, and AMX-BF16 multiplies a prefill's panels); Q4_0 on
// an x86 CPU with AVX2 but not VNNI (int8_rows_avx2.cpp).
bool quant_rows_int8_interleaved_native(quant::GgmlType type);

// quant_rows_int8 for weights {n, row_bytes} kept interleaved at w (their start): out[i * ldo +
// r - r0] = x_i . W[r] for i < x.rows() and the weight rows r in [r0, r1), any number of
// activation rows (a prefill's too). The same bits as quant_rows_int8 on the weights as
// stored. Single-threaded: the caller splits the rows over threads. Throws prism::Error where
// quant_rows_int8_interleaved_native(type) is false.
void quant_rows_int8_interleaved(quant::GgmlType type, const QuantizedRows& x, const std::byte* w,
                                 int64_t row_bytes, int64_t r0, int64_t r1, int64_t k, float* out,
                                 int64_t ldo);

// Whether quant_rows_int8 runs products of m rows with weights of this type on AMX tiles
// (amx_rows.h) rather than with VNNI: Q8_0, Q4_0 and Q4_K under the AVX3_DL target on a CPU
// with AMX-INT8, by default (PRISM_CPU_QUANT_ROWS=auto) for 5-16 rows of Q8_0 and Q4_0 and
// 9-16 of Q4_K, where the tiles are faster (16 rows: 1.7x VNNI for Q8_0, 2.4x for Q4_0, 1.5x
// for Q4_K), or for 1-16 rows with PRISM_CPU_QUANT_ROWS=amx; never with =vnni. Both kernels
// give the same bits (each block's sums are exact integers, scaled alike), so the choice
// changes only the speed, and a row's result never depends on the rows batched with it.
// Throws for =amx on a CPU without AMX-INT8, or for another value.
bool quant_rows_on_amx(quant::GgmlType type, int64_t m);

// Whether quant_rows_int8 multiplies any number of rows of this type at about the speed of 16
// (their chunks of 8 in the AVX2 kernels' lane tiles: the K-quants on CPUs with AVX2 but not
// AVX-512 VNNI), so that a product of many rows (a prefill) may take it rather than
// dequantized weights and float products.
bool quant_rows_int8_takes_many_rows(quant::GgmlType type);

// Whether quant_rows_int8 has integer kernels for this type under the SIMD target in use and
// on this CPU (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K under x86 targets from AVX2 on:
// AVX-512 VNNI's where the CPU has it, else AVX2's); the others run quant_rows on the rounded
// activations.
bool quant_rows_int8_native(quant::GgmlType type);

}  // namespace prism::cpu
