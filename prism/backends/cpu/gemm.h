// Matrix products of bf16 operands in f32: y{M, N} = x{M, K} . w{K, N}, every sum an f32 fused
// multiply-add chain in the order of k, rounded once at the end (to bf16 where y is bf16). Where
// oneDNN multiplies bf16 only by widening both operands into memory first (oneDNN 2.x has bf16
// products from AVX-512 on), these are the bf16 products; from AVX-512 on they are the other
// candidate of bf16_products.h's measured choice (on CPUs whose bf16 dot instructions run at
// half the rate of their f32 FMAs, f32 FMAs on widened weights are the faster). The structure
// is GotoBLAS's:
//
//   - x is laid out once for all the product's columns (gemm_pack_lhs): panels of
//     kGemmPanelRows rows, each k's values of the panel's rows side by side, widened to f32.
//   - Each call takes a range of output columns (the pool's threads take ranges of their
//     own) in pieces of kGemmColumns columns; for a block of k at a time (256 values for
//     AVX2, 128 for AVX-512), the piece's weights are widened into f32 micro-panels as wide
//     as the micro-kernel (16 KiB of 16 columns for AVX2, 32 KiB of 64 for AVX-512, which stay
//     in L1), and the micro-kernel multiplies 6 rows of x by a micro-panel at a time, its
//     sums in registers (AVX2: 12 vectors, 12 FMAs for 2 weight loads and 6 broadcasts a k;
//     AVX-512: 24 vectors, 24 FMAs for 4 loads and 6 broadcasts), the panels of x for one
//     pass staying in L2.
//   - A pass's first micro-panel reads its panels of x from L3 or memory (16 MiB of them at
//     512 rows of K = 8192). The AVX2 kernel asks for the next panel's lines while it runs, and
//     its loop over k is unrolled 8 times: prism-bench dot on a Zen 2 EPYC (2 threads, median
//     of 3 alternating runs) 512x8192x2048 176.8 -> 188.0 GFLOP/s (weights stored [n][k]),
//     512x2048x8192 187.1 -> 193.3, 512x2048x2048 184.3 -> 188.2. Asking ahead for the
//     weights packed next, or for the next call's sums, was 1-3 % slower.
//
// A sum never depends on M, on the columns' ranges, on the threads or on the micro-kernel:
// the same x and w give the same bits, those of std::fma applied in the order of k.
#pragma once

#include <cstdint>

namespace prism::cpu {

inline constexpr int64_t kGemmPanelRows = 6;  // rows of x a micro-kernel takes
inline constexpr int64_t kGemmColumns = 128;  // columns of w packed at a time

// The floats gemm_pack_lhs writes for M rows of K values: whole panels (zeros fill the last).
inline int64_t gemm_lhs_floats(int64_t M, int64_t K) {
  return (M + kGemmPanelRows - 1) / kGemmPanelRows * kGemmPanelRows * K;
}

// Panels [p0, p1) of x, x[m][k] being the bf16 value at x + m * row_stride + k * col_stride,
// into `packed` (gemm_lhs_floats(M, K) floats), as gemm_columns reads them. Panels are
// independent: threads may write different ranges of them.
void gemm_pack_lhs(const uint16_t* x, int64_t row_stride, int64_t col_stride, int64_t M, int64_t K,
                   int64_t p0, int64_t p1, float* packed);

// bf16 weights: w[k][n] at data + k * k_stride + n * n_stride. Stored {n, k} (k_stride 1) or
// {k, n} (n_stride 1) take the vector paths; other strides work too. With blocked_k > 0, w is
// an {n, k = blocked_k} matrix in weight_layout.h's blocks (the strides unused), which the
// AVX-512 kernel widens a block row at a time.
struct GemmWeights {
  const uint16_t* data;
  int64_t k_stride, n_stride;
  int64_t blocked_k = 0;
};

// Where the product goes: y[m][n] at data + m * row_stride + n, bf16 (rounded to nearest
// even) or f32.
struct GemmOutput {
  void* data;
  int64_t row_stride;
  bool bf16;
};

// The micro-kernels: the best this CPU runs under the SIMD target in use (simd.h): AVX-512
// from AVX3 on, AVX2 (with FMA) from AVX2 on; or the portable one (for tests: a build for this
// CPU has no SIMD target below AVX2 to make `best` pick it).
enum class GemmKernel { best, portable };

// Columns [n0, n1) of y = x . w for all M rows, x packed by gemm_pack_lhs; K > 0. Uses
// buffers of the calling thread.
void gemm_columns(const float* packed, int64_t M, int64_t K, GemmWeights w, int64_t n0, int64_t n1,
                  GemmOutput y, GemmKernel kernel = GemmKernel::best);

// The micro-kernel `kernel` stands for now: "avx512", "avx2" or "portable".
const char* gemm_kernel_name(GemmKernel kernel = GemmKernel::best);

}  // namespace prism::cpu
