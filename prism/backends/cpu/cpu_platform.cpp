#include "prism/backends/cpu/cpu_platform.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "prism/backends/cpu/kernels.h"
#include "prism/core/error.h"

namespace prism {
namespace cpu {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "host CPU";
}

}  // namespace

std::unique_ptr<ExecutableImpl> make_cpu_executable(CpuPlatform& platform, const ir::Graph& graph,
                                                    const CompileSpec& spec);

CpuPlatform::CpuPlatform() = default;

std::vector<DeviceInfo> CpuPlatform::devices() const {
  int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  return {{fmt::format("{} ({} threads)", cpu_model(), pool_.size()), memory}};
}

Buffer CpuPlatform::allocate(const Shape& shape) {
  auto m = std::make_shared<CpuMemory>();
  m->bytes = static_cast<size_t>(shape.bytes());
  size_t rounded = (std::max<size_t>(m->bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("cpu: out of memory allocating {} for {}", m->bytes, shape.str());
  std::memset(p, 0, rounded);
  m->data = static_cast<std::byte*>(p);
  m->owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return Buffer(shape, std::move(m), this);
}

Buffer CpuPlatform::wrap(const Shape& shape, std::byte* data, std::shared_ptr<void> owner) {
  auto m = std::make_shared<CpuMemory>();
  m->bytes = static_cast<size_t>(shape.bytes());
  m->data = data;
  m->owner = std::move(owner);
  return Buffer(shape, std::move(m), this);
}

Buffer CpuPlatform::upload(const HostBuffer& host) {
  Buffer b = allocate(host.shape());
  if (host.size_bytes()) std::memcpy(data_of(b), host.data(), host.size_bytes());
  return b;
}

void CpuPlatform::write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) {
  auto* m = static_cast<CpuMemory*>(buffer.memory());
  PRISM_CHECK(offset + bytes.size() <= m->bytes, "cpu: write of {} bytes at {} past the end of {}",
              bytes.size(), offset, buffer.shape().str());
  std::memcpy(m->data + offset, bytes.data(), bytes.size());
}

HostBuffer CpuPlatform::download(const Buffer& buffer) {
  auto* m = static_cast<CpuMemory*>(buffer.memory());
  return HostBuffer(buffer.shape(), std::span<const std::byte>(m->data, m->bytes));
}

bool CpuPlatform::supports(const ir::Node& node) const { return cpu_supports(node); }

std::unique_ptr<ExecutableImpl> CpuPlatform::compile(const ir::Graph& graph,
                                                     const CompileSpec& spec) {
  return make_cpu_executable(*this, graph, spec);
}

}  // namespace cpu

std::unique_ptr<Platform> make_cpu_platform() { return std::make_unique<cpu::CpuPlatform>(); }

}  // namespace prism
