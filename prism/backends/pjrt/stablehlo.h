// A prism graph as a StableHLO module in MLIR's generic text form, what PJRT plugins compile
// (program format "mlir"). The graph arrives legalized (prism/compiler/legalize.cpp), so each
// primitive prints as its plain StableHLO counterpart; composites arrive decomposed.
#pragma once

#include <map>
#include <string>

#include "prism/ir/graph.h"

namespace prism::pjrt {

// `func.func @main` takes the graph's parameters (in Graph::parameters() order), then its
// inputs by position, and returns its outputs. `aliases[a]`, where a is an argument's position
// and the value an output's, gives that output the argument's memory (a donated input: the
// plugin updates it in place). Throws prism::Error naming the node for an op with no StableHLO
// lowering.
std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases = {});

}  // namespace prism::pjrt
