#include "prism/backends/cuda/matmul.h"

#include <algorithm>
#include <vector>

#include "prism/core/error.h"

namespace prism::cuda {

namespace {

bool is_sequence(const std::vector<int>& axes, int first) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != first + static_cast<int>(i)) return false;
  return true;
}

std::vector<int> free_axes(int rank, const std::vector<int>& batch, const std::vector<int>& con) {
  std::vector<int> f;
  for (int i = 0; i < rank; ++i) {
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(con.begin(), con.end(), i) == con.end())
      f.push_back(i);
  }
  return f;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f64:
      return CUDA_R_64F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

std::optional<MatmulShape> plan_matmul(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  DType t = ls.dtype();
  if (t != DType::f32 && t != DType::f16 && t != DType::bf16 && t != DType::f64) return {};
  if (rs.dtype() != t || n.shape.dtype() != t) return {};
  int nb = static_cast<int>(a.lhs_batch.size());
  if (!is_sequence(a.lhs_batch, 0) || !is_sequence(a.rhs_batch, 0)) return {};
  std::vector<int> lfree = free_axes(ls.rank(), a.lhs_batch, a.lhs_contract);
  std::vector<int> rfree = free_axes(rs.rank(), a.rhs_batch, a.rhs_contract);
  MatmulShape m;
  m.dtype = t;
  for (int i = 0; i < nb; ++i) m.batch *= ls.size(i);
  for (int f : lfree) m.m *= ls.size(f);
  for (int f : rfree) m.n *= rs.size(f);
  for (int c : a.lhs_contract) m.k *= ls.size(c);
  // lhs: {batch, free, contract} or transposed {batch, contract, free}; each group in order.
  if (is_sequence(lfree, nb) && is_sequence(a.lhs_contract, nb + static_cast<int>(lfree.size()))) {
    m.lhs_transposed = false;
  } else if (is_sequence(a.lhs_contract, nb) &&
             is_sequence(lfree, nb + static_cast<int>(a.lhs_contract.size()))) {
    m.lhs_transposed = true;
  } else {
    return {};
  }
  // rhs: {batch, contract, free} or transposed {batch, free, contract}.
  if (is_sequence(a.rhs_contract, nb) &&
      is_sequence(rfree, nb + static_cast<int>(a.rhs_contract.size()))) {
    m.rhs_transposed = false;
  } else if (is_sequence(rfree, nb) &&
             is_sequence(a.rhs_contract, nb + static_cast<int>(rfree.size()))) {
    m.rhs_transposed = true;
  } else {
    return {};
  }
  return m;
}

Matmul::Matmul(const MatmulShape& s, cublasLtHandle_t handle, size_t workspace_bytes)
    : shape_(s), handle_(handle) {
  const CublasLtApi& lt = cublaslt();
  bool f64 = s.dtype == DType::f64;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F, data = data_type(s.dtype);
  check(lt.cublasLtMatmulDescCreate(&desc_, compute, scale), "cublasLtMatmulDescCreate");
  // cuBLAS "A" is our rhs (N x K after op), "B" our lhs (K x M after op), C is N x M.
  cublasOperation_t ta = s.rhs_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = s.lhs_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
        "set TRANSA");
  check(lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
        "set TRANSB");
  uint64_t ar = s.rhs_transposed ? s.k : s.n, ac = s.rhs_transposed ? s.n : s.k;
  uint64_t br = s.lhs_transposed ? s.m : s.k, bc = s.lhs_transposed ? s.k : s.m;
  check(lt.cublasLtMatrixLayoutCreate(&a_, data, ar, ac, static_cast<int64_t>(ar)), "layout A");
  check(lt.cublasLtMatrixLayoutCreate(&b_, data, br, bc, static_cast<int64_t>(br)), "layout B");
  check(lt.cublasLtMatrixLayoutCreate(&c_, data, s.n, s.m, s.n), "layout C");
  if (s.batch > 1) {
    int32_t count = static_cast<int32_t>(s.batch);
    int64_t strides[3] = {s.k * s.n, s.m * s.k, s.m * s.n};
    cublasLtMatrixLayout_t layouts[3] = {a_, b_, c_};
    for (int i = 0; i < 3; ++i) {
      check(lt.cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                &count, sizeof(count)),
            "set BATCH_COUNT");
      check(lt.cublasLtMatrixLayoutSetAttribute(layouts[i],
                                                CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &strides[i], sizeof(strides[i])),
            "set STRIDED_BATCH_OFFSET");
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  check(lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = workspace_bytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = lt.cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status =
        lt.cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, c_, c_, pref, 1, &result, &found);
  }
  lt.cublasLtMatmulPreferenceDestroy(pref);
  check(status, "cublasLtMatmulAlgoGetHeuristic");
  PRISM_CHECK(found > 0, "cuda: cuBLASLt has no algorithm for a {} product {}x{}x{} (batch {})",
              name(s.dtype), s.m, s.n, s.k, s.batch);
  algo_ = result.algo;
  workspace_bytes_ = result.workspaceSize;
}

Matmul::~Matmul() {
  const auto& lib = cublaslt_library();
  if (!lib.ok) return;
  if (c_) lib.api.cublasLtMatrixLayoutDestroy(c_);
  if (b_) lib.api.cublasLtMatrixLayoutDestroy(b_);
  if (a_) lib.api.cublasLtMatrixLayoutDestroy(a_);
  if (desc_) lib.api.cublasLtMatmulDescDestroy(desc_);
}

void Matmul::run(CUdeviceptr lhs, CUdeviceptr rhs, CUdeviceptr out, CUdeviceptr workspace,
                 CUstream stream) const {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = shape_.dtype == DType::f64;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  check(cublaslt().cublasLtMatmul(
            handle_, desc_, alpha, reinterpret_cast<const void*>(rhs), a_,
            reinterpret_cast<const void*>(lhs), b_, beta, reinterpret_cast<const void*>(out), c_,
            reinterpret_cast<void*>(out), c_, &algo_, reinterpret_cast<void*>(workspace),
            workspace_bytes_, reinterpret_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace prism::cuda
