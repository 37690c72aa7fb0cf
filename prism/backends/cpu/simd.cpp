#include "prism/backends/cpu/simd.h"

#include "prism/backends/cpu/hwy_targets.h"
// Highway after its configuration.
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "prism/core/error.h"

namespace prism::cpu::simd {
namespace {

bool cpu_has_avx512_bf16() {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// The Highway targets the CPU runs, without any forcing.
int64_t cpu_targets() {
  static const int64_t targets = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedTargets();
  }();
  return targets;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The target in use, as two atomics so that kernels can read it while nobody writes it.
struct State {
  std::atomic<int64_t> hwy{0};
  std::atomic<bool> bf16{false};
};

void apply(State& state, const Target& t) {
  // Highway's dispatch tables take the best target among those it is told the CPU supports:
  // hiding the better ones makes it take `t`.
  hwy::SetSupportedTargetsForTest(cpu_targets() & ~(t.hwy - 1));
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  state.hwy = t.hwy;
  state.bf16 = t.avx512_bf16;
}

State& state() {
  static State s;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<Target> all = available();
    PRISM_CHECK(!all.empty(),
                "cpu: this binary was built for {} and this CPU lacks it (build with "
                "-DPRISM_NATIVE=OFF for a binary that runs anywhere)",
                hwy::TargetName(HWY_STATIC_TARGET));
    const char* forced = std::getenv("PRISM_CPU_TARGET");
    apply(s, forced && *forced ? parse(forced) : all.front());
  });
  return s;
}

}  // namespace

std::string Target::name() const {
  return lower(hwy::TargetName(hwy)) + (avx512_bf16 ? "+bf16" : "");
}

std::string Target::describe() const {
  return std::string(hwy::TargetName(hwy)) + (avx512_bf16 ? " + avx512_bf16" : "");
}

std::vector<Target> available() {
  std::vector<Target> targets;
  bool bf16 = cpu_has_avx512_bf16();
  for (int64_t left = cpu_targets() & HWY_TARGETS; left != 0; left &= left - 1) {
    int64_t t = left & -left;  // lower bits are better targets
#if HWY_ARCH_X86
    if (bf16 && (t == HWY_AVX3 || t == HWY_AVX3_DL)) targets.push_back({t, true});
#endif
    targets.push_back({t, false});
  }
  return targets;
}

Target current() {
  State& s = state();
  return {s.hwy.load(std::memory_order_relaxed), s.bf16.load(std::memory_order_relaxed)};
}

void use(const Target& target) {
  auto all = available();
  PRISM_CHECK(std::find(all.begin(), all.end(), target) != all.end(),
              "cpu: SIMD target {} is not available here", target.name());
  apply(state(), target);
}

Target parse(std::string_view name) {
  std::vector<Target> all = available();
  std::string names;
  for (const Target& t : all) {
    if (t.name() == lower(name)) return t;
    names += (names.empty() ? "" : ", ") + t.name();
  }
  fail("PRISM_CPU_TARGET={}: not a SIMD target of this binary on this CPU (expected one of: {})",
       name, names);
}

}  // namespace prism::cpu::simd
