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

  const ClApi& api() const { return *api_; }
  cl_command_queue queue() const { return queue_; }
  const DeviceTraits& traits() const { return traits_; }
  // The program built from `source`, built once per process and source text.
  cl_program program(const std::string& source);

 private:
  const ClApi* api_;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  DeviceTraits traits_;
  int64_t memory_bytes_ = 0;
  std::mutex programs_mutex_;
  std::map<std::string, cl_program, std::less<>> programs_;
};

// For the platform registry (prism/backends/registry.cpp).
PlatformStatus probe();

}  // namespace prism::opencl
