// The CPU platform: host memory, one thread pool, kernels over a preplanned arena.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/runtime/collectives.h"
#include "prism/runtime/platform.h"

namespace prism::cpu {

// Host memory owned by `owner` (an allocation, or a mapped file for zero-copy loads, which
// is not `writable`: its weights stay in the layout they were stored in).
struct CpuMemory : DeviceMemory {
  std::byte* data = nullptr;
  size_t bytes = 0;
  bool writable = true;
  // Weights in a layout of weight_layout.h (bf16 blocks, interleaved quantized rows), from
  // Executable::prepare; set before the buffer is handed out and never changed.
  WeightLayout layout = WeightLayout::stored;
  std::shared_ptr<const void> owner;
};

inline WeightLayout layout_of(const Buffer& b) {
  return b.valid() ? static_cast<const CpuMemory*>(b.memory())->layout : WeightLayout::stored;
}
inline bool blocked_memory(const Buffer& b) { return layout_of(b) != WeightLayout::stored; }

inline std::byte* data_of(const Buffer& b) { return static_cast<CpuMemory*>(b.memory())->data; }

class CpuPlatform : public Platform {
 public:
  CpuPlatform();
  // Device `device` of a mesh: its own threads, one per CPU of `cpus` (their workers kept on
  // them), its memory on NUMA node `node` (-1: wherever it is first touched), collectives
  // through `comm`.
  CpuPlatform(std::vector<int> cpus, int node, std::shared_ptr<Communicator> comm, int64_t device);
  std::string_view name() const override { return "cpu"; }
  bool compiles_quickly() const override { return true; }
  std::vector<DeviceInfo> devices() const override;
  Buffer allocate(const Shape& shape) override;
  Buffer upload(const HostBuffer& host) override;
  void write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) override;
  HostBuffer download(const Buffer& buffer) override;
  std::optional<Buffer> adopt_host(const Shape& shape, const std::byte* data,
                                   std::shared_ptr<const void> owner) override;
  bool supports(const ir::Node& node) const override;
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& graph, const CompileSpec& spec) override;

  // Like allocate, without zero-filling: for buffers a kernel overwrites whole.
  Buffer allocate_uninitialized(const Shape& shape);
  Buffer allocate_for_write(const Shape& shape) override { return allocate_uninitialized(shape); }
  ThreadPool& pool() { return pool_; }

  // The CPU as a mesh: one device per core (PRISM_CPU_DEVICES sets another count, for trying
  // meshes on a machine with fewer cores), each a set of cores (topology.h: a NUMA node's
  // where the mesh has one device per node) with a thread on each. In a run of several
  // processes (processes.h) the devices are shared out over them, as many each:
  // mesh_devices() gives this process's, its cores shared out over them, their collectives
  // with the other processes' devices through MPI.
  int64_t mesh_capacity() const override;
  std::vector<Platform*> mesh_devices(const Mesh& mesh) override;
  void abort_collectives() override;
  void reset_collectives() override;
  // Where this platform is a device of a mesh: the communicator and its index; else null, 0.
  Communicator* communicator() const { return comm_.get(); }
  int64_t mesh_device() const { return device_; }
  int64_t mesh_index() const override { return device_; }
  // The NUMA node a mesh device's memory is placed on, or -1.
  int numa_node() const { return node_; }

 private:
  class BlockCache;
  std::shared_ptr<BlockCache> blocks_;  // shared with the buffers it handed out
  ThreadPool pool_;
  std::shared_ptr<Communicator> comm_;
  int64_t device_ = 0;
  std::vector<int> cpus_;  // a mesh device's CPUs
  int node_ = -1;          // and the NUMA node holding them all, or -1
  MeshDevices meshes_;     // in this process, or this process's block of one across processes
};

}  // namespace prism::cpu
