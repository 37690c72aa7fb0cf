// prism-bench [FILTER...]: runs the benchmarks whose name contains one of the filters (all
// when none is given) and prints one table each.
#include <cstdio>
#include <cstring>
#include <exception>

#include "bench/bench.h"

namespace prism::bench {
std::vector<Benchmark>& registry() {
  static std::vector<Benchmark> all;
  return all;
}
}  // namespace prism::bench

int main(int argc, char** argv) {
  auto& all = prism::bench::registry();
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "--list"))) {
    for (const auto& b : all) std::printf("%-16s %s\n", b.name.c_str(), b.help.c_str());
    return 0;
  }
  try {
    for (const auto& b : all) {
      bool chosen = argc == 1;
      for (int i = 1; i < argc; ++i) chosen = chosen || b.name.find(argv[i]) != std::string::npos;
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
