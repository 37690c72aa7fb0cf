// Collectives between the CPU's devices of a mesh, through host memory (run_collective).
#include "prism/backends/cpu/kernels.h"
#include "prism/compiler/kernel_ir.h"

namespace prism::cpu {

Kernel make_collective_kernel(const ir::Graph& g, ir::ValueId id, Communicator* comm,
                              int64_t device) {
  const ir::Node& n = g.node(id);
  if (kernel::lowering_of(n.op) != kernel::Lowering::collective) return nullptr;
  check_collective("cpu", g, id, comm);
  const Shape operand = n.inputs.empty() ? Shape() : g.node(n.inputs[0]).shape;
  return [node = n, operand, comm, device](auto inputs, std::byte* out, ThreadPool&) {
    run_collective(node, operand, comm, device, inputs.empty() ? nullptr : inputs[0], out);
  };
}

}  // namespace prism::cpu
