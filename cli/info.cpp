// `prism info`: the platforms compiled into this binary, which are usable here and why not,
// and their devices.
#include <cstdio>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/runtime/platform.h"

namespace {

int run_info() {
  std::printf("prism %s\n\nplatforms:\n", PRISM_VERSION);
  for (const prism::PlatformStatus& s : prism::platform_statuses()) {
    if (!s.available) {
      std::printf("  %-8s unavailable: %s\n", s.name.c_str(), s.reason.c_str());
      continue;
    }
    const int64_t mesh = prism::get_platform(s.name).mesh_capacity();
    std::printf("  %-8s available, a mesh of up to %lld device%s\n", s.name.c_str(),
                static_cast<long long>(mesh), mesh == 1 ? "" : "s");
    for (const prism::DeviceInfo& d : prism::get_platform(s.name).devices()) {
      if (d.memory_bytes > 0) {
        std::printf("    - %s, %.1f GiB\n", d.name.c_str(),
                    static_cast<double>(d.memory_bytes) / (1ull << 30));
      } else {
        std::printf("    - %s, memory unknown\n", d.name.c_str());
      }
    }
  }
  return 0;
}

const prism::cli::RegisterCommand kInfo{
    "info", "Show the platforms compiled in, which are available here, and their devices",
    [](CLI::App&) -> prism::cli::Action { return run_info; }};

}  // namespace
