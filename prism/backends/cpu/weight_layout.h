// Weights of matrix products kept in the layout the products read fastest: bf16 matrices
// stored {n, k} (a Hugging Face linear layer's weight) regrouped into blocks of 64 rows, and
// within a block pairs of k interleaved across the 64 rows: [n / 64][k / 2][64][2] (oneDNN's
// BA16a64b2a for the {k, n} matrix the product reads). oneDNN's brgemm then multiplies the
// weights as they are, instead of copying each slice into that layout on every call, and the
// AVX-512 BF16 matrix-vector kernel reads one 64-row block as one contiguous stream.
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
#include <span>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/core/shape.h"

namespace prism::cpu {

constexpr int64_t kWeightBlockRows = 64;   // n a block
constexpr int64_t kWeightBlockDepth = 32;  // k must be a multiple of this

// Whether a matrix {n, k} of this shape can be kept blocked: bf16, rank 2, n and k multiples
// of the block's, on a CPU with AVX-512 BF16 (the kernels that read the layout).
bool blockable(const Shape& shape);

// Copies the {n, k} matrix `from` into `to` (the same place, or another of the same size) in
// the blocked layout (`to_blocked`) or, from blocked, as stored.
void copy_weights(const std::byte* from, std::byte* to, int64_t n, int64_t k, bool to_blocked,
                  ThreadPool& pool);

// Where element (row, col) of a blocked {n, k} matrix is, in elements from its start.
inline int64_t blocked_index(int64_t row, int64_t col, int64_t k) {
  const int64_t block = row / kWeightBlockRows, j = row % kWeightBlockRows;
  return block * kWeightBlockRows * k + ((col / 2) * kWeightBlockRows + j) * 2 + col % 2;
}

// The weights that are blocked in the call running on this thread, while it lives: what
// blocked() answers the kernels (they run their layout checks on the calling thread).
class BlockedWeights {
 public:
  explicit BlockedWeights(std::span<const std::byte* const> data);
  ~BlockedWeights();
  BlockedWeights(const BlockedWeights&) = delete;
  BlockedWeights& operator=(const BlockedWeights&) = delete;

 private:
  std::span<const std::byte* const> data_;
  const BlockedWeights* outer_;
  friend bool blocked(const std::byte* data);
};

// Whether the memory starting at `data` holds blocked weights in the current call.
bool blocked(const std::byte* data);

}  // namespace prism::cpu
