// Helpers shared by the op tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/runtime/compile.h"
#include "prism/tensor/tensor.h"

namespace prism::testing {

inline HostBuffer f32(Shape shape, std::vector<float> v) {
  return HostBuffer::from<float>(shape.with_dtype(DType::f32), v);
}
inline HostBuffer i32(Shape shape, std::vector<int32_t> v) {
  return HostBuffer::from<int32_t>(shape.with_dtype(DType::i32), v);
}
inline Shape S(std::initializer_list<Dim> dims, DType t = DType::f32) { return Shape(t, dims); }

inline void expect_values(const HostBuffer& got, const std::vector<double>& want,
                          double tol = 1e-5) {
  std::vector<double> g = got.to_f64();
  ASSERT_EQ(g.size(), want.size()) << got.shape().str();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << "at " << i;
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(g[i], want[i]) << "at " << i;
    } else {
      EXPECT_NEAR(g[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
    }
  }
}

// Runs a one-output function and returns its result.
template <typename F>
HostBuffer run1(F&& fn, std::initializer_list<HostBuffer> inputs) {
  return run(std::forward<F>(fn), inputs).at(0);
}

// The message of the prism::Error that fn throws ("no error" when it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Sets an environment variable while it lives, and unsets it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// While it lives, the CPU offers meshes of `n` devices, whatever the machine's cores
// (PRISM_CPU_DEVICES).
struct CpuDevices : ScopedEnv {
  explicit CpuDevices(int n) : ScopedEnv("PRISM_CPU_DEVICES", std::to_string(n)) {}
};

// While it lives, the CPU's products on quantized weights take their activations in `mode`
// (PRISM_CPU_QUANT_ACTIVATIONS: f32, or int8 where the CPU has those kernels), for the
// executables compiled meanwhile; the default is restored after.
struct QuantActivations : ScopedEnv {
  explicit QuantActivations(const char* mode) : ScopedEnv("PRISM_CPU_QUANT_ACTIVATIONS", mode) {}
};

}  // namespace prism::testing
