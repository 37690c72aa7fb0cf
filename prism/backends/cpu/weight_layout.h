// Weights of matrix products kept in the layout the products read fastest: bf16 matrices
// stored {n, k} (a Hugging Face linear layer's weight) regrouped into blocks of 64 rows, and
// within a block pairs of k interleaved across the 64 rows: [n / 64][k / 2][64][2] (oneDNN's
// BA16a64b2a for the {k, n} matrix the product reads). oneDNN's brgemm then multiplies the
// weights as they are, instead of copying each slice into that layout on every call, and the
// AVX-512 BF16 matrix-vector kernel reads one 64-row block as one contiguous stream.
//
// A block occupies the same bytes as its 64 rows did, so the change is made in place, one block
// at a time. The CPU executable blocks the parameters that only products read on their first
// call (executable.cpp); kernels ask blocked() of the memory they are given, since a buffer
// read by several executables may change layout between calls; download and write see the
// plain layout again (cpu_platform.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/core/shape.h"

namespace prism::cpu {

constexpr int64_t kWeightBlockRows = 64;   // n a block
constexpr int64_t kWeightBlockDepth = 32;  // k must be a multiple of this

// Whether a matrix {n, k} of this shape can be kept blocked: bf16, rank 2, n and k multiples
// of the block's, on a CPU with AVX-512 BF16 (the kernels that read the layout).
bool blockable(const Shape& shape);

// Puts the {n, k} matrix at `data` in the blocked layout or back as stored, rewriting it in
// place where it is in the other, and records which layout `data` holds for blocked(). One
// call at a time: executables and the platform may set the same buffer's layout.
void set_weights_blocked(std::byte* data, int64_t n, int64_t k, bool blocked, ThreadPool& pool);

// Whether the memory starting at `data` holds blocked weights.
bool blocked(const std::byte* data);

// Forgets `data` (its memory is being freed).
void forget_blocked(const std::byte* data);

}  // namespace prism::cpu
