// A prism graph as a StableHLO module in MLIR's generic text form, what PJRT plugins compile
// (program format "mlir"). The graph arrives legalized (prism/compiler/legalize.cpp), so each
// primitive prints as its plain StableHLO counterpart; composites arrive decomposed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "prism/core/mesh.h"
#include "prism/ir/graph.h"

namespace prism::pjrt {

// `func.func @main` takes the graph's parameters (in Graph::parameters() order), then its
// inputs by position, and returns its outputs. `aliases[a]`, where a is an argument's position
// and the value an output's, gives that output the argument's memory (a donated input: the
// plugin updates it in place). Throws prism::Error naming the node for an op with no StableHLO
// lowering.
std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases = {});

// A module for the plugin's SPMD partitioner: compiled for `partitions` devices, each argument
// and result annotated with its HloSharding text (hlo_sharding()).
struct ModuleSharding {
  int64_t partitions = 1;
  std::vector<std::string> arguments, results;
};
std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases,
                         const ModuleSharding& sharding);

// The HloSharding of a tensor split as `split` (per dim, a mesh axis or -1) over `mesh`:
// "{replicated}", or "{devices=[tiles per dim]device ids}" with "last_tile_dim_replicate"
// where mesh axes split nothing of it. Device ids are mesh positions (row-major).
std::string hlo_sharding(const std::vector<int>& split, const Mesh& mesh);

}  // namespace prism::pjrt
