// The registry of backends: which platforms this binary knows, whether each is usable here,
// and the platform to run on, chosen at run time by name. It sits above every backend (each
// registers its probe and factory here), so the layers below it never name a backend.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/runtime/compile.h"
#include "prism/runtime/platform.h"

namespace prism {

// The platforms this binary knows, whether each is compiled in and usable on this machine.
std::vector<PlatformStatus> platform_statuses();

// The platform called `name` ("cpu", "opencl", "cuda", "xla-cpu", "pjrt", or "auto": the first
// platform, in the registry's order, with a GPU device, else the CPU). An empty name reads
// PRISM_PLATFORM, then "auto". Platforms are created once and live for the process.
Platform& get_platform(std::string_view name = "");

// Compiles fn on `platform` (the CPU by default) and runs it on host data: a one-call helper
// for tests and experiments, which run the same small programs again and again, so it keeps
// the 256 it used last. Parameters are not allowed (use compile + call).
std::vector<HostBuffer> run(const TraceFn& fn, std::span<const HostBuffer> inputs,
                            Platform* platform = nullptr);
template <typename F>
requires(!std::is_convertible_v<F, TraceFn>) std::vector<HostBuffer> run(
    F&& fn, std::span<const HostBuffer> inputs, Platform* platform = nullptr) {
  return run(detail::to_trace_fn(std::forward<F>(fn), inputs.size()), inputs, platform);
}
template <typename F>
std::vector<HostBuffer> run(F&& fn, std::initializer_list<HostBuffer> inputs,
                            Platform* platform = nullptr) {
  return run(std::forward<F>(fn), std::span<const HostBuffer>(inputs.begin(), inputs.size()),
             platform);
}

}  // namespace prism
