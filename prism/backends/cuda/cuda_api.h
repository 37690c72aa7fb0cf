// The CUDA libraries, loaded at run time with dlopen: the driver (libcuda.so.1), NVRTC,
// cuBLASLt and NCCL (libnccl.so.2, for meshes of several GPUs; built where the toolkit has
// nccl.h). Only the toolkit's headers are needed to build; a binary built with CUDA starts
// on machines without a GPU or toolkit, and `status()` says why CUDA cannot be used there.
#pragma once

#include <cublasLt.h>
#include <cuda.h>
#include <nvrtc.h>

#include <string>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define PRISM_CUDA_NCCL 1
#endif

namespace prism::cuda {

// The driver entry points prism calls, by their exported (versioned) names.
#define PRISM_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                            \
  X(cuDeviceGetCount)                  \
  X(cuDeviceGet)                       \
  X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute)              \
  X(cuDeviceTotalMem_v2)               \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease_v2)      \
  X(cuCtxSetCurrent)                   \
  X(cuMemAlloc_v2)                     \
  X(cuMemFree_v2)                      \
  X(cuMemcpyHtoD_v2)                   \
  X(cuMemcpyDtoH_v2)                   \
  X(cuMemcpyDtoDAsync_v2)              \
  X(cuMemcpy2DAsync_v2)                \
  X(cuMemsetD8Async)                   \
  X(cuMemsetD32Async)                  \
  X(cuStreamCreate)                    \
  X(cuStreamDestroy_v2)                \
  X(cuStreamSynchronize)               \
  X(cuModuleLoadData)                  \
  X(cuModuleUnload)                    \
  X(cuModuleGetFunction)               \
  X(cuLaunchKernel)                    \
  X(cuGetErrorName)                    \
  X(cuGetErrorString)                  \
  X(cuStreamBeginCapture_v2)           \
  X(cuStreamEndCapture)                \
  X(cuGraphInstantiateWithFlags)       \
  X(cuGraphLaunch)                     \
  X(cuGraphExecDestroy)                \
  X(cuGraphDestroy)                    \
  X(cuEventCreate)                     \
  X(cuEventDestroy_v2)                 \
  X(cuEventRecordWithFlags)            \
  X(cuStreamIsCapturing)               \
  X(cuEventElapsedTime_v2)

#define PRISM_NVRTC_FUNCTIONS(X) \
  X(nvrtcGetErrorString)         \
  X(nvrtcCreateProgram)          \
  X(nvrtcDestroyProgram)         \
  X(nvrtcCompileProgram)         \
  X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog)          \
  X(nvrtcGetCUBINSize)           \
  X(nvrtcGetCUBIN)

#define PRISM_CUBLASLT_FUNCTIONS(X)       \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)

#define PRISM_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)             \
  X(ncclGetErrorString)         \
  X(ncclCommInitAll)            \
  X(ncclGetUniqueId)            \
  X(ncclCommInitRank)           \
  X(ncclGroupStart)             \
  X(ncclGroupEnd)               \
  X(ncclCommDestroy)            \
  X(ncclCommAbort)              \
  X(ncclAllReduce)              \
  X(ncclAllGather)              \
  X(ncclReduceScatter)

#define PRISM_CUDA_DECLARE(name) decltype(&::name) name = nullptr;

struct DriverApi {
  PRISM_CUDA_DRIVER_FUNCTIONS(PRISM_CUDA_DECLARE)
};
struct NvrtcApi {
  PRISM_NVRTC_FUNCTIONS(PRISM_CUDA_DECLARE)
};
struct CublasLtApi {
  PRISM_CUBLASLT_FUNCTIONS(PRISM_CUDA_DECLARE)
};
#ifdef PRISM_CUDA_NCCL
struct NcclApi {
  PRISM_NCCL_FUNCTIONS(PRISM_CUDA_DECLARE)
};
#endif

#undef PRISM_CUDA_DECLARE

// A library loaded once per process, or the reason it could not be.
template <typename Api>
struct Loaded {
  Api api;
  bool ok = false;
  std::string error;  // "libcuda.so.1 not found", "libnvrtc.so.13 lacks nvrtcGetCUBIN"
};

// The first of `names` that dlopen finds, with every function of the table resolved.
const Loaded<DriverApi>& driver_library();
const Loaded<NvrtcApi>& nvrtc_library();
const Loaded<CublasLtApi>& cublaslt_library();
#ifdef PRISM_CUDA_NCCL
// NCCL from PRISM_NCCL_LIBRARY (a path: the one a Python wheel brings, say) where it is set,
// else libnccl.so.2 where dlopen finds it.
const Loaded<NcclApi>& nccl_library();
// NCCL from the library at `path` (the tests' stand-in).
Loaded<NcclApi> load_nccl(const char* path);
#endif

// The loaded tables; each throws prism::Error with the reason when its library is missing.
const DriverApi& driver();
const NvrtcApi& nvrtc();
const CublasLtApi& cublaslt();

// The backend's switches (PRISM_CUDA_GRAPHS, _CUBLASLT, _FEW_ROWS, _PROFILE): `fallback` when
// the variable is unset, else whether it is anything but "0".
bool env_switch(const char* name, bool fallback);

// Whether CUDA can run here: the driver and NVRTC load, cuInit succeeds and there is a
// device. Empty when usable, else the reason ("no driver (libcuda.so.1 not found)").
// cuBLASLt is optional: without it matrix products run in generated kernels.
std::string unavailable_reason();

// Throws prism::Error "cuda: <what>: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" on failure.
void check(CUresult result, const char* what);
void check(nvrtcResult result, const char* what);
void check(cublasStatus_t result, const char* what);

}  // namespace prism::cuda
