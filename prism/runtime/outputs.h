// One call's output buffers, as a schedule placed them: what every backend's executable hands
// back from call().
#pragma once

#include <span>
#include <vector>

#include "prism/compiler/schedule.h"
#include "prism/ir/graph.h"
#include "prism/runtime/platform.h"

namespace prism {

// The donated input's memory where the schedule gave an output one (on `platform`), a buffer
// from allocate(shape) for the others.
template <typename Allocate>
std::vector<Buffer> output_buffers(const compiler::Schedule& schedule, const ir::Graph& graph,
                                   std::span<const Buffer> inputs, Platform* platform,
                                   Allocate allocate) {
  const std::vector<int>& donated = schedule.donated_outputs();
  std::vector<Buffer> outputs(graph.outputs().size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Shape& shape = graph.node(graph.outputs()[k]).shape;
    outputs[k] = donated[k] >= 0 ? Buffer(shape, inputs[donated[k]].shared_memory(), platform)
                                 : allocate(shape);
  }
  return outputs;
}

}  // namespace prism
