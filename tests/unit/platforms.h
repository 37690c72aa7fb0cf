// The op harness: runs a function on every platform available here and on the CPU with every
// composite decomposed into primitives, and compares each result with the CPU's.
#pragma once

#include <memory>

#include "prism/backends/cpu/cpu_platform.h"
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

inline std::vector<Platform*> platforms_to_compare() {
  static DecomposingCpu decomposed;
  std::vector<Platform*> all{&decomposed};
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.available && s.name != "cpu") all.push_back(&get_platform(s.name));
  }
  return all;
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
      expect_values(got[k], ref[k].to_f64(), tol);
    }
  }
  return ref;
}

}  // namespace prism::testing
