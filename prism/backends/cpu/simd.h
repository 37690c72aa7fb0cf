// Which SIMD code the CPU kernels run. Their hot loops are compiled once per instruction set
// (hwy_targets.h) and the best one this CPU runs is chosen once, at start-up, so that a
// portable binary still uses AVX-512 where the CPU has it. bf16 x bf16 dot products have one
// more level, AVX-512 BF16 (vdpbf16ps), which Highway 1.0.3 cannot express: it is compiled
// with a function target attribute and chosen by a CPU feature check.
//
// PRISM_CPU_TARGET=<name> (a name from available(), e.g. avx2) forces a lower level, for
// comparisons and tests; a name this binary or CPU does not have is an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prism::cpu::simd {

struct Target {
  int64_t hwy = 0;           // one of Highway's HWY_* target bits
  bool avx512_bf16 = false;  // bf16 x bf16 dot products with vdpbf16ps
  // The spelling PRISM_CPU_TARGET takes: "avx3_dl+bf16", "avx2", "scalar".
  std::string name() const;
  // For people: "AVX3_DL + avx512_bf16".
  std::string describe() const;
  bool operator==(const Target&) const = default;
};

// The targets this binary has code for and this CPU runs, best first.
std::vector<Target> available();

// The target in use: the best one, or PRISM_CPU_TARGET's (read on the first call; a bad value
// throws prism::Error).
Target current();

// Makes the kernels run `target` from now on (one of available()). Not to be called while
// kernels run on other threads: for start-up and tests.
void use(const Target& target);

// The target called `name` (case-insensitive) among available(), or a prism::Error that lists
// them.
Target parse(std::string_view name);

}  // namespace prism::cpu::simd
