// simplify: one forward rewrite (identities, folding of scalar constants, CSE) followed by
// dead-code elimination.
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "prism/compiler/passes.h"
#include "prism/core/host_buffer.h"

namespace prism::compiler {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

class Rewriter {
 public:
  explicit Rewriter(const ir::Graph& in) : in_(in), map_(in.size(), -1) {}

  ir::Graph run() {
    for (ValueId id = 0; id < in_.size(); ++id) {
      Node n = in_.node(id);
      for (ValueId& v : n.inputs) v = map_[v];
      map_[id] = rewrite(std::move(n));
    }
    for (ValueId out : in_.outputs()) out_.outputs().push_back(map_[out]);
    return std::move(out_);
  }

 private:
  const Node& get(ValueId id) const { return out_.node(id); }

  // Whether a permutation moves only axes of size 1 (a decoding step's {h, s=1, hd} to
  // {s=1, h, hd}): the elements stay in memory order, so the transpose is a reshape, which
  // backends read in place instead of copying.
  static bool keeps_memory_order(const Shape& in, const std::vector<int>& axes) {
    int previous = -1;
    for (int a : axes) {
      if (in.size(a) == 1) continue;
      if (a < previous) return false;
      previous = a;
    }
    return true;
  }

  // The value of a scalar constant, or of a broadcast of one.
  std::optional<double> scalar_value(ValueId id) const {
    const Node* n = &get(id);
    if (n->op == Op::broadcast || (n->op == Op::reshape && n->shape.numel() == 1)) {
      n = &get(n->inputs[0]);
    }
    if (n->op != Op::constant || n->shape.numel() != 1) return std::nullopt;
    HostBuffer h(n->shape, *n->attr<ir::ConstantAttrs>().data);
    return h.to_f64()[0];
  }

  ValueId rewrite(Node n) {
    switch (n.op) {
      case Op::convert:
      case Op::reshape:
        if (get(n.inputs[0]).shape == n.shape) return n.inputs[0];
        if (n.op == Op::reshape && get(n.inputs[0]).op == Op::reshape) {
          n.inputs[0] = get(n.inputs[0]).inputs[0];
          if (get(n.inputs[0]).shape == n.shape) return n.inputs[0];
        }
        break;
      case Op::broadcast:
        if (get(n.inputs[0]).shape == n.shape) return n.inputs[0];
        break;
      case Op::transpose:
        if (get(n.inputs[0]).op == Op::transpose) {  // compose the two permutations
          const Node& inner = get(n.inputs[0]);
          const auto& p1 = inner.attr<ir::AxesAttrs>().axes;
          auto p2 = n.attr<ir::AxesAttrs>().axes;
          for (int& a : p2) a = p1[a];
          n.inputs[0] = inner.inputs[0];
          n.attrs = ir::AxesAttrs{p2};
          if (get(n.inputs[0]).shape == n.shape) return n.inputs[0];
        }
        if (keeps_memory_order(get(n.inputs[0]).shape, n.attr<ir::AxesAttrs>().axes)) {
          return rewrite(Node{Op::reshape, n.shape, {n.inputs[0]}, {}});
        }
        break;
      case Op::mul:
      case Op::add:
      case Op::sub:
      case Op::div:
        if (auto id = identity(n)) return *id;
        break;
      case Op::gather:
        if (auto id = gather_blocks(n)) return *id;
        break;
      default:
        break;
    }
    if (auto folded = fold(n)) return add(std::move(*folded));
    return add(std::move(n));
  }

  // Rows picked from dequantized weights (an embedding lookup in a quantized table) are the
  // picked rows' blocks, dequantized: only those rows are dequantized, not the whole table.
  std::optional<ValueId> gather_blocks(const Node& n) {
    const Node& src = get(n.inputs[0]);
    if (src.op != Op::dequantize || n.attr<ir::AxisAttrs>().axis >= src.shape.rank() - 1) {
      return std::nullopt;
    }
    const Shape& bytes = get(src.inputs[0]).shape;
    std::vector<Dim> dims(n.shape.dims().begin(), n.shape.dims().end());
    dims.back().size = bytes.size(bytes.rank() - 1);
    const ValueId rows =
        add(Node{Op::gather, Shape(DType::u8, dims), {src.inputs[0], n.inputs[1]}, n.attrs});
    return add(Node{Op::dequantize, n.shape, {rows}, src.attrs});
  }

  // x*1, 1*x, x+0, 0+x, x-0, x/1 -> x (same shape: elementwise operands are broadcast).
  std::optional<ValueId> identity(const Node& n) const {
    if (!is_float(n.shape.dtype()) && !is_integer(n.shape.dtype())) return std::nullopt;
    auto a = scalar_value(n.inputs[0]), b = scalar_value(n.inputs[1]);
    double unit = (n.op == Op::mul || n.op == Op::div) ? 1 : 0;
    if (b && *b == unit && get(n.inputs[0]).shape == n.shape) return n.inputs[0];
    bool commutes = n.op == Op::mul || n.op == Op::add;
    if (commutes && a && *a == unit && get(n.inputs[1]).shape == n.shape) return n.inputs[1];
    return std::nullopt;
  }

  // Elementwise ops on scalar constants become constants (shape arithmetic, scales).
  std::optional<Node> fold(const Node& n) const {
    if (!ir::is_elementwise(n.op) || n.shape.numel() != 1) return std::nullopt;
    std::vector<double> v;
    for (ValueId in : n.inputs) {
      if (get(in).op != Op::constant) return std::nullopt;
      v.push_back(*scalar_value(in));
    }
    double r;
    switch (n.op) {
      case Op::neg:
        r = -v[0];
        break;
      case Op::convert:
        r = v[0];
        break;
      case Op::add:
        r = v[0] + v[1];
        break;
      case Op::sub:
        r = v[0] - v[1];
        break;
      case Op::mul:
        r = v[0] * v[1];
        break;
      case Op::div:
        if (!is_float(n.shape.dtype())) return std::nullopt;
        r = v[0] / v[1];
        break;
      case Op::sqrt:
        r = std::sqrt(v[0]);
        break;
      case Op::rsqrt:
        r = 1 / std::sqrt(v[0]);
        break;
      default:
        return std::nullopt;
    }
    if (is_float(n.shape.dtype()) && n.shape.dtype() != DType::f64) {
      r = static_cast<float>(r);  // as the f32 computation would round it
    }
    HostBuffer out =
        HostBuffer::from<double>(n.shape.with_dtype(DType::f64), {r}).convert(n.shape.dtype());
    auto bytes = std::make_shared<std::vector<std::byte>>(out.bytes().begin(), out.bytes().end());
    return Node{Op::constant, n.shape, {}, ir::ConstantAttrs{std::move(bytes)}};
  }

  // Adds n unless an identical node exists (common-subexpression elimination).
  ValueId add(Node n) {
    uint64_t h = ir::hash(n);
    auto range = seen_.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      if (get(it->second) == n) return it->second;
    }
    ValueId id = out_.add(std::move(n));
    seen_.emplace(h, id);
    return id;
  }

  const ir::Graph& in_;
  ir::Graph out_;
  std::vector<ValueId> map_;
  std::unordered_multimap<uint64_t, ValueId> seen_;
};

// Keeps the nodes the outputs need, and every input (positions are part of the signature).
ir::Graph eliminate_dead_code(const ir::Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (ValueId out : g.outputs()) live[out] = true;
  for (ValueId id = g.size() - 1; id >= 0; --id) {
    if (g.node(id).op == Op::input) live[id] = true;
    if (!live[id]) continue;
    for (ValueId in : g.node(id).inputs) live[in] = true;
  }
  ir::Graph out;
  std::vector<ValueId> map(g.size(), -1);
  for (ValueId id = 0; id < g.size(); ++id) {
    if (!live[id]) continue;
    Node n = g.node(id);
    for (ValueId& in : n.inputs) in = map[in];
    map[id] = out.add(std::move(n));
  }
  for (ValueId o : g.outputs()) out.outputs().push_back(map[o]);
  return out;
}

}  // namespace

ir::Graph simplify(const ir::Graph& graph) { return eliminate_dead_code(Rewriter(graph).run()); }

}  // namespace prism::compiler
