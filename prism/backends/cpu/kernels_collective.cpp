// Collectives between the CPU's devices of a mesh, through host memory (HostCommunicator).
#include <cstring>

#include "prism/backends/cpu/kernels.h"
#include "prism/core/error.h"

namespace prism::cpu {

using ir::Op;

Kernel make_collective_kernel(const ir::Graph& g, ir::ValueId id, HostCommunicator* comm,
                              int64_t device) {
  const ir::Node& n = g.node(id);
  if (n.op == Op::mesh_coordinate) {
    const auto& c = n.attr<ir::CollectiveAttrs>();
    PRISM_CHECK(c.group == 1 || comm, "cpu: {} outside a mesh", ir::print(g, id));
    const int32_t at =
        comm ? static_cast<int32_t>(comm->mesh().coordinate(device, c.mesh_axis)) : 0;
    return [at](auto, std::byte* out, ThreadPool&) { std::memcpy(out, &at, sizeof at); };
  }
  if (n.op != Op::all_reduce && n.op != Op::all_gather && n.op != Op::reduce_scatter) {
    return nullptr;
  }
  const auto& c = n.attr<ir::CollectiveAttrs>();
  const Shape in = g.node(n.inputs[0]).shape;
  if (c.group == 1) {  // a group of one: the operand as it is
    return [bytes = in.bytes()](auto inputs, std::byte* out, ThreadPool&) {
      if (out != inputs[0]) std::memmove(out, inputs[0], bytes);
    };
  }
  PRISM_CHECK(comm, "cpu: {} across {} devices outside a mesh ({})", ir::op_name(n.op), c.group,
              ir::print(g, id));
  PRISM_CHECK(c.mesh_axis < static_cast<int>(comm->mesh().axes().size()) &&
                  comm->mesh().axes()[c.mesh_axis].size == c.group,
              "cpu: {} over {} devices of mesh axis {}, but the mesh is {}", ir::op_name(n.op),
              c.group, c.mesh_axis, comm->mesh().str());
  const Op op = n.op;
  return [=](auto inputs, std::byte* out, ThreadPool&) {
    switch (op) {
      case Op::all_reduce:
        return comm->all_reduce(device, c.mesh_axis, in, inputs[0], out);
      case Op::all_gather:
        return comm->all_gather(device, c.mesh_axis, c.axis, in, inputs[0], out);
      default:
        return comm->reduce_scatter(device, c.mesh_axis, c.axis, in, inputs[0], out);
    }
  };
}

}  // namespace prism::cpu
