// Dot products of an activation row with weight rows, the inner loop of decoding, which is
// bound by how fast the weights stream in from memory. A core keeps more loads in flight
// over several streams than over one, so the kernels take four rows at a time, and their
// caller picks them far apart (for_row_groups below): four streams instead of one running
// through consecutive rows. Measured in a Llama 1B decoding step (Zen 4, two threads, weights
// in 2 MiB pages), four streams beat two by about 8 %, and software prefetching only cost:
// 20-35 % for four streams 1024 or 2048 values ahead, nothing measurable for two 512 ahead.
//
// The kernels are compiled once per SIMD target (dot_rows.cpp) and dot_row_kernels() hands
// out those of the target in use (simd.h). With AVX-512 BF16, bf16 activations and weights
// multiply as they are (exact products, f32 sums); elsewhere bf16 weights widen to f32 with
// one shift and multiply f32 activations.
#pragma once

#include <algorithm>
#include <cstdint>

namespace prism::cpu {

inline constexpr int kDotRows = 4;

struct DotRowKernels {
  // out[r] = x . w[r] for the four rows w[0..3], k values each; x in f32, w in bf16.
  void (*f32x_bf16w)(const float* x, const uint16_t* const* w, int64_t k, float* out);
  // The same with x in bf16 too (as it is when the computation is in bf16); x_f32 holds x
  // widened to f32, for the targets that multiply in f32.
  void (*bf16)(const uint16_t* x, const float* x_f32, const uint16_t* const* w, int64_t k,
               float* out);
  // The same with x and w in f32.
  void (*f32)(const float* x, const float* const* w, int64_t k, float* out);
  // bf16 reads x_f32 only past the last whole multiple of this many values (0: throughout),
  // so a caller with k a multiple of it may pass null for x_f32.
  int64_t bf16_native_block = 0;
  // out[64 b + j] = x . row j of block b, for the `blocks` blocks of 64 rows at w, weights
  // kept blocked (weight_layout.h: [block][k / 2][64][2]), x and w in bf16, k even. Null
  // without AVX-512 BF16, where weights are never blocked.
  void (*bf16_blocked)(const uint16_t* x, const uint16_t* w, int64_t k, int64_t blocks,
                       float* out) = nullptr;
  // Several rows of x against blocked weights (batched decoding on a CPU without AMX):
  // out[m * ldo + 64 b + j] = x[m] . row j of block b for m < rows, x in f32 with rows `ldx`
  // apart. The weights widen to f32 in registers and up to 4 rows of x multiply them there;
  // a block's weights are taken 32 KiB at a time, read from memory by the first 4 rows and
  // from cache by the next, while the next 32 KiB are prefetched. f32 FMAs, not vdpbf16ps:
  // on Intel's AVX-512 BF16 CPUs vdpbf16ps runs at half their rate (110 against 215
  // GFLOP/s a core here). Null without AVX-512 BF16.
  void (*f32_rows_blocked)(const float* x, int64_t ldx, int64_t rows, const uint16_t* w, int64_t k,
                           int64_t blocks, float* out, int64_t ldo) = nullptr;
  // The same with x in bf16 (rows ldx apart) and vdpbf16ps (on AMD's Zen 4 twice the FMAs'
  // rate): each row's sums are bf16_blocked's for that row alone, bit for bit, so a batch of
  // conversations or a speculative check rounds as one-row decoding does. Null without
  // AVX-512 BF16.
  void (*bf16_rows_blocked)(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w,
                            int64_t k, int64_t blocks, float* out, int64_t ldo) = nullptr;
  // Several rows of x against weights stored as rows, {n, k} (not blocked): out[m * ldo + j]
  // = x[m] . w[j] for j < cols and m < rows, w in bf16 rows k apart, x in f32 as
  // pack_rows_plain lays it out; any k and cols. Each 32-bit lane of the weights read as
  // they are holds two values, the even one widened to f32 by a shift and the odd one by a
  // mask, which x's layout matches; four weight rows a piece of k, read from memory by the
  // first two rows of x and from L1 by the others. Every target (batched decoding on CPUs
  // whose oneDNN multiplies bf16 only in f32, before AVX-512).
  void (*f32_rows_plain)(const float* x, int64_t rows, const uint16_t* w, int64_t k, int64_t cols,
                         float* out, int64_t ldo) = nullptr;
  // x for f32_rows_plain: `rows` rows of k bf16 values, ldx apart, widened to f32 and
  // reordered into rows plain_rows_stride(k) apart at `packed`.
  void (*pack_rows_plain)(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k,
                          float* packed) = nullptr;
};

// The distance of pack_rows_plain's rows: k and 16 floats more, so that rows of a k that is
// a multiple of 1024 do not all fall into the same sets of the L1 cache.
inline int64_t plain_rows_stride(int64_t k) { return k + 16; }

// The kernels of the SIMD target in use.
DotRowKernels dot_row_kernels();

// The kernels of products of 2-16 bf16 rows (batched decoding, speculative checks;
// kernels_dot.cpp): AMX tiles where the CPU has them (amx_rows.h); else, with AVX-512 BF16,
// for blocked weights the faster of f32_rows_blocked (fma) and bf16_rows_blocked (dpbf16) as
// measured on this CPU model (bf16_products.h: on an Intel Xeon whose vdpbf16ps runs at half
// the FMAs' rate the FMAs, 16 rows of Llama 1B's shapes 1.7x faster than oneDNN's products; on
// AMD's Zen 4, twice the rate, vdpbf16ps), the other weights through oneDNN; else, where
// oneDNN multiplies bf16, oneDNN; before AVX-512, f32_rows_plain (widen), where oneDNN's
// products would have the weights widened into memory first (onednn.h).
// PRISM_CPU_ROWS=amx|fma|dpbf16|widen|onednn chooses, for comparisons and tests (read once;
// another value, or a kernel this CPU lacks, throws prism::Error).
enum class RowsKernel { onednn, amx, fma, dpbf16, widen };
RowsKernel rows_kernel();

// How many bytes ahead bf16_blocked (one row of decoding against blocked weights) prefetches
// each of its four streams into L2, 0 for none: by default 512 on Intel CPUs and none on
// others. On a 2-core Intel Xeon with AMX, decoding the Llama-1B-shaped checkpoint went from
// 10.9-11.1 to 12.8-12.9 tok/s in alternating runs (256 bytes: 12.3, 1024: 12.0, 4096: 11.5;
// into L1: 11.8); on AMD's Zen 4, prefetches 4 and 8 KiB ahead were 5-10 % slower
// (docs/performance.md). The integer kernels of interleaved Q4_0 and Q8_0 weights prefetch
// their one stream four times as far (quant_rows.cpp), decoding's attention its keys twice as
// far and their values into L2 (kernels_attention.cpp) where this is not 0.
// PRISM_CPU_PREFETCH=<bytes> (a multiple of 64, up to 65536) chooses, for comparisons (read once;
// another value throws prism::Error).
int64_t decode_prefetch_bytes();

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
