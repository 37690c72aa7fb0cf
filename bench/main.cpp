// prism-bench [--NAME=VALUE...] [FILTER...]: runs the benchmarks named by a filter, or whose
// name contains one where no benchmark has that exact name (all when none is given), and
// prints one table each; options go to the benchmarks that read them (bench::option), e.g.
// --platform=NAME: dot and elementwise also measure that platform and print its ratio
// against the CPU, llm-shapes, llm-lfm2 and qwen3_5 run on it.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <string>

#include "bench/bench.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism::bench {
std::vector<Benchmark>& registry() {
  static std::vector<Benchmark> all;
  return all;
}

namespace {
std::map<std::string, std::string, std::less<>>& options() {
  static std::map<std::string, std::string, std::less<>> all;
  return all;
}
}  // namespace

std::string option(std::string_view name, std::string_view fallback) {
  auto it = options().find(name);
  return it == options().end() ? std::string(fallback) : it->second;
}

std::string platform_option() { return option("platform", "cpu"); }
Platform& platform() { return get_platform(platform_option()); }

Buffer random_buffer(Platform& p, const Shape& shape) {
  HostBuffer h(shape.with_dtype(DType::f32));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : h.as<float>()) x = u(rng);
  return p.upload(h.convert(shape.dtype()));
}
}  // namespace prism::bench

int main(int argc, char** argv) {
  auto& all = prism::bench::registry();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h") ||
        !std::strcmp(argv[i], "--list")) {
      std::printf(
          "Usage: prism-bench [BENCHMARK...] [--OPTION=VALUE...] (the options each "
          "takes: its source in bench/)\n");
      for (const auto& b : all) std::printf("%-16s %s\n", b.name.c_str(), b.help.c_str());
      return 0;
    }
  }
  std::vector<std::string> filters;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (arg.starts_with("--") && eq != std::string::npos) {
      prism::bench::options()[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr,
                   "prism-bench: error: '%s' is not --OPTION=VALUE (--help lists the "
                   "benchmarks)\n",
                   arg.c_str());
      return 1;
    } else if (std::none_of(all.begin(), all.end(),
                            [&](const auto& b) { return b.name.find(arg) != std::string::npos; })) {
      std::fprintf(stderr,
                   "prism-bench: error: no benchmark is named like '%s' (--help lists "
                   "them)\n",
                   arg.c_str());
      return 1;
    } else {
      filters.push_back(arg);
    }
  }
  // Under mpirun (docs/cluster.md): the model-shaped steps over a mesh of the processes, every
  // process running the same steps; rank 0 prints.
  const std::vector<std::string> across_processes{"llm-shapes", "qwen3_5", "llm-lfm2"};
  prism::Processes* processes = nullptr;
  try {
    processes = prism::Processes::get();
    for (const auto& b : all) {
      bool chosen = filters.empty();
      for (const auto& f : filters) {
        bool exact =
            std::any_of(all.begin(), all.end(), [&](const auto& o) { return o.name == f; });
        chosen = chosen || (exact ? b.name == f : b.name.find(f) != std::string::npos);
      }
      if (!chosen) continue;
      if (processes && std::find(across_processes.begin(), across_processes.end(), b.name) ==
                           across_processes.end()) {
        if (!filters.empty()) {
          prism::fail(
              "{} does not run across the processes of a run (llm-shapes, qwen3_5 and "
              "llm-lfm2 do)",
              b.name);
        }
        continue;
      }
      if (processes && processes->rank() != 0) std::freopen("/dev/null", "w", stdout);
      std::printf("== %s: %s\n", b.name.c_str(), b.help.c_str());
      b.run();
      std::printf("\n");
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-bench: error: %s\n", e.what());
    if (processes) processes->finish(1);
    return 1;
  }
  if (processes) processes->finish(0);
  return 0;
}
