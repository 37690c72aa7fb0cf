// The compiler's graph passes. Each takes a graph and returns a new one (or checks it).
#pragma once

#include <functional>

#include "prism/ir/graph.h"

namespace prism::compiler {

// Checks SSA order, arities, attributes against shapes; throws prism::Error naming the node.
void verify(const ir::Graph& graph);

// Rewrites the composite nodes for which `keep(node)` is false into primitives.
ir::Graph decompose(const ir::Graph& graph, const std::function<bool(const ir::Node&)>& keep);

// Constant folding of small values, algebraic identities (x*1, x+0, transpose of transpose,
// reshape of reshape, convert to the same dtype...), common-subexpression elimination and
// dead-code elimination.
ir::Graph simplify(const ir::Graph& graph);

}  // namespace prism::compiler
