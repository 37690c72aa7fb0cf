// The CUDA platform: device 0 of the machine, its primary context, one stream, device memory
// with a cache of freed blocks, and the cuBLASLt handle and workspace matrix products share.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/runtime/platform.h"

namespace prism::cuda {

// Freed device blocks kept for reuse: cuMemAlloc/cuMemFree are slow and synchronize.
class BlockCache {
 public:
  ~BlockCache();
  CUdeviceptr get(size_t bytes);
  void put(CUdeviceptr p, size_t bytes);
  void release();  // frees every cached block (on out-of-memory, before a retry)

 private:
  std::mutex mutex_;
  std::multimap<size_t, CUdeviceptr> free_;
};

struct CudaMemory : DeviceMemory {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  std::shared_ptr<BlockCache> cache;
  ~CudaMemory() override;
};

inline CUdeviceptr device_ptr(const Buffer& b) { return static_cast<CudaMemory*>(b.memory())->ptr; }

class CudaPlatform : public Platform {
 public:
  CudaPlatform();
  ~CudaPlatform() override;

  std::string_view name() const override { return "cuda"; }
  std::vector<DeviceInfo> devices() const override;
  Buffer allocate(const Shape& shape) override;
  Buffer allocate_for_write(const Shape& shape) override;
  Buffer upload(const HostBuffer& host) override;
  void write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) override;
  HostBuffer download(const Buffer& buffer) override;
  bool supports(const ir::Node& node) const override;
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& graph, const CompileSpec& spec) override;

  // Makes the platform's context current on the calling thread (the driver keeps one per
  // thread); every entry point calls it first.
  void bind() const;
  CUstream stream() const { return stream_; }
  // Null without cuBLASLt (then matrix products run in generated kernels).
  cublasLtHandle_t cublaslt_handle() const { return lt_handle_; }
  CUdeviceptr workspace() const { return workspace_; }
  static constexpr size_t kWorkspaceBytes = 32 << 20;
  const std::string& arch() const { return arch_; }

  // Device memory of `bytes` (rounded up to 256), from the cache when it can.
  std::shared_ptr<CudaMemory> raw_allocate(size_t bytes);

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  std::string arch_;
  DeviceInfo info_;
  std::shared_ptr<BlockCache> blocks_ = std::make_shared<BlockCache>();
};

// A device's nominal limits from its specification (for benchmarks' ratios): memory
// bandwidth, FP32 and dense bf16 FLOP/s.
DeviceInfo nominal_limits(int major, int minor, int sms, int clock_khz, int memory_clock_khz,
                          int bus_bits);

std::unique_ptr<ExecutableImpl> make_cuda_executable(CudaPlatform& platform, const ir::Graph& graph,
                                                     const CompileSpec& spec);

}  // namespace prism::cuda
