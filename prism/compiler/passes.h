// The compiler's graph passes. Each takes a graph and returns a new one (or checks it).
#pragma once

#include <functional>

#include "prism/ir/graph.h"

namespace prism::compiler {

// Checks SSA order, arities, attributes against shapes; throws prism::Error naming the node.
void verify(const ir::Graph& graph);

// Rewrites the composite nodes for which `keep(node)` is false into primitives.
ir::Graph decompose(const ir::Graph& graph, const std::function<bool(const ir::Node&)>& keep);

// prism's numerics as explicit primitives, where IEEE arithmetic, C and StableHLO leave the
// result undefined or to the implementation: integer x / 0 and x % 0 are 0; an integer to a
// negative power is 1 for 1, +-1 for -1, else 0; a float max / min is NaN when either side is;
// a float converted to an integer is truncated, saturated at the dtype's range, and 0 for NaN.
// Every backend then lowers each op as its plain counterpart.
ir::Graph legalize(const ir::Graph& graph);

// Constant folding of small values, algebraic identities (x*1, x+0, transpose of transpose,
// reshape of reshape, convert to the same dtype...), common-subexpression elimination and
// dead-code elimination.
ir::Graph simplify(const ir::Graph& graph);

}  // namespace prism::compiler
