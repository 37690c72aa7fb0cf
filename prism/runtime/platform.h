// Platforms, buffers and executables: the runtime side of prism. A Platform is one backend
// instance (the CPU, an OpenCL device, a CUDA GPU, a PJRT plugin), chosen at run time by name.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/host_buffer.h"
#include "prism/core/mesh.h"
#include "prism/core/shape.h"
#include "prism/ir/graph.h"

namespace prism {

class Platform;

// Bytes on a device. Backends derive from it; Buffer holds it by shared ownership.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
};

class Buffer {
 public:
  Buffer() = default;
  Buffer(Shape shape, std::shared_ptr<DeviceMemory> memory, Platform* platform)
      : shape_(shape), memory_(std::move(memory)), platform_(platform) {}

  bool valid() const { return memory_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DeviceMemory* memory() const { return memory_.get(); }
  const std::shared_ptr<DeviceMemory>& shared_memory() const { return memory_; }
  Platform& platform() const { return *platform_; }
  HostBuffer to_host() const;

 private:
  Shape shape_;
  std::shared_ptr<DeviceMemory> memory_;
  Platform* platform_ = nullptr;
};

struct DeviceInfo {
  std::string name;
  int64_t memory_bytes = 0;
  // Nominal limits from the device's specification, 0 where unknown: what benchmarks quote
  // ratios against where they cannot measure the limit themselves (a GPU).
  double memory_gbps = 0;
  double fp32_gflops = 0;
  double bf16_gflops = 0;  // dense, on matrix units where the device has them
};

// What a compiled program does with its arguments, as the compile pipeline passes it down.
struct CompileSpec {
  std::vector<int> donated_inputs;  // inputs whose memory may be reused for outputs
};

// A backend's compiled program.
class ExecutableImpl {
 public:
  ExecutableImpl() { live_.fetch_add(1, std::memory_order_relaxed); }
  ExecutableImpl(const ExecutableImpl&) = delete;
  ExecutableImpl& operator=(const ExecutableImpl&) = delete;
  virtual ~ExecutableImpl() { live_.fetch_sub(1, std::memory_order_relaxed); }
  // How many compiled programs exist in this process: each holds its working memory, so the
  // tests check with it that whoever owns executables frees them.
  static size_t live() { return live_.load(std::memory_order_relaxed); }

  // `params` in the order of Graph::parameters(), `inputs` by position.
  virtual std::vector<Buffer> call(std::span<const Buffer> params,
                                   std::span<const Buffer> inputs) = 0;
  // `params` in the layout call() reads fastest: each the buffer given, or one laid out anew,
  // which the caller uses from then on. A buffer that someone else also holds is not changed
  // (a copy is laid out); one held only by `params` may be laid out in place.
  virtual std::vector<Buffer> prepare(std::vector<Buffer> params) { return params; }

 private:
  static inline std::atomic<size_t> live_{0};
};

// How a program over whole tensors is split across a mesh, for a platform whose compiler
// splits programs itself (Platform::compile_for_mesh): per dim of each parameter (in
// Graph::parameters() order), input and output, the mesh axis it is split over, or -1.
struct MeshSpec {
  Mesh mesh;
  std::vector<std::vector<int>> parameters, inputs, outputs;
  std::vector<int> donated_inputs;
};

// A program compiled once for every device of a mesh.
class MeshExecutableImpl {
 public:
  virtual ~MeshExecutableImpl() = default;
  // Per device (in Platform::mesh_devices order): its shards of the parameters (in
  // Graph::parameters() order) and inputs; returns each device's shards of the outputs.
  virtual std::vector<std::vector<Buffer>> call(std::span<const std::vector<Buffer>> params,
                                                std::span<const std::vector<Buffer>> inputs) = 0;
};

class Platform {
 public:
  virtual ~Platform() = default;
  virtual std::string_view name() const = 0;
  virtual std::vector<DeviceInfo> devices() const = 0;

  virtual Buffer allocate(const Shape& shape) = 0;  // zero-filled
  // For a buffer the caller overwrites whole: may skip the zero fill.
  virtual Buffer allocate_for_write(const Shape& shape) { return allocate(shape); }
  virtual Buffer upload(const HostBuffer& host) = 0;
  // Copies `bytes` into `buffer` at byte `offset` (streaming loads write in chunks).
  virtual void write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) = 0;
  // Whether write() may change a buffer after it was made. Where it may not (PJRT's buffers
  // are immutable), a buffer's bytes are given whole to upload(): the loader stages each
  // tensor in host memory first, and nothing else writes into device buffers from outside.
  virtual bool writes_in_place() const { return true; }
  virtual HostBuffer download(const Buffer& buffer) = 0;
  // Waits until the work handed to the platform has finished (calls may return before their
  // results are computed on devices with queues; downloads wait by themselves).
  virtual void synchronize() {}
  // A buffer over host memory that `owner` keeps alive, without copying, where the platform
  // computes on host memory (the CPU); nullopt elsewhere. Loads from mapped files use it.
  virtual std::optional<Buffer> adopt_host(const Shape& shape, const std::byte* data,
                                           std::shared_ptr<const void> owner) {
    return std::nullopt;
  }
  // Whether compiling a program takes milliseconds (the CPU's own backend) rather than the
  // seconds a GPU compiler or XLA may take: callers then compile a program for each of many
  // input sizes rather than pad inputs up to a few (the LLM engine's prefill windows).
  virtual bool compiles_quickly() const { return false; }

  // How many devices this platform offers a mesh (`prism info` shows it).
  virtual int64_t mesh_capacity() const { return 1; }
  // The platform as the devices of `mesh`: one Platform per device, device k computing the
  // mesh's k-th shard and meeting the others in collectives. Kept by this platform (the same
  // mesh gives the same devices); a mesh of one device is this platform. Throws when the mesh
  // has more devices than the platform offers.
  virtual std::vector<Platform*> mesh_devices(const Mesh& mesh);
  // Where this platform is one of the devices mesh_devices() gave, its index in the mesh (in
  // a run of several processes, the devices a process holds are one block of the mesh's).
  virtual int64_t mesh_index() const { return 0; }
  // One device of a mesh failed during a call: wakes the others waiting for it in a collective
  // with an error instead of leaving them waiting. reset_collectives() readies the mesh for the
  // next call once every device has returned.
  virtual void abort_collectives() {}
  virtual void reset_collectives() {}
  // Where the platform's compiler splits programs itself (PJRT: the plugin's SPMD
  // partitioner), `graph` over whole tensors compiled once for the mesh as `spec` splits it;
  // null where the platform runs prism's partitioned graph on each device (the default).
  virtual std::unique_ptr<MeshExecutableImpl> compile_for_mesh(const ir::Graph& graph,
                                                               const MeshSpec& spec) {
    return nullptr;
  }

  // Whether the backend runs this composite node as it is; the compiler decomposes the others.
  virtual bool supports(const ir::Node& node) const = 0;
  virtual std::unique_ptr<ExecutableImpl> compile(const ir::Graph& graph,
                                                  const CompileSpec& spec) = 0;
};

// Whether a platform is compiled in and usable on this machine (backends/registry.h lists them).
struct PlatformStatus {
  std::string name;
  bool compiled_in = false;
  bool available = false;
  std::string reason;    // why not available
  bool has_gpu = false;  // a GPU among its devices: `auto` prefers such a platform
  // The devices the platform opens by default, where its probe can tell without opening it
  // (OpenCL: creating a context takes memory on a GPU); empty where only the platform can.
  std::vector<DeviceInfo> devices;
};

}  // namespace prism
