// dot_general through cuBLASLt: the operands viewed as batched row-major matrices
// {B, M, K} x {B, K, N} (either may be stored transposed), for f32, f16, bf16 (accumulating
// in f32) and f64. cuBLASLt is column-major, so the product is computed as C^T = B^T A^T.
#pragma once

#include <cstdint>
#include <optional>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/ir/graph.h"

namespace prism::cuda {

struct MatmulShape {
  DType dtype = DType::f32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool lhs_transposed = false;  // lhs memory holds {B, K, M}
  bool rhs_transposed = false;  // rhs memory holds {B, N, K}
};

// The matrix view of a dot node, or nullopt when cuBLASLt cannot take it as it is stored
// (another dtype, or batch/free/contracting axes interleaved): the generic kernel runs it.
std::optional<MatmulShape> plan_matmul(const ir::Graph& graph, const ir::Node& node);

// One planned cuBLASLt product (descriptors and the chosen algorithm, made at compile time).
class Matmul {
 public:
  Matmul(const MatmulShape& shape, cublasLtHandle_t handle, size_t workspace_bytes);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void run(CUdeviceptr lhs, CUdeviceptr rhs, CUdeviceptr out, CUdeviceptr workspace,
           CUstream stream) const;
  const MatmulShape& shape() const { return shape_; }

 private:
  MatmulShape shape_;
  cublasLtHandle_t handle_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
};

}  // namespace prism::cuda
