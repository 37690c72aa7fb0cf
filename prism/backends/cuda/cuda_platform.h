// The CUDA platform: device 0 of the machine, its primary context, one stream, device memory
// with a cache of freed blocks, and the cuBLASLt handle and workspace matrix products share.
// A mesh is the machine's GPUs, each a CudaPlatform of its own; their collectives run through
// NCCL where it is (nccl.h), else through host memory.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/backends/cuda/nccl.h"
#include "prism/runtime/collectives.h"
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
  CudaPlatform(const CudaPlatform&) = delete;
  CudaPlatform& operator=(const CudaPlatform&) = delete;

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

  // A mesh is the machine's GPUs in order (PRISM_CUDA_DEVICES=N presents GPU 0 as N, each
  // with its own stream, to try a mesh on one GPU); collectives through NCCL where the mesh's
  // devices are distinct GPUs and libnccl.so.2 loads (PRISM_CUDA_NCCL=0 declines it), else
  // through host memory. In a run of several processes (docs/cluster.md), each holds its
  // block of the mesh's devices on GPUs of its host, and the collectives cross processes
  // through NCCL or, where some process cannot take it, MPI.
  int64_t mesh_capacity() const override;
  std::vector<Platform*> mesh_devices(const Mesh& mesh) override;
  void abort_collectives() override;
  void reset_collectives() override;
  int64_t mesh_index() const override { return mesh_device_; }
  // Where this platform is a device of a mesh: its index, the host communicator and the NCCL
  // communicators (null where the collectives go through host memory); else 0, null, null.
  int64_t mesh_device() const { return mesh_device_; }
  Communicator* communicator() const { return comm_.get(); }
  NcclMesh* nccl() const { return nccl_.get(); }

 private:
  // Device `index` of a mesh, on GPU `ordinal`; `collectives` says how they run.
  CudaPlatform(int ordinal, std::shared_ptr<Communicator> comm, std::shared_ptr<NcclMesh> nccl,
               int64_t index, std::string_view collectives);
  void open(int ordinal);
  static int gpu_count();  // as the driver counts them (CUDA_VISIBLE_DEVICES), at least 1
  std::vector<Platform*> process_mesh_devices(const Mesh& mesh, Processes& processes);

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  std::string arch_;
  DeviceInfo info_;
  std::shared_ptr<BlockCache> blocks_ = std::make_shared<BlockCache>();
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<NcclMesh> nccl_;
  int64_t mesh_device_ = 0;
  MeshDevices meshes_;  // in this process, or this process's block of one across processes
};

// A device's nominal limits from its specification (for benchmarks' ratios): memory
// bandwidth, FP32 and dense bf16 FLOP/s.
DeviceInfo nominal_limits(int major, int minor, int sms, int clock_khz, int memory_clock_khz,
                          int bus_bits);

std::unique_ptr<ExecutableImpl> make_cuda_executable(CudaPlatform& platform, const ir::Graph& graph,
                                                     const CompileSpec& spec);

}  // namespace prism::cuda
