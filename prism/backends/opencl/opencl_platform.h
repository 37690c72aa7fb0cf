// The OpenCL platform: one device (the first GPU, else the first device of the first
// platform; PRISM_OPENCL_DEVICE=<n> picks another), one in-order queue, buffers as cl_mem,
// executables as generated OpenCL C (see codegen.h) compiled when the executable is compiled.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prism/backends/opencl/cl_api.h"
#include "prism/backends/opencl/codegen.h"
#include "prism/runtime/collectives.h"
#include "prism/runtime/platform.h"

namespace prism::opencl {

struct ClMemory : DeviceMemory {
  cl_mem mem = nullptr;
  size_t bytes = 0;
  ~ClMemory() override;
};

inline cl_mem mem_of(const Buffer& b) { return static_cast<ClMemory*>(b.memory())->mem; }

class OpenClPlatform : public Platform {
 public:
  OpenClPlatform();
  ~OpenClPlatform() override;
  OpenClPlatform(const OpenClPlatform&) = delete;
  OpenClPlatform& operator=(const OpenClPlatform&) = delete;

  std::string_view name() const override { return "opencl"; }
  std::vector<DeviceInfo> devices() const override;
  Buffer allocate(const Shape& shape) override;
  Buffer allocate_for_write(const Shape& shape) override;
  Buffer upload(const HostBuffer& host) override;
  void write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) override;
  HostBuffer download(const Buffer& buffer) override;
  void synchronize() override;
  bool supports(const ir::Node& node) const override;
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& graph, const CompileSpec& spec) override;

  // A mesh is the devices of the chosen device's OpenCL platform (PRISM_OPENCL_DEVICES=N
  // presents the chosen device as N, to try a mesh on one device), each with its own context
  // and queue; collectives go through host memory.
  int64_t mesh_capacity() const override;
  std::vector<Platform*> mesh_devices(const Mesh& mesh) override;
  void abort_collectives() override;
  void reset_collectives() override;
  // Where this platform is a device of a mesh: the communicator and its index; else null, 0.
  Communicator* communicator() const { return comm_.get(); }
  int64_t mesh_device() const { return mesh_device_; }
  int64_t mesh_index() const override { return mesh_device_; }

  const ClApi& api() const { return *api_; }
  cl_command_queue queue() const { return queue_; }
  const DeviceTraits& traits() const { return traits_; }
  // The program built from `source`, built once per process and source text.
  cl_program program(const std::string& source);

 private:
  // Device `index` of a mesh on `device` of OpenCL platform `platform`.
  OpenClPlatform(cl_platform_id platform, cl_device_id device, std::shared_ptr<Communicator> comm,
                 int64_t index);
  void open(cl_platform_id platform, cl_device_id device);

  const ClApi* api_;
  cl_platform_id cl_platform_ = nullptr;
  cl_device_id device_ = nullptr;
  std::shared_ptr<Communicator> comm_;
  int64_t mesh_device_ = 0;
  MeshDevices meshes_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  DeviceTraits traits_;
  std::mutex programs_mutex_;
  std::map<std::string, cl_program, std::less<>> programs_;
};

// For the platform registry (prism/backends/registry.cpp).
PlatformStatus probe();

}  // namespace prism::opencl
