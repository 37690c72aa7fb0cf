// Devices of prism's platforms as prism sees them (smi.h): what a platform's own API tells
// without a vendor monitoring library, read once: the name and the memory in all. Where the
// platform's probe lists its devices (OpenCL), the platform is not opened: an OpenCL context
// on a GPU takes memory there and would list the monitor among the GPU's processes.
#include "prism/backends/registry.h"
#include "prism/runtime/platform.h"
#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

class PlatformSource final : public Source {
 public:
  explicit PlatformSource(const PlatformStatus& status) : platform_(status.name) {
    const std::vector<DeviceInfo> infos =
        status.devices.empty() ? get_platform(platform_).devices() : status.devices;
    for (size_t i = 0; i < infos.size(); ++i) {
      Device d;
      d.source = platform_;
      d.index = static_cast<int>(i);
      d.name = infos[i].name;
      if (infos[i].memory_bytes > 0) d.memory_total = static_cast<uint64_t>(infos[i].memory_bytes);
      devices_.push_back(std::move(d));
    }
  }
  std::string name() const override { return platform_; }
  std::vector<Device> sample() override { return devices_; }

 private:
  std::string platform_;
  std::vector<Device> devices_;
};

}  // namespace

std::vector<std::unique_ptr<Source>> platform_sources(bool cuda, std::vector<std::string>* absent) {
  std::vector<std::unique_ptr<Source>> sources;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name != "opencl" && (s.name != "cuda" || !cuda)) continue;
    if (!s.available) {
      if (absent) absent->push_back(s.name + ": " + s.reason);
      continue;
    }
    sources.push_back(std::make_unique<PlatformSource>(s));
  }
  return sources;
}

}  // namespace prism::smi
