// The platforms this binary knows, in the order `auto` considers GPU platforms and `prism info`
// lists them.
#include "prism/backends/registry.h"

#include <fmt/ranges.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>

#include "prism/core/error.h"

namespace prism {

// Each backend contributes a probe (usable here, and why not) and a factory, defined in its
// own folder under prism/backends/.
std::unique_ptr<Platform> make_cpu_platform();
#if PRISM_WITH_CUDA
PlatformStatus cuda_status();
std::unique_ptr<Platform> make_cuda_platform();
#endif
#if PRISM_WITH_OPENCL
PlatformStatus opencl_status();
std::unique_ptr<Platform> make_opencl_platform();
#endif
#if PRISM_WITH_PJRT
namespace pjrt {
PlatformStatus probe(const std::string& name);
std::unique_ptr<Platform> make_platform(const std::string& name);
}  // namespace pjrt
#endif

namespace {

struct Backend {
  std::string name;
  std::function<PlatformStatus()> probe;
  std::function<std::unique_ptr<Platform>()> make;  // null when not compiled in
};

// Unused when every backend is compiled in.
[[maybe_unused]] Backend not_compiled_in(const std::string& name, const std::string& option) {
  return {name,
          [=] {
            return PlatformStatus{name, false, false,
                                  fmt::format("not compiled in (build with -D{}=ON)", option)};
          },
          nullptr};
}

#if PRISM_WITH_PJRT
Backend pjrt_backend(const std::string& name) {
  return {name, [name] { return pjrt::probe(name); }, [name] { return pjrt::make_platform(name); }};
}
#endif

// The registry, in the order `auto` considers GPU platforms and `prism info` lists them.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
    {"cpu",
     [] {
       return PlatformStatus{"cpu", true, true, "", false};
     },
     make_cpu_platform},
#if PRISM_WITH_CUDA
    {"cuda", cuda_status, make_cuda_platform},
#else
    not_compiled_in("cuda", "PRISM_WITH_CUDA"),
#endif
#if PRISM_WITH_OPENCL
    {"opencl", opencl_status, make_opencl_platform},
#else
    not_compiled_in("opencl", "PRISM_WITH_OPENCL"),
#endif
#if PRISM_WITH_PJRT
    // PJRT plugins: the shortcuts find their vendor package's plugin; pjrt takes any plugin
    // named by PRISM_PJRT_PLUGIN.
    pjrt_backend("xla-cpu"),
    pjrt_backend("xla-cuda"),
    pjrt_backend("tpu"),
    pjrt_backend("neuron"),
    pjrt_backend("rocm"),
    pjrt_backend("oneapi"),
    pjrt_backend("pjrt"),
#else
    not_compiled_in("xla-cpu", "PRISM_WITH_PJRT"),
    not_compiled_in("xla-cuda", "PRISM_WITH_PJRT"),
    not_compiled_in("tpu", "PRISM_WITH_PJRT"),
    not_compiled_in("neuron", "PRISM_WITH_PJRT"),
    not_compiled_in("rocm", "PRISM_WITH_PJRT"),
    not_compiled_in("oneapi", "PRISM_WITH_PJRT"),
    not_compiled_in("pjrt", "PRISM_WITH_PJRT"),
#endif
  };
  return all;
}

// Backend `index`'s probe. Probing loads drivers: once per process, whether `auto`, `prism
// info` or a platform named asks first.
const PlatformStatus& probed(size_t index) {
  static std::mutex mutex;
  static auto& done = *new std::map<size_t, PlatformStatus>;  // (references stay valid)
  std::lock_guard lock(mutex);
  auto it = done.find(index);
  if (it == done.end()) it = done.emplace(index, backends()[index].probe()).first;
  return it->second;
}

}  // namespace

std::vector<PlatformStatus> platform_statuses() {
  std::vector<PlatformStatus> all;
  for (size_t i = 0; i < backends().size(); ++i) all.push_back(probed(i));
  return all;
}

Platform& get_platform(std::string_view name) {
  std::string chosen(name);
  if (chosen.empty()) {
    const char* env = std::getenv("PRISM_PLATFORM");
    chosen = env && *env ? env : "auto";
  }
  // auto probes every platform (the first with a GPU wins); a platform named is the only one
  // probed, so that choosing the CPU loads no OpenCL driver (PoCL's costs 25-60 ms a start).
  if (chosen == "auto") {
    chosen = "cpu";
    for (const PlatformStatus& s : platform_statuses()) {
      if (s.available && s.has_gpu) {
        chosen = s.name;
        break;
      }
    }
  }
  static std::mutex mutex;
  // Platforms are never destroyed: device drivers tear themselves down at exit, in an order
  // that static destructors cannot follow.
  static auto& platforms = *new std::map<std::string, std::unique_ptr<Platform>, std::less<>>;
  std::lock_guard lock(mutex);
  auto it = platforms.find(chosen);
  if (it != platforms.end()) return *it->second;
  for (size_t i = 0; i < backends().size(); ++i) {
    const Backend& b = backends()[i];
    if (b.name != chosen) continue;
    const PlatformStatus& status = probed(i);
    if (!status.available) fail("platform {} is not available: {}", chosen, status.reason);
    return *platforms.emplace(chosen, b.make()).first->second;
  }
  std::vector<std::string> names;
  for (const Backend& b : backends()) names.push_back(b.name);
  fail("unknown platform '{}' (expected {} or auto)", chosen, fmt::join(names, ", "));
}

std::vector<HostBuffer> run(const TraceFn& fn, std::span<const HostBuffer> inputs,
                            Platform* platform) {
  std::vector<Shape> shapes;
  for (const HostBuffer& h : inputs) shapes.push_back(h.shape());
  Platform& p = platform ? *platform : get_platform("cpu");
  // Never destroyed: its programs may hold a platform's memory, and platforms live until exit.
  static CompileCache& recent = *new CompileCache(256);
  Executable exe = compile(p, fn, shapes, {.cache = &recent});
  PRISM_CHECK(exe.parameters().empty(), "run: the function uses parameters (\"{}\"); use compile",
              exe.parameters().front().name);
  std::vector<Buffer> in;
  for (const HostBuffer& h : inputs) in.push_back(p.upload(h));
  std::vector<HostBuffer> out;
  for (const Buffer& b : exe.call(std::span<const Buffer>{}, in)) out.push_back(b.to_host());
  return out;
}

}  // namespace prism
