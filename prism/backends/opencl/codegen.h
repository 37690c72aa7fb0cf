// OpenCL C for one step of an executable: a fused elementwise loop (a compiler FusionGroup) or
// one non-elementwise node. Shapes are static, so sizes and strides are baked into the source
// as constants; every kernel reads and writes through (buffer, byte offset) argument pairs so
// that values can live anywhere in the planned arena.
//
// Storage follows the CPU: f16 and bf16 are stored as 16-bit words and computed in float (no
// cl_khr_fp16 needed), integers and bool are computed in long, f64 in double (cl_khr_fp64).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prism/compiler/fusion.h"
#include "prism/ir/graph.h"

namespace prism::opencl {

struct DeviceTraits {
  bool fp64 = false;
  std::string name;  // for errors
};

// One kernel: a function called `name` in `code`, with arguments (read 0 buffer, read 0
// offset, ..., out buffer, out offset).
struct KernelSource {
  std::string name;
  std::string code;
  std::vector<ir::ValueId> reads;
  // Work items per dimension (rounded up to whole work groups at launch) and the work-group
  // size; local[0] == 0 lets the executable pick a 1-D size.
  int dims = 1;
  int64_t global[3] = {0, 1, 1};
  int64_t local[3] = {0, 1, 1};
  bool starts_as_operand = false;  // the output first holds a copy of reads[0] (in-place updates)
};

// Helpers every kernel uses: half conversions, the fp64 pragma.
std::string preamble(const DeviceTraits& device);

// The kernel of the step that computes `id` (the root of its fusion group for elementwise ops);
// fails naming the op and the platform for ops (or dtypes) the device cannot run.
KernelSource step_kernel(const ir::Graph& graph, const compiler::FusionPlan& plan, ir::ValueId id,
                         const std::string& name, const DeviceTraits& device);

}  // namespace prism::opencl
