#include "prism/backends/cuda/cuda_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>
#include <mutex>

#include "prism/core/error.h"

namespace prism::cuda {
namespace {

// Opens the first library of `names` that exists and resolves every entry point of Api.
template <typename Api, typename Resolve>
Loaded<Api> load(std::initializer_list<const char*> names, Resolve&& resolve) {
  Loaded<Api> lib;
  void* handle = nullptr;
  const char* found = nullptr;
  for (const char* name : names) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      found = name;
      break;
    }
  }
  if (!handle) {
    lib.error = fmt::format("{} not found", *names.begin());
    return lib;
  }
  // The handle stays open for the life of the process: the tables point into it.
  std::string missing = resolve(handle, lib.api);
  if (!missing.empty()) {
    lib.error = fmt::format("{} lacks {}", found, missing);
    return lib;
  }
  lib.ok = true;
  return lib;
}

#define PRISM_CUDA_RESOLVE(name)                        \
  if (void* p = dlsym(handle, #name)) {                 \
    api.name = reinterpret_cast<decltype(api.name)>(p); \
  } else if (missing.empty()) {                         \
    missing = #name;                                    \
  }

}  // namespace

const Loaded<DriverApi>& driver_library() {
  static const Loaded<DriverApi> lib =
      load<DriverApi>({"libcuda.so.1", "libcuda.so"}, [](void* handle, DriverApi& api) {
        std::string missing;
        PRISM_CUDA_DRIVER_FUNCTIONS(PRISM_CUDA_RESOLVE)
        return missing;
      });
  return lib;
}

const Loaded<NvrtcApi>& nvrtc_library() {
  static const Loaded<NvrtcApi> lib =
      load<NvrtcApi>({"libnvrtc.so.13", "libnvrtc.so"}, [](void* handle, NvrtcApi& api) {
        std::string missing;
        PRISM_NVRTC_FUNCTIONS(PRISM_CUDA_RESOLVE)
        return missing;
      });
  return lib;
}

const Loaded<CublasLtApi>& cublaslt_library() {
  static const Loaded<CublasLtApi> lib = load<CublasLtApi>(
      {"libcublasLt.so.13", "libcublasLt.so"}, [](void* handle, CublasLtApi& api) {
        std::string missing;
        PRISM_CUBLASLT_FUNCTIONS(PRISM_CUDA_RESOLVE)
        return missing;
      });
  return lib;
}

#ifdef PRISM_CUDA_NCCL
namespace {
Loaded<NcclApi> load_first_nccl(std::initializer_list<const char*> names) {
  return load<NcclApi>(names, [](void* handle, NcclApi& api) {
    std::string missing;
    PRISM_NCCL_FUNCTIONS(PRISM_CUDA_RESOLVE)
    return missing;
  });
}
}  // namespace

Loaded<NcclApi> load_nccl(const char* path) { return load_first_nccl({path}); }

const Loaded<NcclApi>& nccl_library() {
  static const Loaded<NcclApi> lib = [] {
    const char* path = std::getenv("PRISM_NCCL_LIBRARY");
    return path && *path ? load_nccl(path) : load_first_nccl({"libnccl.so.2", "libnccl.so"});
  }();
  return lib;
}
#endif

#undef PRISM_CUDA_RESOLVE

const DriverApi& driver() {
  const auto& lib = driver_library();
  PRISM_CHECK(lib.ok, "cuda: no driver ({})", lib.error);
  return lib.api;
}

const NvrtcApi& nvrtc() {
  const auto& lib = nvrtc_library();
  PRISM_CHECK(lib.ok, "cuda: no NVRTC ({})", lib.error);
  return lib.api;
}

const CublasLtApi& cublaslt() {
  const auto& lib = cublaslt_library();
  PRISM_CHECK(lib.ok, "cuda: no cuBLASLt ({})", lib.error);
  return lib.api;
}

bool env_switch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  return e ? std::string(e) != "0" : fallback;
}

std::string unavailable_reason() {
  static const std::string reason = [] {
    const auto& drv = driver_library();
    if (!drv.ok) return fmt::format("no driver ({})", drv.error);
    if (CUresult r = drv.api.cuInit(0); r != CUDA_SUCCESS) {
      const char* name = nullptr;
      drv.api.cuGetErrorName(r, &name);
      return fmt::format("cuInit failed: {}", name ? name : "unknown error");
    }
    int count = 0;
    if (drv.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      return std::string("no CUDA device");
    }
    if (!nvrtc_library().ok) return fmt::format("no NVRTC ({})", nvrtc_library().error);
    return std::string();  // cuBLASLt is optional: without it products run in our kernels
  }();
  return reason;
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const auto& drv = driver_library();
  if (drv.ok) {
    drv.api.cuGetErrorName(result, &name);
    drv.api.cuGetErrorString(result, &text);
  }
  fail("cuda: {}: {} ({})", what, name ? name : "error " + std::to_string(result),
       text ? text : "no description");
}

void check(nvrtcResult result, const char* what) {
  if (result == NVRTC_SUCCESS) return;
  const auto& lib = nvrtc_library();
  fail("cuda: {}: {}", what,
       lib.ok ? lib.api.nvrtcGetErrorString(result) : "NVRTC error " + std::to_string(result));
}

void check(cublasStatus_t result, const char* what) {
  if (result == CUBLAS_STATUS_SUCCESS) return;
  const auto& lib = cublaslt_library();
  fail(
      "cuda: {}: {}", what,
      lib.ok ? lib.api.cublasLtGetStatusString(result) : "cuBLAS status " + std::to_string(result));
}

}  // namespace prism::cuda
