// Weights of matrix products kept in the layout the products read fastest: bf16 matrices
// stored {n, k} (a Hugging Face linear layer's weight) regrouped into blocks of 64 rows, and
// within a block pairs of k interleaved across the 64 rows: [n / 64][k / 2][64][2] (oneDNN's
// BA16a64b2a for the {k, n} matrix the product reads). oneDNN's brgemm then multiplies the
// weights as they are, instead of copying each slice into that layout on every call, and the
// AVX-512 BF16 matrix-vector kernel reads one 64-row block as one contiguous stream.
//
// Weights in ggml's Q4_0, Q8_0, Q4_K, Q5_K and Q6_K block formats (a GGUF file's, u8 {n,
// row_bytes}) that only products read are kept with the blocks of each 16 rows interleaved
// (kQuantGroupRows): the integer kernels (quant_rows.h) then take a block of 16 rows as a few
// 64-byte vectors, one 32-bit lane a row, whose products with an activation block need no sums
// across lanes. A group of 16 rows holds their blocks one after the other as runs of 64 bytes,
// run c of a block holding bytes 4c..4c+3 of each row's block, row r at 4r:
//   - Q4_K and Q5_K (144 and 176 bytes, 36 and 44 runs): run 0 is the 16 rows' d and dmin (f16
//     each), runs 1-3 their packed scales and minimums, then Q5_K's 8 runs of fifth bits, then
//     the quants (a run: 4 nibble bytes, values 4c..4c+3 of two sub-blocks).
//   - Q4_0, Q8_0 and Q6_K (18, 34 and 210 bytes: a 2-byte d, first or last, and the rest in
//     runs) in pairs of blocks (the last alone where a row holds an odd number): the 16 rows'
//     d (f16) of the first block and of the second, then the runs of the first, then of the
//     second (Q4_0: 4 runs of its 16 nibble bytes; Q8_0: 8 runs of its 32 values; Q6_K: 4 of
//     its 16 scales, then 48 of its low and high bits in the order its kernel reads them,
//     q6_k_run).
// So a kernel reads a group in one pass from start to end (Q5_K's fifth bits again, from cache,
// for each quarter of its quants).
// A group has the size of its 16 rows as stored, so the layout changes no sizes.
//
// The layout belongs to the buffer: `Executable::prepare` returns blocked copies of the
// parameters that only products read (executable.cpp), marked in their CpuMemory, and nothing
// changes a buffer's layout after that. A call tells its kernels which of the weights it was
// given are blocked (BlockedWeights, for the thread running the call); a step that reads a
// blocked weight otherwise gets a copy as stored, and download and write translate (so one
// thread reading a weight never rewrites it under another's product).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/core/shape.h"
#include "prism/quant/ggml_type.h"

namespace prism::cpu {

constexpr int64_t kWeightBlockRows = 64;   // n a block
constexpr int64_t kWeightBlockDepth = 32;  // k must be a multiple of this
constexpr int64_t kQuantGroupRows = 16;    // rows of quantized weights interleaved

// How a buffer of weights is laid out: as stored, or one of the layouts above.
enum class WeightLayout : uint8_t {
  stored,
  bf16_blocks,  // bf16 {n, k} in blocks of 64 rows
  q4_0_rows,    // Q4_0 u8 {n, row_bytes}, 16 rows interleaved
  q8_0_rows,    // Q8_0 likewise
  q4_k_rows,    // Q4_K likewise
  q5_k_rows,    // Q5_K likewise
  q6_k_rows,    // Q6_K likewise
};

// The interleaved layout of weights in `format`, if there is one (Q4_0, Q8_0, Q4_K, Q5_K,
// Q6_K).
std::optional<WeightLayout> interleaved_layout(quant::GgmlType format);
// The block format of an interleaved layout (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K), for the others
// nullopt.
std::optional<quant::GgmlType> interleaved_format(WeightLayout layout);

// Whether weights u8 {n, row_bytes} in `format` can be kept interleaved here: a format with
// that layout, n a multiple of 16, rows of whole blocks, and products that read it (the
// integer kernels with AVX-512 VNNI, or Q4_0's with AVX2 alone:
// quant_rows_int8_interleaved_native); never with
// PRISM_CPU_QUANT_LAYOUT=stored (the default: interleaved; another value throws).
// interleaves(format): whether weights in `format` of a shape that fits are.
bool interleaves(quant::GgmlType format);
bool interleavable(quant::GgmlType format, const Shape& shape);

// Which run of an interleaved Q6_K block holds bytes 4c..4c+3 of each row's block: its 16
// scales (bytes 192-207) in runs 0-3, then for each half h of the block and e < 8 the three
// runs its values 128h + 4e + 32i.. (i < 4) come from, in the order the kernel reads them: low
// bits at 64h + 4e (ql), at 64h + 32 + 4e, high bits at 128 + 32h + 4e (qh).
constexpr int64_t q6_k_run(int64_t c) {
  if (c >= 48) return c - 48;
  if (c >= 32) return 4 + 3 * (c - 32) + 2;  // qh: 8h + e = c - 32
  return 4 + 3 * (c / 16 * 8 + c % 8) + c % 16 / 8;
}

// Where block b of a group of interleaved weights in `format` lies, as chunks of its bytes as
// stored: visit(from, bytes, at) for each, bytes [from, from + bytes) of each row's block,
// kept as the 16 rows' chunks side by side at `at` bytes from the group's start (row r's at at
// + r * bytes): its runs of 4 bytes, and its 2-byte d where the block's size is not a multiple
// of 4. Rows of `blocks` blocks.
template <typename Visit>
void for_each_chunk(quant::GgmlType format, int64_t b, int64_t blocks, Visit&& visit) {
  const int64_t block_bytes = quant::info(format).block_bytes;
  if (block_bytes % 4 == 0) {
    for (int64_t c = 0; c < block_bytes / 4; ++c)
      visit(4 * c, 4, b * block_bytes * kQuantGroupRows + 64 * c);
    return;
  }
  // d first (Q4_0, Q8_0) or last (Q6_K)
  const int64_t d_at = format == quant::GgmlType::Q6_K ? block_bytes - 2 : 0;
  const int64_t first = d_at == 0 ? 2 : 0;
  const int64_t runs = (block_bytes - 2) * kQuantGroupRows;  // a block's runs
  const int64_t pair = (b / 2) * 2 * block_bytes * kQuantGroupRows;
  const bool second = b % 2 == 1, alone = !second && b + 1 == blocks;
  const int64_t ds = (alone ? 1 : 2) * 2 * kQuantGroupRows;  // the d before the runs
  visit(d_at, 2, pair + (second ? 2 * kQuantGroupRows : 0));
  for (int64_t c = 0; c < (block_bytes - 2) / 4; ++c) {
    const int64_t run = format == quant::GgmlType::Q6_K ? q6_k_run(c) : c;
    visit(first + 4 * c, 4, pair + ds + (second ? runs : 0) + 64 * run);
  }
}

// Where byte `byte` of row `row` (as stored) of interleaved weights in `format` is, in bytes
// from their start.
inline int64_t interleaved_index(int64_t row, int64_t byte, int64_t row_bytes,
                                 quant::GgmlType format) {
  const int64_t block_bytes = quant::info(format).block_bytes;
  const int64_t o = byte % block_bytes, r = row % kQuantGroupRows;
  int64_t index = 0;
  for_each_chunk(format, byte / block_bytes, row_bytes / block_bytes,
                 [&](int64_t from, int64_t bytes, int64_t at) {
                   if (o >= from && o < from + bytes) index = at + r * bytes + (o - from);
                 });
  return row / kQuantGroupRows * kQuantGroupRows * row_bytes + index;
}

// Row r of the group of interleaved weights in `format` at `group` (rows of row_bytes bytes)
// as stored, into `out`.
inline void interleaved_row(const std::byte* group, int64_t r, int64_t row_bytes,
                            quant::GgmlType format, std::byte* out) {
  const int64_t block_bytes = quant::info(format).block_bytes;
  const int64_t blocks = row_bytes / block_bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    for_each_chunk(format, b, blocks, [&](int64_t from, int64_t bytes, int64_t at) {
      std::memcpy(out + b * block_bytes + from, group + at + r * bytes, bytes);
    });
  }
}

// Whether a matrix {n, k} of this shape can be kept blocked: bf16, rank 2, n and k multiples
// of the block's, on a CPU with AVX-512 BF16 (the kernels that read the layout).
bool blockable(const Shape& shape);

// Copies the weights `from` ({n, k} bf16 for bf16_blocks, u8 {n, row_bytes = k} for the
// quantized layouts) into `to` (the same place, or another of the same size) in `layout`
// (`to_layout`) or, from `layout`, as stored.
void copy_weights(WeightLayout layout, const std::byte* from, std::byte* to, int64_t n, int64_t k,
                  bool to_layout, ThreadPool& pool);

// Where element (row, col) of a blocked {n, k} matrix is, in elements from its start.
inline int64_t blocked_index(int64_t row, int64_t col, int64_t k) {
  const int64_t block = row / kWeightBlockRows, j = row % kWeightBlockRows;
  return block * kWeightBlockRows * k + ((col / 2) * kWeightBlockRows + j) * 2 + col % 2;
}

// The weights that are blocked in the call running on this thread, while it lives: what
// blocked() answers the kernels (they run their layout checks on the calling thread).
class BlockedWeights {
 public:
  // data[i] holds weights in layouts[i].
  BlockedWeights(std::span<const std::byte* const> data, std::span<const WeightLayout> layouts);
  ~BlockedWeights();
  BlockedWeights(const BlockedWeights&) = delete;
  BlockedWeights& operator=(const BlockedWeights&) = delete;

 private:
  std::span<const std::byte* const> data_;
  std::span<const WeightLayout> layouts_;
  const BlockedWeights* outer_;
  friend WeightLayout layout_of(const std::byte* data);
};

// The layout of the weights starting at `data` in the current call (stored where nothing
// else was said).
WeightLayout layout_of(const std::byte* data);

// Whether the memory starting at `data` holds weights in a layout of their own (blocked or
// interleaved) in the current call.
inline bool blocked(const std::byte* data) { return layout_of(data) != WeightLayout::stored; }

}  // namespace prism::cpu
