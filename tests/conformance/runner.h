// Runs one ONNX node test: reads model.onnx and test_data_set_*/, evaluates the graph node by
// node with prism (each node traced, compiled and run on the CPU platform), and compares every
// output with the expected TensorProto.
#pragma once

#include <string>

namespace prism::conformance {

struct CaseResult {
  enum class Status { passed, failed, skipped };
  Status status = Status::passed;
  std::string detail;  // why it was skipped, or the first mismatch
};

CaseResult run_case(const std::string& dir);

// Tolerances for floating-point outputs: |got - want| <= atol + rtol * |want|. The ONNX runner
// compares with rtol 1e-3, atol 1e-7; we take a tighter rtol and an atol that allows for f32
// results near zero computed in a different order. Integers and bools must match exactly.
struct Tolerance {
  double rtol;
  double atol;
};
inline constexpr Tolerance kF32Tolerance{1e-4, 1e-5};
inline constexpr Tolerance kF16Tolerance{1e-3, 1e-3};
inline constexpr Tolerance kBF16Tolerance{1e-2, 1e-2};

}  // namespace prism::conformance
