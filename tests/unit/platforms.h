// The op harness: runs a function on every platform available here and on the CPU with every
// composite decomposed into primitives, and compares each result with the CPU's.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
#include "tests/unit/test_util.h"

namespace prism::testing {

// The CPU, but running composites through their decompositions.
class DecomposingCpu : public Platform {
 public:
  std::string_view name() const override { return "cpu-decomposed"; }
  std::vector<DeviceInfo> devices() const override { return cpu().devices(); }
  Buffer allocate(const Shape& s) override { return rehome(cpu().allocate(s)); }
  Buffer upload(const HostBuffer& h) override { return rehome(cpu().upload(h)); }
  void write(Buffer& b, size_t o, std::span<const std::byte> d) override { cpu().write(b, o, d); }
  HostBuffer download(const Buffer& b) override { return cpu().download(b); }
  bool supports(const ir::Node&) const override { return false; }
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& g, const CompileSpec& s) override {
    return std::make_unique<Rehomed>(cpu().compile(g, s), this);
  }

 private:
  // The CPU's executable, its outputs on this platform (so that they can be fed back, as a
  // decode loop does with its states).
  class Rehomed : public ExecutableImpl {
   public:
    Rehomed(std::unique_ptr<ExecutableImpl> exe, DecomposingCpu* home)
        : exe_(std::move(exe)), home_(home) {}
    std::vector<Buffer> call(std::span<const Buffer> params,
                             std::span<const Buffer> inputs) override {
      std::vector<Buffer> out = exe_->call(params, inputs);
      for (Buffer& b : out) b = home_->rehome(b);
      return out;
    }

   private:
    std::unique_ptr<ExecutableImpl> exe_;
    DecomposingCpu* home_;
  };

  static Platform& cpu() { return get_platform("cpu"); }
  Buffer rehome(const Buffer& b) { return Buffer(b.shape(), b.shared_memory(), this); }
};

// PRISM_EXPECT_PLATFORMS=opencl[,cuda...]: platforms that must be available, set by the ctest
// entries of a build that has them, so that a missing driver fails the tests loudly instead of
// quietly comparing fewer platforms.
inline void check_expected_platforms() {
  const char* env = std::getenv("PRISM_EXPECT_PLATFORMS");
  std::string names = env ? env : "";
  for (size_t at = 0; at < names.size();) {
    size_t end = std::min(names.find(',', at), names.size());
    std::string name = names.substr(at, end - at);
    at = end + 1;
    if (name.empty()) continue;
    std::string why = "not a platform of this build";
    for (const PlatformStatus& s : platform_statuses()) {
      if (s.name == name) why = s.available ? "" : s.reason;
    }
    if (!why.empty()) {
      ADD_FAILURE() << "platform " << name << " is expected (PRISM_EXPECT_PLATFORMS) but "
                    << "unavailable: " << why;
    }
  }
}

// Whether `name` is a PJRT platform (the XLA CPU plugin in CI).
inline bool is_pjrt(std::string_view name) {
  return name == "xla-cpu" || name == "xla-cuda" || name == "tpu" || name == "pjrt";
}

// The CPU and every PJRT platform available here: where the model tests check their PyTorch
// references (the XLA CPU plugin in CI).
inline std::vector<std::string> cpu_and_pjrt_platforms() {
  std::vector<std::string> names{"cpu"};
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.available && is_pjrt(s.name)) names.push_back(s.name);
  }
  return names;
}

inline std::vector<Platform*> platforms_to_compare() {
  check_expected_platforms();
  static DecomposingCpu decomposed;
  std::vector<Platform*> all{&decomposed};
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.available && s.name != "cpu") all.push_back(&get_platform(s.name));
  }
  return all;
}

// How far another platform may be from the CPU, per dtype of the output: floats differ in
// summation order and in the last bits of exp/tanh..., halves by one rounding of their own;
// integers and bools must match exactly.
inline double platform_tolerance(DType t, double tol) {
  switch (t) {
    case DType::f16:
      return std::max(tol, 2e-3);
    case DType::bf16:
      return std::max(tol, 1.6e-2);
    case DType::f32:
    case DType::f64:
      return tol;
    default:
      return 0;
  }
}

// Runs fn on the CPU, checks the CPU result against `want` (when given), then checks every
// other platform against the CPU within `tol` (relative, with an absolute floor of tol).
template <typename F>
std::vector<HostBuffer> check_platforms(F&& fn, std::vector<HostBuffer> inputs, double tol = 1e-5) {
  std::vector<HostBuffer> ref = run(fn, std::span<const HostBuffer>(inputs));
  for (Platform* p : platforms_to_compare()) {
    std::vector<HostBuffer> got = run(fn, std::span<const HostBuffer>(inputs), p);
    EXPECT_EQ(got.size(), ref.size());
    for (size_t k = 0; k < got.size() && k < ref.size(); ++k) {
      SCOPED_TRACE(std::string(p->name()) + " output " + std::to_string(k));
      EXPECT_EQ(got[k].shape(), ref[k].shape());
      expect_values(got[k], ref[k].to_f64(), platform_tolerance(ref[k].dtype(), tol));
    }
  }
  return ref;
}

}  // namespace prism::testing
