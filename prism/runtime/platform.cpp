#include "prism/runtime/platform.h"

#include <cstdlib>

#include "prism/core/error.h"

namespace prism {

// Each backend provides a factory; the CPU is always built.
std::unique_ptr<Platform> make_cpu_platform();
#if PRISM_WITH_CUDA
std::unique_ptr<Platform> make_cuda_platform();
namespace cuda {
std::string unavailable_reason();
}
#endif

HostBuffer Buffer::to_host() const {
  PRISM_CHECK(valid(), "buffer: empty buffer has no data");
  return platform_->download(*this);
}

std::vector<PlatformStatus> platform_statuses() {
  std::vector<PlatformStatus> all;
  all.push_back({"cpu", true, true, ""});
  all.push_back({"opencl", false, false, "not compiled in (build with -DPRISM_WITH_OPENCL=ON)"});
#if PRISM_WITH_CUDA
  std::string cuda_reason = cuda::unavailable_reason();
  all.push_back({"cuda", true, cuda_reason.empty(), cuda_reason});
#else
  all.push_back({"cuda", false, false, "not compiled in (build with -DPRISM_WITH_CUDA=ON)"});
#endif
  all.push_back({"pjrt", false, false, "not compiled in (build with -DPRISM_WITH_PJRT=ON)"});
  return all;
}

Platform& get_platform(std::string_view name) {
  std::string chosen(name);
  if (chosen.empty()) {
    const char* env = std::getenv("PRISM_PLATFORM");
    chosen = env && *env ? env : "auto";
  }
  if (chosen == "auto") {
    chosen = "cpu";
#if PRISM_WITH_CUDA
    if (cuda::unavailable_reason().empty()) chosen = "cuda";
#endif
  }
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Platform>, std::less<>> platforms;
  std::lock_guard lock(mutex);
  auto it = platforms.find(chosen);
  if (it != platforms.end()) return *it->second;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name != chosen) continue;
    if (!s.available) fail("platform {} is not available: {}", chosen, s.reason);
    std::unique_ptr<Platform> p;
    if (chosen == "cpu") p = make_cpu_platform();
#if PRISM_WITH_CUDA
    if (chosen == "cuda") p = make_cuda_platform();
#endif
    return *platforms.emplace(chosen, std::move(p)).first->second;
  }
  fail("unknown platform '{}' (expected cpu, opencl, cuda, pjrt:<plugin.so> or auto)", chosen);
}

}  // namespace prism
