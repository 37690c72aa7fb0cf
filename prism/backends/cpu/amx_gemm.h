// Products of a prompt's rows (tens to thousands) with bf16 weights kept blocked
// (weight_layout.h), on AMX tiles: a prefill's projections on CPUs with AMX-BF16.
//
// The weights are the tiles' second operand as they are kept: a block's pairs of k for 16 of
// its 64 rows are one tile, 16 rows of 64 bytes 256 bytes apart. The activations are packed
// once per product (pack_rows_for_amx_gemm) into the first operand's tiles, 32 rows at a time
// and each tile's 1 KiB contiguous, so that a step of 32 values of k reads two streams, one of
// the activations and one of the weights, and four tile products (2 x 2 tiles of 16 x 16 f32
// sums) use four tile loads.
//
// What bounds such a kernel is where its tiles come from, not the tile products. Measured on
// one core of a 2-core Intel Xeon with AMX (family 6 model 167): tdpbf16ps alone ran 2.6
// TFLOP/s, with its four loads a step from L1 2.2, from L2 1.4-1.6, from memory 0.35; and a
// tile whose rows straddle cache lines halves all of these (the packed activations are
// 64-byte aligned). So the loops keep the packed activations of kAmxGemmChunkRows rows and at
// most kAmxGemmMaxDepth values of k (512 KiB) in L2, walk the columns' blocks under them, and
// prefetch the next block's weights into L2 while the current one is multiplied. The weights
// are then read from memory once per chunk of rows (128 multiply-adds a byte), the activations
// from L2. Depths beyond kAmxGemmMaxDepth are taken in parts, their sums kept in f32 between
// parts.
//
// Sums are in f32 and rounded to bf16 at the end (vcvtneps2bf16), as oneDNN's AMX kernels do.
#pragma once

#include <cstdint>

namespace prism::cpu {

inline constexpr int64_t kAmxGemmRows = 32;        // rows of packed activations a step takes
inline constexpr int64_t kAmxGemmChunkRows = 128;  // rows whose activations stay in L2
inline constexpr int64_t kAmxGemmMaxDepth = 2048;  // values of k in L2 at a time

// Whether the kernels below can run: amx_available() (amx_rows.h) and AVX-512 BF16 for the
// rounding of the sums.
bool amx_gemm_available();

// The values pack_rows_for_amx_gemm writes for m rows of k values: m rounded up to 32, times k.
int64_t amx_gemm_packed_values(int64_t m, int64_t k);

// Rows [r0, r1) of x (m rows of k values, `ldx` apart, bf16), r0 and r1 multiples of 32 (r1
// may be m rounded up), packed as the first operand of the tile products: per 32 rows and
// per 32 values of k, two tiles of 16 rows x 32 values, one after the other; rows past m are
// zeros. xp must be 64-byte aligned; k a multiple of 32.
void pack_rows_for_amx_gemm(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, int64_t r0,
                            int64_t r1, uint16_t* xp);

// Values [c0, c1) of 64 weight rows (row r at rows + r * ldr, value c0 first; bf16), written
// into their places in a block of 64 weight rows kept blocked (weight_layout.h: pairs of k
// across the 64 rows, so a pair's place does not depend on the rows' length) at `block`: what
// a product of weights in another form (quantized, dequantized a piece at a time) gives
// amx_gemm_blocked. c0 and c1 multiples of 32; `block` 64-byte aligned.
void block_rows_for_amx_gemm(const uint16_t* rows, int64_t ldr, int64_t c0, int64_t c1,
                             uint16_t* block);

// out[i * ldo + j] = x_i . (weight row j), bf16, for i < m and j < 64 * blocks: the `blocks`
// blocks of 64 weight rows at w (kept blocked, k values each), xp the packed x. Single-threaded:
// the caller splits the blocks over threads.
void amx_gemm_blocked(const uint16_t* xp, int64_t m, int64_t k, const uint16_t* w, int64_t blocks,
                      uint16_t* out, int64_t ldo);

}  // namespace prism::cpu
