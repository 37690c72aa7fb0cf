// prism-bench [--platform=NAME] [FILTER...]: runs the benchmarks whose name contains one of the
// filters (all when none is given) and prints one table each. With --platform, the dot and
// elementwise benchmarks also measure that platform and print its ratio against the CPU.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace prism::bench {
std::vector<Benchmark>& registry() {
  static std::vector<Benchmark> all;
  return all;
}
std::string& platform_option() {
  static std::string name = "cpu";
  return name;
}
Platform& platform() { return get_platform(platform_option()); }
}  // namespace prism::bench

int main(int argc, char** argv) {
  auto& all = prism::bench::registry();
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "--list"))) {
    for (const auto& b : all) std::printf("%-16s %s\n", b.name.c_str(), b.help.c_str());
    return 0;
  }
  std::vector<std::string> filters;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--platform=", 11)) {
      prism::bench::platform_option() = argv[i] + 11;
    } else {
      filters.push_back(argv[i]);
    }
  }
  try {
    for (const auto& b : all) {
      bool chosen = filters.empty();
      for (const std::string& f : filters) chosen = chosen || b.name.find(f) != std::string::npos;
      if (!chosen) continue;
      std::printf("== %s: %s\n", b.name.c_str(), b.help.c_str());
      b.run();
      std::printf("\n");
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
