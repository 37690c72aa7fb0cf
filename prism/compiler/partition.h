// The SPMD partitioner: one graph over whole tensors becomes the graph each device of a mesh
// runs over its shards, with collectives where the shards must meet.
//
// Shardings start at the parameters (ParameterAttrs::sharding, from Tensor::parameter) and the
// inputs, and flow forward node by node. Each value is split along some of its dims over mesh
// axes, and may hold partial sums over one axis (a product that contracted a split dim). An op
// keeps its operands' splits where it computes each shard on its own (elementwise ops, products
// along unsplit dims, reshapes that keep a split dim leading its group, attention and rope by
// heads, updates of a KV cache by heads); a product contracting a split dim yields partial
// sums, summed by one all_reduce where something other than a linear op reads them. Anything
// else reads its operands whole (all_gather): always correct, only slower. With Megatron-style
// annotations (column-split q/k/v, gate and up; row-split o and down projections) that leaves
// one all_reduce after each attention block and each MLP.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "prism/core/mesh.h"
#include "prism/ir/graph.h"

namespace prism::compiler {

// Per positional dim, the mesh axis a value is split over, or -1.
using Split = std::vector<int>;

struct Partitioned {
  ir::Graph graph;                          // what every device runs, over local shapes
  std::map<std::string, Split> parameters;  // by name, over the parameters' whole shapes
  std::vector<Split> outputs;               // how each output is split
};

// `inputs`: how each input of `graph` is split (missing ones are whole); inputs and parameters
// arrive as shards. `outputs`: how each output must leave split (missing or empty: as it comes;
// a program's states, which the next program takes split as its inputs). Throws naming the
// tensor, tag, size and axis when a split does not divide.
Partitioned partition(const ir::Graph& graph, const Mesh& mesh, const std::vector<Split>& inputs,
                      const std::vector<Split>& outputs = {});

}  // namespace prism::compiler
