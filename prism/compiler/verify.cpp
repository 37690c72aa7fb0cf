#include <string>

#include "prism/compiler/passes.h"
#include "prism/core/error.h"

namespace prism::compiler {
namespace {

// The operands ops.def gives the node's op; -1: any number, one at least.
int expected_arity(const ir::Node& n) {
  switch (ir::op_arity(n.op)) {
    case ir::Arity::n0:
      return 0;
    case ir::Arity::n1:
      return 1;
    case ir::Arity::n2:
      return 2;
    case ir::Arity::n3:
      return 3;
    case ir::Arity::n6:
      return 6;
    case ir::Arity::variadic:
      return -1;
    case ir::Arity::rank_plus_1:
      return 1 + n.shape.rank();
    case ir::Arity::rank_plus_2:
      return 2 + n.shape.rank();
    case ir::Arity::attention: {
      const auto* a = std::get_if<ir::AttentionAttrs>(&n.attrs);
      return a ? 3 + a->has_mask + a->has_offset : 3;
    }
  }
  fail("verify: {} has an arity verify does not know", ir::op_name(n.op));
}

// Whether the node's dtypes follow its op's rule in ops.def; the reason when they do not.
std::string types_error(const ir::Graph& g, const ir::Node& n) {
  const DType out = n.shape.dtype();
  auto in = [&](size_t k) { return g.node(n.inputs[k]).shape.dtype(); };
  auto all_same = [&](size_t first, DType t) {
    for (size_t k = first; k < n.inputs.size(); ++k) {
      if (in(k) != t) return false;
    }
    return true;
  };
  switch (ir::op_types(n.op)) {
    case ir::Types::any:
      return "";
    case ir::Types::same:
      return all_same(0, out) ? "" : "operands and result of one dtype";
    case ir::Types::floating:
      return is_float(out) && all_same(0, out) ? ""
                                               : "floating-point operands and result of one dtype";
    case ir::Types::compare:
      return out == DType::boolean && all_same(0, in(0)) ? ""
                                                         : "operands of one dtype, a bool result";
    case ir::Types::float_test:
      return out == DType::boolean && is_float(in(0)) ? ""
                                                      : "a floating-point operand, a bool result";
    case ir::Types::logical:
      return out == DType::boolean && all_same(0, DType::boolean) ? "" : "bool operands and result";
    case ir::Types::select:
      return in(0) == DType::boolean && all_same(1, out)
                 ? ""
                 : "a bool condition, the rest of one dtype";
    case ir::Types::index_out:
      return is_integer(out) ? "" : "an integer result";
  }
  return "a rule verify does not know";
}

}  // namespace

void verify(const ir::Graph& g) {
  for (ir::ValueId id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    auto where = [&] { return ir::print(g, id); };
    for (ir::ValueId in : n.inputs) {
      PRISM_CHECK(in >= 0 && in < id, "verify: {} uses a value defined later", where());
    }
    PRISM_CHECK(n.attrs.index() == ir::op_attrs_index(n.op), "verify: {} carries {}, {} takes {}",
                where(), ir::attrs_name(n.attrs.index()), ir::op_name(n.op),
                ir::attrs_name(ir::op_attrs_index(n.op)));
    int arity = expected_arity(n);
    PRISM_CHECK(arity < 0 ? !n.inputs.empty() : static_cast<int>(n.inputs.size()) == arity,
                "verify: {} has {} operands, expected {}", where(), n.inputs.size(),
                arity < 0 ? std::string("one or more") : std::to_string(arity));
    if (std::string rule = types_error(g, n); !rule.empty()) {
      std::string dtypes;
      for (ir::ValueId in : n.inputs) {
        dtypes += (dtypes.empty() ? "" : ", ") + std::string(name(g.node(in).shape.dtype()));
      }
      fail("verify: {} takes {} (ops.def), not ({}) -> {}", where(), rule, dtypes,
           name(n.shape.dtype()));
    }
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
    if (n.op == ir::Op::all_reduce || n.op == ir::Op::all_gather ||
        n.op == ir::Op::reduce_scatter) {
      const auto& c = n.attr<ir::CollectiveAttrs>();
      const Shape& in = g.node(n.inputs[0]).shape;
      PRISM_CHECK(c.group >= 1 && c.mesh_axis >= 0, "verify: {} has no device group", where());
      bool fits = in.rank() == n.shape.rank();
      for (int a = 0; fits && a < in.rank(); ++a) {
        int64_t want = in.size(a);
        if (a == c.axis && n.op == ir::Op::all_gather) want *= c.group;
        if (a == c.axis && n.op == ir::Op::reduce_scatter) {
          fits = want % c.group == 0;
          want /= c.group;
        }
        fits = fits && n.shape.size(a) == want;
      }
      PRISM_CHECK(fits && (n.op == ir::Op::all_reduce || c.axis < in.rank()),
                  "verify: {} does not fit its operand {} on {} devices", where(), in.str(),
                  c.group);
    }
    if (n.op == ir::Op::dequantize) {
      const quant::GgmlTypeInfo& t = quant::info(n.attr<ir::DequantizeAttrs>().format);
      const Shape& in = g.node(n.inputs[0]).shape;
      bool fits = in.dtype() == DType::u8 && is_float(n.shape.dtype()) && in.rank() >= 1 &&
                  in.rank() == n.shape.rank() && t.block_elements > 1;
      for (int a = 0; fits && a < in.rank(); ++a) {
        const bool last = a == in.rank() - 1;
        fits = last ? in.size(a) % t.block_bytes == 0 &&
                          n.shape.size(a) == in.size(a) / t.block_bytes * t.block_elements
                    : in.size(a) == n.shape.size(a);
      }
      PRISM_CHECK(fits, "verify: {} does not hold the values of {} blocks of {}", where(), t.name,
                  in.str());
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
