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
// and permitted for this process.
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

}  // namespace prism::cpu
