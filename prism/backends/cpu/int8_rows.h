// What quant_rows_int8's kernels share (quant_rows.h has the interface): the records
// QuantizedRows keeps rounded activations in, and the kernels' signature. The AVX-512 VNNI
// kernels live in quant_rows.cpp (compiled per Highway target); the AVX2 ones, which every
// x86 CPU of the last ten years runs, in int8_rows_avx2.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "prism/quant/ggml_type.h"

namespace prism::cpu {

// The records QuantizedRows keeps a row of rounded activations in, one per step of the integer
// kernels, 64-byte aligned, zeros where nothing is said:
//   - Q8_0 and Q8_1: two blocks (64 values) a record. [0, 64): the values, int8 (the second
//     block's from byte 32; past the last block, zeros). [64, 128): 16 f32, the first block's
//     d in lanes 0-7 and the second's in 8-15. [128, 192): for Q8_0, 16 int32: -offset * the
//     sum of each four values, where offset is what the kernels add to the weights' values
//     (weight_offset in quant_rows.cpp: 8 for Q4_0, 16 for Q5_0, 128 for Q8_0); for Q8_1, 16
//     f32: d * the block's sum in lanes 0 and 8.
//     Where the kernels of interleaved weights run for the weights' type
//     (quant_rows_int8_interleaved_native), Q8_0 rows keep after their records
//     (pair_records_bytes) the same row packed for them (CompactQ8): its values, then each block's
//     d (f32), then each block's -offset * (the sum of its values) (int32), each part 64-byte
//     aligned.
//   - Q8_K: a block (256 values) a record. [0, 256): the values. [256, 272): the sums of each
//     32 values, int16. [320, 352): the sums of each 16 values, int16. [352, 384): for Q6_K
//     weights, the same sums in the order 0, 2, 1, 3, 4, 6, 5, 7, ... (for pairs of
//     sign-extended bytes of interleaved Q6_K scales). [384, 388): d, f32.
//   - F32, F16, BF16: the row's k values as f32.
struct PairRecord {
  static constexpr int64_t kValues = 0, kScales = 64, kExtra = 128, kBytes = 192;
};
// The bytes of a row's records of k values in Q8_0 or Q8_1 blocks.
inline int64_t pair_records_bytes(int64_t k) { return (k / 32 + 1) / 2 * PairRecord::kBytes; }
// Where the parts of a Q8_0 row's packed copy start, in bytes from the row's start (k values).
struct CompactQ8 {
  int64_t values, scales, totals, end;
  explicit CompactQ8(int64_t k)
      : values(pair_records_bytes(k)),
        scales(values + (k + 63) / 64 * 64),
        totals(scales + (k / 32 * 4 + 63) / 64 * 64),
        end(totals + (k / 32 * 4 + 63) / 64 * 64) {}
};
struct KRecord {
  static constexpr int64_t kValues = 0, kSums32 = 256, kSums = 320, kSumsPaired = 352, kScale = 384,
                           kBytes = 448;
};

// Rows of rounded activations as the integer kernels read them: x.rows() records of `stride`
// bytes at x; for the AVX2 K-quant kernels, also the same rows laid out by int8_lanes (or null:
// they then take every row from the records).
struct Int8Rows {
  const uint8_t* x;
  int64_t stride, m;
  const uint8_t* lanes = nullptr;
};

// The AVX2 kernels multiply chunks of 5-8 rows of Q8_K records (k values each) with a row of
// activations in each 32-bit lane (int8_rows_avx2.cpp), from a copy of the rows laid out for
// it: int8_lane_bytes(m, k) bytes (a multiple of 64), written by int8_lanes(x, k, out).
int64_t int8_lane_bytes(int64_t m, int64_t k);
void int8_lanes(const Int8Rows& x, int64_t k, uint8_t* out);

// out[i * ldo + r] = x_i . W[r] for i < x.m, r < n (quant_rows_int8's contract, its checks
// done). Single-threaded.
using QuantRowsInt8Fn = void (*)(const Int8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n,
                                 int64_t k, float* out, int64_t ldo);

// out[(i * ldo + r - r0] = x_i . W[r] for i < x.m and the rows r in [r0, r1) of weights kept
// interleaved (weight_layout.h; w their start, rows row_bytes apart as stored, x in Q8_0
// records with their packed copies). Single-threaded.
using QuantRowsInterleavedFn = void (*)(const Int8Rows& x, const uint8_t* w, int64_t row_bytes,
                                        int64_t r0, int64_t r1, int64_t k, float* out, int64_t ldo);

// A tile of weights kept interleaved: the group of 16 rows at w (`blocks` blocks a row) against
// some activation rows (records `stride` bytes apart at x, packed as `packed` says):
// out[g * ldo + r - first] = x_g . W[r] for the group's rows r in [first, last); `stream` for
// the first chunk of rows, which reads the group from memory.
using InterleavedTileFn = void (*)(const uint8_t* x, int64_t stride, const CompactQ8& packed,
                                   const uint8_t* w, int64_t blocks, float* out, int64_t ldo,
                                   int first, int last, bool stream);

// QuantRowsInterleavedFn's work through tiles (tiles[j] takes j + 1 activation rows): each group
// of 16 rows (or its part in [r0, r1)) against the rows in chunks of up to tiles.size(), the
// first chunk reading the group from memory, the rest from cache; many rows (a prefill's) in
// bands of 64, which every group then reads from cache.
void interleaved_tiles(std::span<const InterleavedTileFn> tiles, const Int8Rows& x,
                       const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, int64_t blocks,
                       const CompactQ8& packed, float* out, int64_t ldo);

// The AVX2 kernel for weights of `type` (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), or
// null for another type or where this binary has none (not x86). The caller makes sure the
// CPU has AVX2, FMA and F16C (the Highway target in use is AVX2 or better).
QuantRowsInt8Fn int8_rows_avx2(quant::GgmlType type);

// The AVX2 kernel for weights of `type` kept interleaved (Q4_0), or null for another type or
// where this binary has none; the same caller's promise.
QuantRowsInterleavedFn int8_interleaved_avx2(quant::GgmlType type);

}  // namespace prism::cpu
