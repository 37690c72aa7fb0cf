// Runs one ONNX node test: reads model.onnx and test_data_set_*/, evaluates the graph node by
// node with prism (each node traced, compiled and run on the chosen platform), and compares every
// output with the expected TensorProto.
#pragma once

#include <string>

#include "prism/runtime/platform.h"

namespace prism::conformance {

struct CaseResult {
  enum class Status { passed, failed, skipped };
  Status status = Status::passed;
  std::string detail;  // why it was skipped, or the first mismatch
};

// `trace` prints each node's outputs (their first values) to stderr while it runs.
CaseResult run_case(const std::string& dir, Platform& platform, bool trace = false);

// Tolerances for floating-point outputs: |got - want| <= atol + rtol * |want|. We use the ONNX
// runner's rtol (1e-3) and onnxruntime's atol (1e-5; ONNX's own 1e-7 is below f32 rounding for
// values computed near zero). A tighter rtol fails correct results: the expected data of the
// window-function tests (HannWindow ...) is itself off by up to 2e-4 relative. Halves get
// looser bounds; integers and bools must match exactly.
struct Tolerance {
  double rtol;
  double atol;
};
inline constexpr Tolerance kF32Tolerance{1e-3, 1e-5};
inline constexpr Tolerance kF16Tolerance{1e-3, 1e-3};
inline constexpr Tolerance kBF16Tolerance{1e-2, 1e-2};

}  // namespace prism::conformance
