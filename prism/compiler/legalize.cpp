// prism's numerics, written out as primitives (see passes.h): after this pass a node computes
// what prism defines wherever IEEE arithmetic, C and StableHLO leave the result undefined or
// to the implementation, so a backend lowers each op as its plain counterpart.
#include <cstdint>
#include <limits>
#include <vector>

#include "prism/compiler/passes.h"
#include "prism/core/error.h"
#include "prism/tensor/tracer.h"

namespace prism::compiler {
namespace {

using ir::Op;

Tensor full_like(const Tensor& t, double value) { return Tensor::full(t.shape(), value); }

// The smallest or largest value of the integer dtype of `shape`, broadcast to it (made from the
// integer itself: a double cannot hold every int64).
Tensor integer_limit(const Shape& shape, bool largest) {
  return with_integer_type(shape.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T limit = largest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
    return Tensor::constant(HostBuffer::from<T>(Shape::scalar(shape.dtype()), {limit}))
        .broadcast_to(shape);
  });
}

// The same limit as a double, for comparing floats with it (rounded to the float's dtype when
// the comparison's constant is made: 2^31 for int32's largest in f32).
double integer_limit_value(DType t, bool largest) {
  return with_integer_type(t, [&](auto zero) {
    using T = decltype(zero);
    return static_cast<double>(largest ? std::numeric_limits<T>::max()
                                       : std::numeric_limits<T>::min());
  });
}

// Whether `n` needs its rule written out.
bool needs_rule(const ir::Graph& g, const ir::Node& n) {
  const DType out = n.shape.dtype();
  switch (n.op) {
    case Op::div:
    case Op::rem:
    case Op::pow:
      return is_integer(out);
    case Op::max:
    case Op::min:
      return is_float(out);
    case Op::convert:
      return is_integer(out) && is_float(g.node(n.inputs[0]).shape.dtype());
    default:
      return false;
  }
}

Tensor rule(const ir::Node& n, const std::vector<Tensor>& in) {
  switch (n.op) {
    case Op::div:
    case Op::rem: {
      // x / 0 and x % 0 are 0 (the divisor made safe first, so nothing traps).
      const Tensor& a = in[0];
      const Tensor& b = in[1];
      Tensor zero = eq(b, full_like(b, 0));
      Tensor safe = select(zero, full_like(b, 1), b);
      return select(zero, full_like(a, 0), n.op == Op::div ? a / safe : rem(a, safe));
    }
    case Op::pow: {
      // An integer to a negative power: 1 for 1, +-1 for -1 (by the exponent's parity), else 0.
      const Tensor& a = in[0];
      const Tensor& b = in[1];
      Tensor odd = ne(rem(b, full_like(b, 2)), full_like(b, 0));
      Tensor minus_one = select(odd, full_like(a, -1), full_like(a, 1));
      Tensor negative = select(eq(a, full_like(a, 1)), full_like(a, 1),
                               select(eq(a, full_like(a, -1)), minus_one, full_like(a, 0)));
      Tensor negative_exponent = lt(b, full_like(b, 0));
      Tensor exponent = select(negative_exponent, full_like(b, 0), b);
      return select(negative_exponent, negative, pow(a, exponent));
    }
    case Op::max:
    case Op::min: {
      // A NaN on either side is the result.
      const Tensor& a = in[0];
      const Tensor& b = in[1];
      Tensor m = n.op == Op::max ? maximum(a, b) : minimum(a, b);
      return select(a.is_nan(), a, select(b.is_nan(), b, m));
    }
    case Op::convert: {
      // Float to integer: truncated toward zero, saturated at the dtype's range, NaN to 0.
      const Tensor& x = in[0];
      const DType to = n.shape.dtype();
      Tensor y = x.convert(to);
      y = select(ge(x, full_like(x, integer_limit_value(to, true))), integer_limit(n.shape, true),
                 y);
      y = select(le(x, full_like(x, integer_limit_value(to, false))), integer_limit(n.shape, false),
                 y);
      return select(x.is_nan(), Tensor::full(n.shape, 0), y);
    }
    default:
      fail("legalize: {} has no rule", ir::op_name(n.op));
  }
}

}  // namespace

ir::Graph legalize(const ir::Graph& graph) {
  Tracer tracer;
  std::vector<ir::ValueId> map(graph.size());
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    ir::Node n = graph.node(id);
    const bool written_out = needs_rule(graph, n);
    for (ir::ValueId& in : n.inputs) in = map[in];
    if (!written_out) {
      map[id] = tracer.graph().add(std::move(n));
      continue;
    }
    std::vector<Tensor> in;
    for (ir::ValueId v : n.inputs) in.push_back(tracer.wrap(v));
    map[id] = tracer.use(rule(n, in), "legalize");
  }
  for (ir::ValueId out : graph.outputs()) tracer.graph().outputs().push_back(map[out]);
  return std::move(tracer.graph());
}

}  // namespace prism::compiler
