// `prism info`: the platforms compiled into this binary, which are usable here and why not,
// and their devices.
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/core/mesh.h"
#include "prism/runtime/platform.h"

namespace {

void print_device(const prism::DeviceInfo& d) {
  if (d.memory_bytes > 0) {
    std::printf("    - %s, %.1f GiB\n", d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1ull << 30));
  } else {
    std::printf("    - %s, memory unknown\n", d.name.c_str());
  }
}

// With `mesh_devices` > 1, each platform offering that many shows the devices of such a mesh
// instead of its own: on the CPU, each device's CPUs and the NUMA node holding its memory.
int run_info(int64_t mesh_devices) {
  std::printf("prism %s\n\nplatforms:\n", PRISM_VERSION);
  for (const prism::PlatformStatus& s : prism::platform_statuses()) {
    if (!s.available) {
      std::printf("  %-8s unavailable: %s\n", s.name.c_str(), s.reason.c_str());
      continue;
    }
    prism::Platform& platform = prism::get_platform(s.name);
    const int64_t mesh = platform.mesh_capacity();
    std::printf("  %-8s available, a mesh of up to %lld device%s\n", s.name.c_str(),
                static_cast<long long>(mesh), mesh == 1 ? "" : "s");
    if (mesh_devices <= 1) {
      for (const prism::DeviceInfo& d : platform.devices()) print_device(d);
      continue;
    }
    if (mesh_devices > mesh) continue;
    const prism::Mesh split({{"model", mesh_devices}});
    for (prism::Platform* device : platform.mesh_devices(split)) {
      for (const prism::DeviceInfo& d : device->devices()) print_device(d);
    }
  }
  return 0;
}

const prism::cli::RegisterCommand kInfo{
    "info", "Show the platforms compiled in, which are available here, and their devices",
    [](CLI::App& app) -> prism::cli::Action {
      auto devices = std::make_shared<int64_t>(1);
      app.add_option("--devices", *devices,
                     "show the devices of a mesh of this many on each platform offering it")
          ->check(CLI::PositiveNumber);
      return [devices] { return run_info(*devices); };
    }};

}  // namespace
