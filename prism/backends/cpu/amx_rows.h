// Products of a few rows with bf16 weights on AMX tiles: the step of batched decoding, where
// 2-16 conversations each bring one row of activations and every weight is read once for all
// of them. One AMX tile instruction multiplies 16 rows by 16 columns over 32 values of k, so
// even 16 rows cost the cores little next to streaming the weights in: the product stays
// bound by memory, as one row's does, instead of growing with the rows as vdpbf16ps loops do.
//
// Both layouts of a weight matrix {n, k} are read as they are:
// - blocked (weight_layout.h: [n / 64][k / 2][64][2]) is the layout AMX wants for its second
//   operand, so the weights are that operand and the activations the first;
// - stored as a linear layer's {n, k} rows (weights also read by other kernels, such as an
//   embedding table shared with the output projection), the weights are the first operand,
//   16 rows a tile, and the activations, regrouped once per product (pack_rows_for_amx), the
//   second.
// Sums are in f32, as oneDNN's AMX kernels keep them.
//
// AMX needs the CPU's tiles, the operating system's support and, on Linux, the process's
// permission (asked for once, by amx_available). rows_kernel() (dot_rows.h) chooses these
// kernels where they run.
#pragma once

#include <cstdint>

namespace prism::cpu {

inline constexpr int64_t kAmxMaxRows = 16;  // rows of activations a product takes at once
inline constexpr int64_t kAmxDepth = 32;    // k must be a multiple of this
inline constexpr int64_t kAmxColumns = 16;  // unblocked weights: n a multiple of this

// Whether the kernels below can run: AMX-BF16 on this CPU, enabled by the operating system,
// and permitted for this process; and not declined by PRISM_CPU_AMX=0 (every AMX kernel's
// availability comes from here or amx_int8_available: the paths of a CPU without AMX, for
// tests and benchmarks of them on a CPU with it).
bool amx_available();

// What ldtilecfg reads: palette 1, then each tile's bytes a row and rows.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  void set(int tile, int64_t tile_rows, int64_t bytes_a_row) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    colsb[tile] = static_cast<uint16_t>(bytes_a_row);
  }
};

// out[m * ldo + 64 b + j] = x[m] . (row j of block b) for m < rows (1..16) and the `blocks`
// blocks of 64 weight rows at w, kept blocked; x in bf16 with rows `ldx` values apart.
void amx_rows_blocked(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* w, int64_t k,
                      int64_t blocks, float* out, int64_t ldo);

// x's rows (1..16, `ldx` apart, k values each) regrouped as the second operand of a tile
// product: [k / 2][rows][2], k * rows values at xp.
void pack_rows_for_amx(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint16_t* xp);

// out[m * ldo + j] = x[m] . w[j] for m < rows and j < n (a multiple of 16), w being n weight
// rows `ldw` values apart, xp = pack_rows_for_amx(x).
void amx_rows_plain(const uint16_t* xp, int64_t rows, const uint16_t* w, int64_t ldw, int64_t k,
                    int64_t n, float* out, int64_t ldo);

// --- AMX-INT8: products of 1-16 rows with Q8_0 and Q4_0 weights, llama.cpp's arithmetic ------
//
// The integer form of the products quant_rows_int8 (quant_rows.h) computes: activations
// rounded to ggml's Q8_0 blocks, each 32-value block of a weight row multiplied by each
// activation row's block in integers. A tile product (tdpbssd) takes 16 weight rows' block as
// its first operand (Q8_0's values straight from the file's layout, Q4_0's nibbles unpacked
// to value - 8 first) and the activation rows' block as the second, and gives the 16 x m
// integer sums of the block at once; each is then scaled by d_w * d_x and added in f32.
//
// Every (activation row, weight row) pair is computed the same way whatever the number of
// rows, the split among threads, or the position of the row in its group: for each block in
// order, sum = fma(float(integer sum), d_w * d_x, sum). So a row's result does not depend on
// the rows it is batched with, which batched decoding promises (a conversation answers the same
// alone or among others). The VNNI kernels compute Q8_0 and Q4_0 products the same way
// (quant_rows.h), so quant_rows_int8 takes the tiles for the batches where they are faster
// (5-16 rows) and VNNI for fewer, with the same bits.
//
// The 16 x m sums come out as 16 m int32, weight row by weight row; they are scaled and
// added in that flat order into m vector accumulators (m padded up to 1, 2, 4, 8 or 16:
// `padded` below), whose lane p holds weight row p / padded, activation row p % padded.
//
// Measured (prism-bench quant: 8192 x 2048 weights streamed from 1 GiB, 2 cores of an Intel
// Xeon with AMX, one 512-bit FMA port; GB/s of weights as stored, a plain read 30.9):
//                 1 row         4 rows    8 rows    16 rows
//   Q8_0 VNNI     28.1 (91 %)   25.5      15.2       8.6 (129 G multiply-adds/s)
//   Q8_0 AMX      21.3 (69 %)   21.3      18.9      14.7 (221)
//   Q4_0 VNNI     26.6 (86 %)   17.2       9.3       4.5 (127)
//   Q4_0 AMX      15.1 (49 %)   14.6      12.9      10.7 (304)
// Where the time goes, for whoever takes this further:
// - A tile product costs the same (16 cycles) whatever its rows, columns and depth: a block
//   of 32 values of 16 weight rows is a quarter of what one could take.
// - A tile load waits about 25 ns for bytes that vector stores just wrote (Q4_0's unpacked
//   nibbles): they are unpacked kAhead blocks before they are loaded.
// - Tile loads keep few reads from memory in flight, and a group's 16 rows are 16 streams the
//   hardware prefetchers lose: the next group is prefetched into L2 meanwhile. A copy of the
//   weights laid out group by group (each block's 16 d, then the 16 rows' values: one
//   stream, no gather of the scales) read 10-40 % faster in a trial, short of memory's pace
//   still; in cache the kernel is about 2x faster than from memory, so the loads and the
//   arithmetic do not overlap.
// - The per-block scaling (convert, multiply, fused multiply-add for 16 sums) is most of the
//   arithmetic, on the one 512-bit FMA port of this CPU.

// Whether amx_q8_rows can run: AMX-INT8 and AVX-512 on this CPU, enabled by the operating
// system and permitted for this process.
bool amx_int8_available();

// The padded row count for m rows (1..16): the least of 1, 2, 4, 8, 16 not below m.
int64_t amx_int8_padded(int64_t m);

// Activations rounded to 8 bits as amx_q8_rows and amx_k_rows read them (m rows, `padded` of
// them in the layout), for k / 32 blocks of 32 values (Q8_0's blocks, or Q8_K's values 32 at a
// time):
// - tiles: per block b, 32 * padded bytes at tiles + 32 * padded * b: [8][padded][4], value
//   4 g + t of row i at [g][i][t] (zeros for the rows past m);
// - scales: per block (Q8_0: 32 values; Q8_K: 256), 16 floats at scales + 16 b: lane p holds
//   row (p % padded)'s d (Q8_0: f32 of the f16 value), zero for the rows past m;
// - sums (Q8_K only, else null): per block of 256 values s, 4 vectors of 16 int32 at sums +
//   64 s + 16 i: lane p holds row (p % padded)'s sums of 32 values 2i (low 16 bits) and 2i + 1
//   (high 16 bits), the words a Q4_K block's minimums are multiplied with.
struct AmxQ8Rows {
  const int8_t* tiles;
  const float* scales;
  const int32_t* sums;
  int64_t m, padded;
};

// out[i * ldo + j] = x_i . W[j] for i < x.m, j < n: W[j] at w + j * row_bytes, k values of
// Q8_0 or Q4_0 (`q4`) in ggml's layout, k a multiple of 32. Single-threaded: the caller splits
// n over threads. row_bytes below 2^27.
void amx_q8_rows(bool q4, const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n,
                 int64_t k, float* out, int64_t ldo);

// --- AMX-INT8: products of 1-16 rows with Q4_K weights ----------------------------------------
//
// The activations are rounded to ggml's Q8_K blocks (256 values, one f32 d), as for the VNNI
// kernels. For each 256-value block of a weight row and an activation row, two exact integers:
//   T = sum_j scale_j * (the integer product of sub-block j's 32 values), and
//   M = sum_j min_j * (the activations' sum over sub-block j),
// and then, in f32 and block after block: sum = fma(float(T), d_w * d_x, sum);
// sum = fma(float(M), -dmin_w * d_x, sum). The VNNI kernel for Q4_K computes the same integers
// and the same f32 steps (quant_rows.cpp, KExactStep), so the two give the same bits and a
// product takes either by its number of rows.
//
// A tile product gives sub-block j's integer products of 16 weight rows (their nibbles
// unpacked by vector instructions, one block ahead of the tiles) by up to 16 activation rows;
// vector instructions multiply them by the rows' 6-bit scales (vpmulld) into T. The scales and
// minimums of 16 rows come by four gathers a block, unpacked 16 rows at a time. M is four
// vpdpwssd of the minimums' word pairs with the activations' sums (AmxQ8Rows::sums).
//
// x as quantize_activations lays it out for Q4_K (tiles, scales per 256 values, sums); w, n,
// k (a multiple of 256), out, ldo as for amx_q8_rows. The CPU must also have AVX-512 VNNI (as
// quant_rows_on_amx checks).
void amx_k_rows(const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                float* out, int64_t ldo);

}  // namespace prism::cpu
