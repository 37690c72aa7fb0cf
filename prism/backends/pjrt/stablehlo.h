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

// Which of XLA's partitioners a module is written for: Shardy (the `sdy` dialect: a mesh
// declared once, `sdy.sharding` on each argument and result), or GSPMD (an `mhlo.sharding`
// HloSharding text on each), which XLA deprecates in Shardy's favour.
enum class Partitioner { shardy, gspmd };

// A module for the plugin's SPMD partitioner, compiled for `mesh.devices()` partitions: how
// each argument and result is split (per dim, a mesh axis or -1), written for `partitioner`.
struct ModuleSharding {
  Mesh mesh;
  Partitioner partitioner = Partitioner::shardy;
  std::vector<std::vector<int>> arguments, results;
};
std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases,
                         const ModuleSharding& sharding);

// The HloSharding of a tensor split as `split` (per dim, a mesh axis or -1) over `mesh`:
// "{replicated}", or "{devices=[tiles per dim]device ids}" with "last_tile_dim_replicate"
// where mesh axes split nothing of it. Device ids are mesh positions (row-major).
std::string hlo_sharding(const std::vector<int>& split, const Mesh& mesh);

// The Shardy mesh of `mesh` and the Shardy sharding of a tensor split as `split` over it:
// `<["data"=2, "model"=4]>` and `#sdy.sharding<@mesh, [{}, {"model"}]>` (each dim closed:
// the partitioner may not split it further; axes a tensor does not use replicate it).
std::string sdy_mesh(const Mesh& mesh);
std::string sdy_sharding(const std::vector<int>& split, const Mesh& mesh);

}  // namespace prism::pjrt
