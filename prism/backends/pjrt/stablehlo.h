// A prism graph as a StableHLO module in MLIR's generic text form, what PJRT plugins compile
// (program format "mlir"). The graph arrives legalized (prism/compiler/legalize.cpp), so each
// primitive prints as its plain StableHLO counterpart; composites arrive decomposed.
#pragma once

#include <string>

#include "prism/ir/graph.h"

namespace prism::pjrt {

// `func.func @main` takes the graph's parameters (in Graph::parameters() order), then its
// inputs by position, and returns its outputs. Throws prism::Error naming the node for an op
// with no StableHLO lowering yet.
std::string to_stablehlo(const ir::Graph& graph);

// Whether to_stablehlo lowers op.
bool lowers(ir::Op op);

}  // namespace prism::pjrt
