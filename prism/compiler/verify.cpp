#include "prism/compiler/passes.h"
#include "prism/core/error.h"

namespace prism::compiler {
namespace {

int expected_arity(const ir::Node& n) {
  using ir::Op;
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::leaf:
      return 0;
    case ir::OpKind::unary:
      return 1;
    case ir::OpKind::binary:
      return 2;
    case ir::OpKind::ternary:
      return 3;
    default:
      break;
  }
  switch (n.op) {
    case Op::dot:
    case Op::gather:
    case Op::take_along:
    case Op::pad:
    case Op::convolution:
      return 2;
    case Op::scatter:
    case Op::rope:
    case Op::short_conv:
      return 3;
    case Op::dynamic_slice:
      return 1 + n.shape.rank();
    case Op::dynamic_update_slice:
      return 2 + n.shape.rank();
    case Op::concatenate:
      return -1;  // any
    case Op::attention: {
      const auto& a = n.attr<ir::AttentionAttrs>();
      return 3 + a.has_mask + a.has_offset;
    }
    default:
      return 1;
  }
}

}  // namespace

void verify(const ir::Graph& g) {
  for (ir::ValueId id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    auto where = [&] { return ir::print(g, id); };
    for (ir::ValueId in : n.inputs) {
      PRISM_CHECK(in >= 0 && in < id, "verify: {} uses a value defined later", where());
    }
    int arity = expected_arity(n);
    PRISM_CHECK(arity < 0 || static_cast<int>(n.inputs.size()) == arity,
                "verify: {} has {} operands, expected {}", where(), n.inputs.size(), arity);
    if (ir::is_elementwise(n.op)) {
      for (ir::ValueId in : n.inputs) {
        PRISM_CHECK(g.node(in).shape.sizes() == n.shape.sizes(),
                    "verify: {} operand %{} has shape {}", where(), in, g.node(in).shape.str());
      }
    }
    if (n.op == ir::Op::reshape) {
      PRISM_CHECK(g.node(n.inputs[0]).shape.numel() == n.shape.numel(),
                  "verify: {} changes the number of elements", where());
    }
    if (n.op == ir::Op::constant) {
      const auto& c = n.attr<ir::ConstantAttrs>();
      PRISM_CHECK(c.data && static_cast<int64_t>(c.data->size()) == n.shape.bytes(),
                  "verify: {} holds the wrong number of bytes", where());
    }
  }
  for (ir::ValueId out : g.outputs()) {
    PRISM_CHECK(out >= 0 && out < g.size(), "verify: output %{} does not exist", out);
  }
}

}  // namespace prism::compiler
