// The inner loops of the floating-point reductions (kernels_reduce.cpp), compiled once per
// SIMD target (reduce_rows.cpp); reduce_row_kernels() hands out those of the target in use
// (simd.h). Values are of one floating-point dtype (f64, f32, bf16 or f16) and contiguous;
// sums and products accumulate in double, max and min propagate NaN. The innermost axis is
// reduced a row at a time; an outer axis a step at a time over all its inner lanes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "prism/core/dtype.h"

namespace prism::cpu {

enum class Reduction : uint8_t { sum, prod, max, min };

struct ReduceRowKernels {
  // out[r] = x[r n] op x[r n + 1] op ... op x[r n + n - 1] for r < rows: a reduction over the
  // innermost axis. An empty row gives op's identity (-inf for max, inf for min).
  void (*rows)(Reduction op, DType t, const std::byte* x, int64_t rows, int64_t n, double* out);
  // acc[i] = acc[i] op x[i] for i < n: one step of a reduction over an outer axis.
  void (*accumulate)(Reduction op, DType t, const std::byte* x, int64_t n, double* acc);
  // The index of the first largest (`max`) or smallest value of x[0, n), or of the first NaN
  // where there is one; 0 when n is 0.
  int64_t (*arg)(bool max, DType t, const std::byte* x, int64_t n);
  // One step of an arg-reduction over an outer axis, x being its row m: lane i takes x[i]
  // and m where x[i] beats best[i] (or is the first NaN). Start from best = -inf (max) or
  // inf (min), index = 0.
  void (*arg_accumulate)(bool max, DType t, const std::byte* x, int64_t n, int64_t m, double* best,
                         int64_t* index);
  // One step of a cumulative sum over an outer axis: acc[i] += x[i] for i < n, and y[i] (of
  // dtype t) is the sum with x[i] or, when `exclusive`, without it. y may be x.
  void (*cumsum_accumulate)(DType t, const std::byte* x, int64_t n, bool exclusive, double* acc,
                            std::byte* y);
};

// The kernels of the SIMD target in use.
ReduceRowKernels reduce_row_kernels();

}  // namespace prism::cpu
