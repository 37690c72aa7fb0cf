// Lowering graph steps into the kernel IR: fused elementwise groups, data movement as index
// maps, and reductions.
#include "prism/compiler/kernel_ir.h"

#include <fmt/format.h>

#include <algorithm>

#include "prism/core/error.h"
#include "prism/quant/ggml_type.h"

namespace prism::kernel {

using ir::Op;
using ir::ValueId;

Scalar scalar_of(DType t) {
  if (t == DType::f64) return Scalar::f64;
  if (prism::is_float(t)) return Scalar::f32;
  return Scalar::i64;
}

int64_t Kernel::items() const {
  int64_t n = 1;
  for (int64_t s : space) n *= s;
  return n;
}

std::vector<int> Kernel::region() const {
  std::vector<int> region(exprs.size(), 0);
  for (size_t e = 0; e < exprs.size(); ++e) {
    const Expr& x = exprs[e];
    if (x.kind == ExprKind::loop) region[e] = 2 * x.loop + 1;
    if (x.kind == ExprKind::result) region[e] = 2 * x.loop + (loops[x.loop].writes ? 1 : 2);
    for (ExprId a : x.args) region[e] = std::max(region[e], region[a]);
  }
  return region;
}

std::vector<bool> Kernel::used() const {
  std::vector<bool> used(exprs.size(), false);
  for (ExprId root : {value, at, mask}) {
    if (root != kNone) used[root] = true;
  }
  for (const Loop& l : loops) {
    if (l.operand != kNone) used[l.operand] = true;
  }
  for (size_t e = exprs.size(); e-- > 0;) {
    if (!used[e]) continue;
    for (ExprId a : exprs[e].args) used[a] = true;
  }
  return used;
}

std::vector<bool> Kernel::reads_result(int j) const {
  std::vector<bool> reads(exprs.size(), false);
  for (size_t e = 0; e < exprs.size(); ++e) {
    reads[e] = exprs[e].kind == ExprKind::result && exprs[e].loop == j;
    for (ExprId a : exprs[e].args) reads[e] = reads[e] || reads[a];
  }
  return reads;
}

std::vector<bool> folded_dequantizes(const ir::Graph& graph) {
  return compiler::folded_dequantizes(graph, [&](const ir::Node& dot) {
    const Shape& x = graph.node(dot.inputs[0]).shape;
    return prism::is_float(x.dtype()) && prism::is_float(dot.shape.dtype()) &&
           x.numel() / std::max<int64_t>(1, x.size(x.rank() - 1)) <= kFoldedRows;
  });
}

compiler::FusionPlan plan_steps(const ir::Graph& graph) {
  compiler::FusionPlan plan = compiler::fuse_elementwise(graph);
  plan.folded = folded_dequantizes(graph);
  return plan;
}

bool reads_folded(const compiler::FusionPlan& plan, const ir::Node& node) {
  return node.op == Op::dot && !plan.folded.empty() && plan.folded[node.inputs[1]];
}

std::vector<ValueId> step_reads(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                ValueId id) {
  const ir::Node& n = graph.node(id);
  if (!ir::is_elementwise(n.op)) {
    std::vector<ValueId> reads = n.inputs;
    for (ValueId& r : reads) {
      if (!plan.folded.empty() && plan.folded[r]) r = graph.node(r).inputs[0];
    }
    return reads;
  }
  std::vector<ValueId> reads;
  for (ValueId v : plan.groups[plan.group_of[id]].operands) {
    while (plan.virtual_broadcast[v]) v = graph.node(v).inputs[0];
    if (std::find(reads.begin(), reads.end(), v) == reads.end()) reads.push_back(v);
  }
  return reads;
}

namespace {

// Appends expressions to a kernel, folding the index arithmetic that shapes make trivial.
class Builder {
 public:
  Builder(Kernel& k, const std::vector<DType>& operands) : k_(k), operands_(operands) {}

  ExprId integer(int64_t v) {
    Expr e;
    e.kind = ExprKind::constant;
    e.type = Scalar::i64;
    e.integer = v;
    e.number = static_cast<double>(v);
    return push(std::move(e));
  }
  ExprId real(double v, Scalar type) {
    Expr e;
    e.kind = ExprKind::constant;
    e.type = type;
    e.number = v;
    return push(std::move(e));
  }
  ExprId flat() { return index_leaf(ExprKind::flat, -1); }
  ExprId coord(int axis) { return index_leaf(ExprKind::coord, axis); }
  ExprId loop(int j, int axis = 0) {
    ExprId e = index_leaf(ExprKind::loop, axis);
    k_.exprs[e].loop = j;
    return e;
  }
  // The result of loop j, which must be added to the kernel first.
  ExprId result(int j) {
    const Loop& l = k_.loops.at(j);
    Expr e;
    e.kind = ExprKind::result;
    e.type =
        l.combine == Combine::argmax || l.combine == Combine::argmin ? Scalar::i64 : l.accumulator;
    e.loop = j;
    return push(std::move(e));
  }
  // Adds a loop; returns its index.
  int add_loop(std::vector<int64_t> extents, Combine combine, Scalar accumulator) {
    Loop l;
    l.extents = std::move(extents);
    l.combine = combine;
    l.accumulator = accumulator;
    k_.loops.push_back(std::move(l));
    return static_cast<int>(k_.loops.size() - 1);
  }

  // Element `index` of operand `operand`, or of the output for -1.
  ExprId load(int operand, ExprId index, ExprId mask = kNone) {
    Expr e;
    e.kind = ExprKind::load;
    e.type = scalar_of(operand < 0 ? k_.out : operands_.at(operand));
    e.operand = operand;
    e.args = {index};
    if (mask != kNone) e.args.push_back(mask);
    return push(std::move(e));
  }
  // Element `index` of operand `operand`'s bytes read as an array of `view`.
  ExprId load_as(int operand, DType view, ExprId index) {
    Expr e;
    e.kind = ExprKind::load;
    e.type = scalar_of(view);
    e.dtype = view;
    e.view = true;
    e.operand = operand;
    e.args = {index};
    return push(std::move(e));
  }
  // Operand `operand`'s element `index` as an index: floats truncate toward zero.
  ExprId load_index(int operand, ExprId index) {
    ExprId v = load(operand, index);
    return k_.exprs[v].type == Scalar::i64 ? v : round(DType::i64, v);
  }
  ExprId op(Op op, Scalar type, std::vector<ExprId> args) {
    Expr e;
    e.kind = ExprKind::op;
    e.type = type;
    e.op = op;
    e.args = std::move(args);
    return push(std::move(e));
  }
  ExprId round(DType t, ExprId x) {
    Expr e;
    e.kind = ExprKind::round;
    e.type = scalar_of(t);
    e.dtype = t;
    e.args = {x};
    return push(std::move(e));
  }

  // Index arithmetic (i64), with constants folded.
  ExprId add(ExprId a, ExprId b) {
    if (is_integer(a, 0)) return b;
    if (is_integer(b, 0)) return a;
    if (constant(a) && constant(b)) return integer(value(a) + value(b));
    return op(Op::add, Scalar::i64, {a, b});
  }
  ExprId sub(ExprId a, ExprId b) {
    if (is_integer(b, 0)) return a;
    return op(Op::sub, Scalar::i64, {a, b});
  }
  ExprId mul(ExprId a, int64_t b) {
    if (b == 0) return integer(0);
    if (b == 1) return a;
    if (constant(a)) return integer(value(a) * b);
    return op(Op::mul, Scalar::i64, {a, integer(b)});
  }
  ExprId div(ExprId a, int64_t b) { return b == 1 ? a : op(Op::div, Scalar::i64, {a, integer(b)}); }
  ExprId rem(ExprId a, int64_t b) {
    return b == 1 ? integer(0) : op(Op::rem, Scalar::i64, {a, integer(b)});
  }
  ExprId compare(Op o, ExprId a, ExprId b) { return op(o, Scalar::i64, {a, b}); }
  ExprId both(ExprId a, ExprId b) {
    if (a == kNone) return b;
    return op(Op::logical_and, Scalar::i64, {a, b});
  }
  ExprId select(ExprId c, ExprId a, ExprId b) {
    return op(Op::select, k_.exprs[a].type, {c, a, b});
  }
  // Arithmetic in the class of a.
  ExprId arith(Op o, ExprId a, ExprId b) { return op(o, k_.exprs[a].type, {a, b}); }
  ExprId unary(Op o, ExprId a) { return op(o, k_.exprs[a].type, {a}); }
  Scalar type_of(ExprId e) const { return k_.exprs[e].type; }
  ExprId clamp(ExprId x, int64_t lo, int64_t hi) {
    x = select(compare(Op::lt, x, integer(lo)), integer(lo), x);
    return select(compare(Op::gt, x, integer(hi)), integer(hi), x);
  }
  // sum of terms[i].first * terms[i].second, plus base.
  ExprId linear(const std::vector<std::pair<ExprId, int64_t>>& terms, int64_t base = 0) {
    ExprId sum = integer(base);
    for (auto [e, stride] : terms) sum = add(sum, mul(e, stride));
    return sum;
  }
  // An index read from operand `operand` at `at`, negative counting from the end, clamped into
  // [0, size): the rule of gather, take_along and scatter.
  ExprId wrapped_index(int operand, ExprId at, int64_t size) {
    ExprId j = load_index(operand, at);
    j = select(compare(Op::lt, j, integer(0)), add(j, integer(size)), j);
    return clamp(j, 0, size - 1);
  }

 private:
  ExprId push(Expr e) {
    k_.exprs.push_back(std::move(e));
    return static_cast<ExprId>(k_.exprs.size() - 1);
  }
  ExprId index_leaf(ExprKind kind, int axis) {
    Expr e;
    e.kind = kind;
    e.type = Scalar::i64;
    e.axis = axis;
    return push(std::move(e));
  }
  bool constant(ExprId e) const {
    return k_.exprs[e].kind == ExprKind::constant && k_.exprs[e].type == Scalar::i64;
  }
  int64_t value(ExprId e) const { return k_.exprs[e].integer; }
  bool is_integer(ExprId e, int64_t v) const { return constant(e) && value(e) == v; }

  Kernel& k_;
  const std::vector<DType>& operands_;
};

std::vector<int64_t> sizes(const Shape& s) {
  std::vector<int64_t> v;
  for (int a = 0; a < s.rank(); ++a) v.push_back(s.size(a));
  return v;
}

Kernel make(const std::string& name, const Shape& out, std::vector<int64_t> space) {
  Kernel k;
  k.name = name;
  k.out = out.dtype();
  k.space = std::move(space);
  return k;
}

// out = the elementwise group rooted at `id`, its operands read through virtual broadcasts.
Kernel fused(const ir::Graph& g, const compiler::FusionPlan& plan, ValueId id,
             const std::vector<ValueId>& reads, const std::vector<DType>& dtypes,
             const std::string& name) {
  const compiler::FusionGroup& group = plan.groups[plan.group_of[id]];
  PRISM_CHECK(group.root == id, "kernel: %{} is inside a fusion group, not its root", id);
  const Shape& out = g.node(id).shape;
  Kernel k = make(name, out, sizes(out));
  Builder b(k, dtypes);
  std::vector<ExprId> reg(g.size(), kNone);
  for (ValueId v : group.operands) {
    const compiler::OperandRead read = compiler::read_through(g, plan, v, out);
    int operand =
        static_cast<int>(std::find(reads.begin(), reads.end(), read.source) - reads.begin());
    ExprId index = b.flat();
    if (!read.contiguous) {
      std::vector<std::pair<ExprId, int64_t>> terms;
      for (int a = 0; a < out.rank(); ++a) {
        if (read.strides[a] != 0 && out.size(a) != 1)
          terms.push_back({b.coord(a), read.strides[a]});
      }
      index = b.linear(terms);
    }
    reg[v] = b.load(operand, index);
  }
  for (ValueId m : group.nodes) {
    const ir::Node& n = g.node(m);
    const DType t = n.shape.dtype();
    std::vector<ExprId> args;
    for (ValueId in : n.inputs) args.push_back(reg[in]);
    if (n.op == Op::convert) {
      reg[m] = b.round(t, args[0]);
      continue;
    }
    const DType in = g.node(n.inputs[n.op == Op::select ? 1 : 0]).shape.dtype();
    PRISM_CHECK(prism::is_float(in) || ir::op_types(n.op) != ir::Types::floating,
                "kernel: elementwise {} is not defined for {}", ir::op_name(n.op), prism::name(in));
    reg[m] = b.op(n.op, scalar_of(t), std::move(args));
    // Halves are computed in float and rounded after every op, as one kernel per op would.
    if (t == DType::f16 || t == DType::bf16) reg[m] = b.round(t, reg[m]);
  }
  k.value = reg[id];
  return k;
}

// out[i] = in0[base + sum_a c_a * strides[a]]: broadcast, transpose, slice.
Kernel strided(const Shape& out, const std::vector<DType>& dtypes,
               const std::array<int64_t, kMaxRank>& strides, int64_t base,
               const std::string& name) {
  Kernel k = make(name, out, sizes(out));
  Builder b(k, dtypes);
  std::vector<std::pair<ExprId, int64_t>> terms;
  for (int a = 0; a < out.rank(); ++a) {
    if (strides[a] != 0) terms.push_back({b.coord(a), strides[a]});
  }
  k.value = b.load(0, b.linear(terms, base));
  return k;
}

// s_a: start `a` read from operand first + a, clamped so that `window` fits in `operand`.
std::vector<ExprId> clamped_starts(Builder& b, int first, const Shape& operand,
                                   const Shape& window) {
  std::vector<ExprId> s;
  for (int a = 0; a < operand.rank(); ++a) {
    s.push_back(
        b.clamp(b.load_index(first + a, b.integer(0)), 0, operand.size(a) - window.size(a)));
  }
  return s;
}

Kernel concatenate(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                   const std::string& name) {
  const int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& out = n.shape;
  Kernel k = make(name, out, sizes(out));
  Builder b(k, dtypes);
  // Each part's load is masked by its range along the axis; the last part in range wins.
  ExprId value = kNone;
  int64_t at = 0;
  for (size_t p = 0; p < n.inputs.size(); ++p) {
    const Shape& part = g.node(n.inputs[p]).shape;
    auto ps = part.strides();
    std::vector<std::pair<ExprId, int64_t>> terms;
    for (int a = 0; a < out.rank(); ++a) {
      ExprId c = a == axis ? b.sub(b.coord(a), b.integer(at)) : b.coord(a);
      terms.push_back({c, ps[a]});
    }
    ExprId inside = b.both(b.compare(Op::ge, b.coord(axis), b.integer(at)),
                           b.compare(Op::lt, b.coord(axis), b.integer(at + part.size(axis))));
    ExprId v = b.load(static_cast<int>(p), b.linear(terms), inside);
    value = value == kNone ? v : b.select(inside, v, value);
    at += part.size(axis);
  }
  k.value = value;
  return k;
}

Kernel gather(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
              const std::string& name) {
  const int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  const Shape& out = n.shape;  // x's axes with `axis` replaced by idx's
  Kernel k = make(name, out, sizes(out));
  Builder b(k, dtypes);
  auto xs = x.strides(), is = idx.strides();
  std::vector<std::pair<ExprId, int64_t>> src, at_idx;
  for (int a = 0; a < out.rank(); ++a) {
    if (a < axis) {
      src.push_back({b.coord(a), xs[a]});
    } else if (a < axis + idx.rank()) {
      at_idx.push_back({b.coord(a), is[a - axis]});
    } else {
      src.push_back({b.coord(a), xs[a - idx.rank() + 1]});
    }
  }
  ExprId j = b.wrapped_index(1, b.linear(at_idx), x.size(axis));
  src.push_back({j, xs[axis]});
  k.value = b.load(0, b.linear(src));
  return k;
}

Kernel take_along(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                  const std::string& name) {
  const int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  Kernel k = make(name, n.shape, sizes(idx));
  Builder b(k, dtypes);
  auto xs = x.strides();
  ExprId j = b.wrapped_index(1, b.flat(), x.size(axis));
  std::vector<std::pair<ExprId, int64_t>> src;
  for (int a = 0; a < idx.rank(); ++a) src.push_back({a == axis ? j : b.coord(a), xs[a]});
  k.value = b.load(0, b.linear(src));
  return k;
}

Kernel pad(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
           const std::string& name) {
  const auto& attrs = n.attr<ir::PadAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  Kernel k = make(name, n.shape, sizes(n.shape));
  Builder b(k, dtypes);
  auto xs = x.strides();
  ExprId inside = kNone;
  std::vector<std::pair<ExprId, int64_t>> src;
  for (int a = 0; a < x.rank(); ++a) {
    const int64_t size = x.size(a);
    ExprId j = b.sub(b.coord(a), b.integer(attrs.low[a]));
    switch (attrs.mode) {
      case ir::PadMode::constant:
        inside = b.both(inside, b.both(b.compare(Op::ge, j, b.integer(0)),
                                       b.compare(Op::lt, j, b.integer(size))));
        break;
      case ir::PadMode::edge:
        j = b.clamp(j, 0, size - 1);
        break;
      case ir::PadMode::reflect:  // without repeating the edge
        j = b.select(b.compare(Op::lt, j, b.integer(0)), b.sub(b.integer(0), j), j);
        j = b.select(b.compare(Op::ge, j, b.integer(size)), b.sub(b.integer(2 * (size - 1)), j), j);
        break;
    }
    src.push_back({j, xs[a]});
  }
  ExprId from_x = b.load(0, b.linear(src), inside);
  k.value = inside == kNone ? from_x : b.select(inside, from_x, b.load(1, b.integer(0)));
  return k;
}

// The output first holds the operand (a copy unless it runs in place); then one work item per
// element of the update writes it into the clamped window.
std::vector<Kernel> dynamic_update_slice(const ir::Graph& g, const ir::Node& n,
                                         const std::vector<DType>& dtypes,
                                         const std::string& name) {
  const Shape& x = n.shape;
  const Shape& update = g.node(n.inputs[1]).shape;
  Kernel copy = make(name + "_copy", x, sizes(x));
  {
    Builder b(copy, dtypes);
    copy.value = b.load(0, b.flat());
    copy.when = InPlace::when_not_in_place;
  }
  Kernel window = make(name + "_window", x, sizes(update));
  Builder b(window, dtypes);
  std::vector<ExprId> s = clamped_starts(b, 2, x, update);
  auto xs = x.strides();
  std::vector<std::pair<ExprId, int64_t>> dst;
  for (int a = 0; a < x.rank(); ++a) dst.push_back({b.add(b.coord(a), s[a]), xs[a]});
  window.at = b.linear(dst);
  window.value = b.load(1, b.flat());
  return {std::move(copy), std::move(window)};
}

Kernel reduce(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
              const std::string& name) {
  const Shape& x = g.node(n.inputs[0]).shape;
  const auto& axes = n.attr<ir::AxesAttrs>().axes;
  auto xs = x.strides();
  std::vector<int64_t> kept, extents;
  std::vector<int> kept_axes;
  for (int a = 0; a < x.rank(); ++a) {
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) {
      kept.push_back(x.size(a));
      kept_axes.push_back(a);
    }
  }
  for (int a : axes) extents.push_back(x.size(a));
  Combine combine = n.op == Op::reduce_sum    ? Combine::sum
                    : n.op == Op::reduce_prod ? Combine::prod
                    : n.op == Op::reduce_max  ? Combine::max
                                              : Combine::min;
  Kernel k = make(name, n.shape, kept);
  Builder b(k, dtypes);
  int loop = b.add_loop(extents, combine, scalar_of(x.dtype()));
  std::vector<std::pair<ExprId, int64_t>> src;
  for (size_t j = 0; j < kept_axes.size(); ++j) {
    src.push_back({b.coord(static_cast<int>(j)), xs[kept_axes[j]]});
  }
  for (size_t j = 0; j < axes.size(); ++j) {
    src.push_back({b.loop(loop, static_cast<int>(j)), xs[axes[j]]});
  }
  k.loops[loop].operand = b.load(0, b.linear(src));
  k.value = b.result(loop);
  return k;
}

// x viewed as {outer, middle, inner} around axes [first, last).
struct Lanes {
  int64_t outer = 1, middle = 1, inner = 1;
};
Lanes lanes(const Shape& s, int first, int last) {
  Lanes r;
  for (int i = 0; i < s.rank(); ++i)
    (i < first ? r.outer : i < last ? r.middle : r.inner) *= s.size(i);
  return r;
}

Kernel arg_reduce(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                  const std::string& name) {
  const Shape& x = g.node(n.inputs[0]).shape;
  const int axis = n.attr<ir::AxisAttrs>().axis;
  Lanes s = lanes(x, axis, axis + 1);
  Kernel k = make(name, n.shape, {s.outer, s.inner});
  Builder b(k, dtypes);
  int loop = b.add_loop({s.middle}, n.op == Op::argmax ? Combine::argmax : Combine::argmin,
                        scalar_of(x.dtype()));
  k.loops[loop].operand = b.load(
      0, b.linear({{b.coord(0), s.middle * s.inner}, {b.loop(loop), s.inner}, {b.coord(1), 1}}));
  k.value = b.result(loop);
  return k;
}

// A running sum along the axis, one work item per lane: the loop stores on every step.
Kernel cumsum(const ir::Node& n, const std::vector<DType>& dtypes, const std::string& name) {
  const auto& a = n.attr<ir::AxisAttrs>();
  const Shape& x = n.shape;
  Lanes s = lanes(x, a.axis, a.axis + 1);
  Kernel k = make(name, x, {s.outer, s.inner});
  Builder b(k, dtypes);
  int loop = b.add_loop({s.middle}, Combine::sum, scalar_of(x.dtype()));
  k.loops[loop].writes = true;
  k.loops[loop].exclusive = a.exclusive;
  ExprId m = a.reverse ? b.sub(b.integer(s.middle - 1), b.loop(loop)) : b.loop(loop);
  k.at = b.linear({{b.coord(0), s.middle * s.inner}, {m, s.inner}, {b.coord(1), 1}});
  k.loops[loop].operand = b.load(0, k.at);
  k.value = b.result(loop);
  return k;
}

// The first k of a stable sort along the axis: one work item per element counts the elements
// that sort before it (a strict total order: value, then position; NaN is the largest value)
// and, when that rank is below k, stores its position there.
Kernel argsort(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
               const std::string& name) {
  const auto& a = n.attr<ir::ArgsortAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  Lanes s = lanes(x, a.axis, a.axis + 1);
  Kernel k = make(name, n.shape, {s.outer, s.middle, s.inner});
  Builder b(k, dtypes);
  int loop = b.add_loop({s.middle}, Combine::sum, Scalar::i64);
  ExprId q = b.coord(1), p = b.loop(loop);
  auto element = [&](ExprId m) {
    return b.load(0, b.linear({{b.coord(0), s.middle * s.inner}, {m, s.inner}, {b.coord(2), 1}}));
  };
  ExprId vq = element(q), vp = element(p);
  ExprId earlier = b.compare(Op::lt, p, q);
  ExprId before = b.select(b.compare(Op::ne, vp, vq),
                           b.compare(a.descending ? Op::gt : Op::lt, vp, vq), earlier);
  if (is_float(b.type_of(vq))) {
    ExprId np = b.op(Op::is_nan, Scalar::i64, {vp}), nq = b.op(Op::is_nan, Scalar::i64, {vq});
    ExprId nan_order = b.select(b.both(np, nq), earlier, a.descending ? np : nq);
    before = b.select(b.op(Op::logical_or, Scalar::i64, {np, nq}), nan_order, before);
  }
  k.loops[loop].operand = before;
  ExprId rank = b.result(loop);
  k.mask = b.compare(Op::lt, rank, b.integer(a.k));
  k.at = b.linear({{b.coord(0), a.k * s.inner}, {rank, s.inner}, {b.coord(2), 1}});
  k.value = q;
  return k;
}

// The output first holds the operand (a copy unless it runs in place); then one work item per
// lane of the indices walks them in order, so that repeated indices combine in the order the
// CPU applies them.
std::vector<Kernel> scatter(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                            const std::string& name) {
  const auto& a = n.attr<ir::ScatterAttrs>();
  const Shape& x = n.shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  Kernel copy = make(name + "_copy", x, sizes(x));
  {
    Builder b(copy, dtypes);
    copy.value = b.load(0, b.flat());
    copy.when = InPlace::when_not_in_place;
  }
  std::vector<int64_t> lane_sizes;
  for (int i = 0; i < idx.rank(); ++i) {
    if (i != a.axis) lane_sizes.push_back(idx.size(i));
  }
  Kernel k = make(name + "_scatter", x, lane_sizes);
  Builder b(k, dtypes);
  int loop = b.add_loop({idx.size(a.axis)}, Combine::none, scalar_of(x.dtype()));
  k.loops[loop].writes = true;
  auto is = idx.strides(), xs = x.strides();
  std::vector<std::pair<ExprId, int64_t>> at_idx{{b.loop(loop), is[a.axis]}}, at_x;
  for (int i = 0, l = 0; i < idx.rank(); ++i) {
    if (i == a.axis) continue;
    at_idx.push_back({b.coord(l), is[i]});
    at_x.push_back({b.coord(l), xs[i]});
    ++l;
  }
  ExprId t = b.linear(at_idx);
  at_x.push_back({b.wrapped_index(1, t, x.size(a.axis)), xs[a.axis]});
  k.at = b.linear(at_x);
  ExprId update = b.load(2, t), old = b.load(-1, k.at);
  switch (a.reduce) {
    case ir::ScatterReduce::none:
      k.value = update;
      break;
    case ir::ScatterReduce::add:
      k.value = b.arith(Op::add, old, update);
      break;
    case ir::ScatterReduce::mul:
      k.value = b.arith(Op::mul, old, update);
      break;
    case ir::ScatterReduce::max:  // the update where it is larger: a NaN update is skipped
      k.value = b.select(b.compare(Op::lt, old, update), update, old);
      break;
    case ir::ScatterReduce::min:
      k.value = b.select(b.compare(Op::lt, update, old), update, old);
      break;
  }
  return {std::move(copy), std::move(k)};
}

void require_float(const ir::Node& n, DType t) {
  PRISM_CHECK(prism::is_float(t), "kernel: {} needs a floating-point dtype, not {}",
              ir::op_name(n.op), prism::name(t));
}

// Softmax and log_softmax: a group of threads per lane finds its max, sums the exponentials,
// then writes the lane.
Kernel softmax(const ir::Node& n, const std::vector<DType>& dtypes, const std::string& name) {
  const Shape& x = n.shape;
  require_float(n, x.dtype());
  const int axis = n.attr<ir::AxisAttrs>().axis;
  Lanes s = lanes(x, axis, axis + 1);
  const Scalar t = scalar_of(x.dtype());
  Kernel k = make(name, x, {s.outer * s.inner});
  k.cooperative = true;
  Builder b(k, dtypes);
  ExprId base =
      b.add(b.mul(b.div(b.flat(), s.inner), s.middle * s.inner), b.rem(b.flat(), s.inner));
  auto at = [&](int loop) { return b.add(base, b.mul(b.loop(loop), s.inner)); };
  int max = b.add_loop({s.middle}, Combine::max, t);
  k.loops[max].operand = b.load(0, at(max));
  int sum = b.add_loop({s.middle}, Combine::sum, t);
  k.loops[sum].operand = b.unary(Op::exp, b.arith(Op::sub, b.load(0, at(sum)), b.result(max)));
  int write = b.add_loop({s.middle}, Combine::none, t);
  k.loops[write].writes = true;
  k.at = at(write);
  ExprId shifted = b.arith(Op::sub, b.load(0, k.at), b.result(max));
  if (n.op == Op::log_softmax) {
    k.value = b.arith(Op::sub, shifted, b.unary(Op::log, b.result(sum)));
  } else {
    ExprId inverse = b.arith(Op::div, b.real(1, t), b.result(sum));
    k.value = b.arith(Op::mul, b.unary(Op::exp, shifted), inverse);
  }
  return k;
}

// rms_norm and layer_norm over contiguous axes: a group of threads per lane sums (the mean,
// then) the squares, then writes the lane scaled.
Kernel norm(const ir::Node& n, const std::vector<DType>& dtypes, const std::string& name) {
  const Shape& x = n.shape;
  require_float(n, x.dtype());
  const auto& attrs = n.attr<ir::NormAttrs>();
  Lanes s = lanes(x, attrs.axes.front(), attrs.axes.back() + 1);
  const Scalar t = scalar_of(x.dtype());
  Kernel k = make(name, x, {s.outer * s.inner});
  k.cooperative = true;
  Builder b(k, dtypes);
  ExprId base =
      b.add(b.mul(b.div(b.flat(), s.inner), s.middle * s.inner), b.rem(b.flat(), s.inner));
  auto element = [&](int loop) { return b.load(0, b.add(base, b.mul(b.loop(loop), s.inner))); };
  ExprId count = b.real(static_cast<double>(s.middle), t);
  ExprId mean = b.real(0, t);
  if (n.op == Op::layer_norm) {
    int sum = b.add_loop({s.middle}, Combine::sum, t);
    k.loops[sum].operand = element(sum);
    mean = b.arith(Op::div, b.result(sum), count);
  }
  int squares = b.add_loop({s.middle}, Combine::sum, t);
  ExprId centered = b.arith(Op::sub, element(squares), mean);
  k.loops[squares].operand = b.arith(Op::mul, centered, centered);
  ExprId scale = b.arith(
      Op::div, b.real(1, t),
      b.unary(Op::sqrt,
              b.arith(Op::add, b.arith(Op::div, b.result(squares), count), b.real(attrs.eps, t))));
  int write = b.add_loop({s.middle}, Combine::none, t);
  k.loops[write].writes = true;
  k.at = b.add(base, b.mul(b.loop(write), s.inner));
  k.value = b.arith(Op::mul, b.arith(Op::sub, b.load(0, k.at), mean), scale);
  return k;
}

// Rotary embedding, one work item per element: it reads its partner in the rotated pair and
// the pair's cos and sin.
Kernel rope(const ir::Node& n, const std::vector<DType>& dtypes, const std::string& name) {
  const Shape& x = n.shape;
  require_float(n, x.dtype());
  const bool interleaved = n.attr<ir::RopeAttrs>().interleaved;
  const int64_t d = x.size(x.rank() - 1), half = d / 2;
  Kernel k = make(name, x, {x.numel() / std::max<int64_t>(d, 1), d});
  Builder b(k, dtypes);
  ExprId row = b.coord(0), m = b.coord(1);
  ExprId first = interleaved ? b.compare(Op::eq, b.rem(m, 2), b.integer(0))
                             : b.compare(Op::lt, m, b.integer(half));
  ExprId i = interleaved ? b.div(m, 2) : b.select(first, m, b.sub(m, b.integer(half)));
  ExprId step = b.integer(interleaved ? 1 : half);
  ExprId partner = b.select(first, b.add(b.flat(), step), b.sub(b.flat(), step));
  ExprId pair = b.add(b.mul(row, half), i);
  ExprId co = b.load(1, pair), si = b.load(2, pair);
  ExprId self = b.load(0, b.flat()), other = b.load(0, partner);
  ExprId rotated = b.arith(Op::mul, other, si);
  ExprId scaled = b.arith(Op::mul, self, co);
  k.value = b.select(first, b.arith(Op::sub, scaled, rotated), b.arith(Op::add, scaled, rotated));
  return k;
}

// Value `col` of row `row` of weights kept in ggml's blocks (operand `operand`: u8 {rows,
// row_bytes}), in f32, as prism::quant::dequantize computes it (the same products and
// differences, in the same order). Each integer field is picked out of its byte by integer
// division and remainder; the f16 scales are read through an f16 view of the bytes (every
// block format keeps them at even offsets, in blocks of an even size).
ExprId dequantized(Builder& b, int operand, quant::GgmlType format, int64_t row_bytes, ExprId row,
                   ExprId col) {
  using quant::GgmlType;
  const quant::GgmlTypeInfo& t = quant::info(format);
  PRISM_CHECK(t.block_bytes % 2 == 0 && row_bytes % 2 == 0,
              "kernel: {} blocks of {} bytes have no f16 view", t.name, t.block_bytes);
  const ExprId block = b.div(col, t.block_elements), e = b.rem(col, t.block_elements);
  const ExprId base = b.add(b.mul(row, row_bytes), b.mul(block, t.block_bytes));
  auto c = [&](int64_t v) { return b.integer(v); };
  auto byte = [&](ExprId at) { return b.load(operand, b.add(base, at)); };
  auto f16 = [&](int64_t at) {  // the scale at byte `at` of the block
    ExprId half = b.add(b.mul(row, row_bytes / 2), b.mul(block, t.block_bytes / 2));
    return b.load_as(operand, DType::f16, b.add(half, c(at / 2)));
  };
  auto real = [&](ExprId i) { return b.round(DType::f32, i); };
  auto mul = [&](ExprId x, ExprId y) { return b.arith(Op::mul, x, y); };
  auto lt = [&](ExprId x, int64_t v) { return b.compare(Op::lt, x, c(v)); };
  // (v >> shift) & (2^bits - 1), with shift an expression.
  auto bits = [&](ExprId v, ExprId shift, int64_t modulus) {
    ExprId divisor = b.op(Op::pow, Scalar::i64, {c(2), shift});
    return b.rem(b.op(Op::div, Scalar::i64, {v, divisor}), modulus);
  };
  // The low nibble of v, or its high one where `high`.
  auto nibble = [&](ExprId v, ExprId high) { return b.select(high, b.div(v, 16), b.rem(v, 16)); };
  auto signed_byte = [&](ExprId v) {
    return b.select(b.compare(Op::ge, v, c(128)), b.sub(v, c(256)), v);
  };
  // Q4_0's and Q5_0's: element j < 16 in the low nibble of byte j, j >= 16 in the high one.
  auto low_nibbles = [&](int64_t first) {
    return nibble(byte(b.add(c(first), b.rem(e, 16))), b.compare(Op::ge, e, c(16)));
  };
  // Q5_0's fifth bit: bit e of the 32-bit word at `first`.
  auto fifth_bit = [&](int64_t first) {
    return bits(byte(b.add(c(first), b.div(e, 8))), b.rem(e, 8), 2);
  };
  // The K-quants' sub-block s = e / 32: 6-bit scale (or, with `min`, offset) from the 12
  // bytes at 4: sub-blocks 0-3 six bits of one byte, 4-7 four bits of one and two of another.
  const ExprId s = b.div(e, 32);
  auto k_scale = [&](bool min) {
    ExprId first = b.rem(byte(b.add(s, c(min ? 8 : 4))), 64);
    ExprId low = b.rem(b.div(byte(b.add(s, c(8))), min ? 16 : 1), 16);
    ExprId high = b.rem(b.div(byte(b.sub(b.add(s, c(4)), c(min ? 0 : 4))), 64), 4);
    return real(b.select(lt(s, 4), first, b.add(low, b.mul(high, 16))));
  };
  // Q4_K's and Q5_K's nibbles: sub-block s in run s / 2 of 32 bytes, low nibble for even s.
  auto k_nibble = [&](int64_t first) {
    ExprId at = b.add(c(first), b.add(b.mul(b.div(e, 64), 32), b.rem(e, 32)));
    return nibble(byte(at), b.compare(Op::eq, b.rem(s, 2), c(1)));
  };
  switch (format) {
    case GgmlType::Q8_0:
      return mul(real(signed_byte(byte(b.add(c(2), e)))), f16(0));
    case GgmlType::Q4_0:
      return mul(f16(0), real(b.sub(low_nibbles(2), c(8))));
    case GgmlType::Q4_1:
      return b.arith(Op::add, mul(f16(0), real(low_nibbles(4))), f16(2));
    case GgmlType::Q5_0:
      return mul(f16(0), real(b.sub(b.add(low_nibbles(6), b.mul(fifth_bit(2), 16)), c(16))));
    case GgmlType::Q5_1:
      return b.arith(Op::add, mul(f16(0), real(b.add(low_nibbles(8), b.mul(fifth_bit(4), 16)))),
                     f16(2));
    case GgmlType::Q4_K:
      return b.arith(Op::sub, mul(mul(f16(0), k_scale(false)), real(k_nibble(16))),
                     mul(f16(2), k_scale(true)));
    case GgmlType::Q5_K: {
      ExprId high = bits(byte(b.add(c(16), b.rem(e, 32))), s, 2);
      return b.arith(Op::sub,
                     mul(mul(f16(0), k_scale(false)), real(b.add(k_nibble(48), b.mul(high, 16)))),
                     mul(f16(2), k_scale(true)));
    }
    case GgmlType::Q6_K: {
      // Each half of 128 reads 64 nibble bytes and 32 bytes of 2-bit pairs; its run j of 32
      // takes nibble byte (j % 2) * 32 + l (low for j < 2) and bits 2j, 2j + 1 of pair byte l.
      const ExprId half = b.div(e, 128), run = b.div(b.rem(e, 128), 32), l = b.rem(e, 32);
      ExprId low = nibble(byte(b.add(b.mul(half, 64), b.add(b.mul(b.rem(run, 2), 32), l))),
                          b.compare(Op::ge, run, c(2)));
      ExprId high = bits(byte(b.add(c(128), b.add(b.mul(half, 32), l))), b.mul(run, 2), 4);
      ExprId scale = signed_byte(byte(b.add(c(192), b.div(e, 16))));
      return mul(mul(f16(208), real(scale)), real(b.sub(b.add(low, b.mul(high, 16)), c(32))));
    }
    default:
      fail("kernel: no dequantization of {} blocks", t.name);
  }
}

bool dequantizes(quant::GgmlType format) {
  using quant::GgmlType;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    if (t == format) return true;
  }
  return false;
}

// A dequantize materialized: one work item per value.
Kernel dequantize(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                  const std::string& name) {
  require_float(n, n.shape.dtype());
  const Shape& in = g.node(n.inputs[0]).shape;
  const int64_t values = n.shape.size(n.shape.rank() - 1);
  Kernel k = make(name, n.shape, {n.shape.numel()});
  Builder b(k, dtypes);
  k.value = dequantized(b, 0, n.attr<ir::DequantizeAttrs>().format, in.size(in.rank() - 1),
                        b.div(b.flat(), values), b.rem(b.flat(), values));
  return k;
}

// dot_general, one work item per output element over the contraction: a group of threads per
// element when both operands are contiguous along a long contraction (x . W for a linear
// layer's [out, in] weight, as in decoding), so that the weights stream at full width.
// A product by a folded dequantize (`folded`) reads the weights from their blocks.
Kernel dot(const ir::Graph& g, const ir::Node& n, bool folded, const std::vector<DType>& dtypes,
           const std::string& name) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  auto lst = ls.strides(), rst = rs.strides();
  auto contains = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<int> lfree, rfree;
  for (int i = 0; i < ls.rank(); ++i)
    if (!contains(a.lhs_batch, i) && !contains(a.lhs_contract, i)) lfree.push_back(i);
  for (int i = 0; i < rs.rank(); ++i)
    if (!contains(a.rhs_batch, i) && !contains(a.rhs_contract, i)) rfree.push_back(i);
  std::vector<int64_t> extents;
  int64_t contraction = 1;
  for (int c : a.lhs_contract) {
    extents.push_back(ls.size(c));
    contraction *= ls.size(c);
  }
  const bool rows = a.lhs_contract.size() == 1 && lst[a.lhs_contract[0]] == 1 &&
                    rst[a.rhs_contract[0]] == 1 && contraction >= 32;
  Kernel k = make(name, n.shape, sizes(n.shape));
  if (rows) {  // a warp's worth of threads per element
    k.space = {n.shape.numel()};
    k.cooperative = true;
    k.threads = 32;
  }
  Builder b(k, dtypes);
  const Scalar acc = scalar_of(n.shape.dtype());
  int loop = b.add_loop(extents, Combine::sum, acc);
  // Output axes: batch, lhs free, rhs free.
  std::vector<ExprId> c;
  if (rows) {
    std::array<int64_t, kMaxRank> os = n.shape.strides();
    for (int i = 0; i < n.shape.rank(); ++i)
      c.push_back(b.rem(b.div(b.flat(), os[i]), n.shape.size(i)));
  } else {
    for (int i = 0; i < n.shape.rank(); ++i) c.push_back(b.coord(i));
  }
  std::vector<std::pair<ExprId, int64_t>> l, r;
  int axis = 0;
  for (size_t j = 0; j < a.lhs_batch.size(); ++j, ++axis) {
    l.push_back({c[axis], lst[a.lhs_batch[j]]});
    r.push_back({c[axis], rst[a.rhs_batch[j]]});
  }
  for (int f : lfree) l.push_back({c[axis++], lst[f]});
  for (int f : rfree) r.push_back({c[axis++], rst[f]});
  for (size_t j = 0; j < a.lhs_contract.size(); ++j) {
    l.push_back({b.loop(loop, static_cast<int>(j)), lst[a.lhs_contract[j]]});
    r.push_back({b.loop(loop, static_cast<int>(j)), rst[a.rhs_contract[j]]});
  }
  ExprId lv = b.load(0, b.linear(l)), rv;
  const ir::Node& w = g.node(n.inputs[1]);
  if (folded) {  // weights {n, k} read from their blocks {n, row_bytes}
    const Shape& blocks = g.node(w.inputs[0]).shape;
    rv = dequantized(b, 1, w.attr<ir::DequantizeAttrs>().format, blocks.size(1),
                     c[a.lhs_batch.size() + lfree.size()], b.loop(loop, 0));
  } else {
    rv = b.load(1, b.linear(r));
  }
  k.loops[loop].operand = b.op(Op::mul, acc, {lv, rv});
  k.value = b.result(loop);
  return k;
}

// Convolution, one work item per output element over its window and the group's channels;
// taps that fall in the padding add nothing.
Kernel convolution(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                   const std::string& name) {
  const auto& a = n.attr<ir::ConvAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& w = g.node(n.inputs[1]).shape;
  const Shape& y = n.shape;  // c0 batch, c1 output channel, c2.. spatial
  const int spatial = x.rank() - 2;
  const int64_t channels = w.size(1), per_group = w.size(0) / a.groups;
  auto xs = x.strides(), ws = w.strides();
  Kernel k = make(name, y, sizes(y));
  Builder b(k, dtypes);
  std::vector<int64_t> extents;
  for (int i = 0; i < spatial; ++i) extents.push_back(w.size(2 + i));
  extents.push_back(channels);
  const Scalar acc = scalar_of(y.dtype());
  int loop = b.add_loop(extents, Combine::sum, acc);
  ExprId ch = b.loop(loop, spatial);
  ExprId group = b.div(b.coord(1), per_group);
  std::vector<std::pair<ExprId, int64_t>> xi{{b.coord(0), xs[0]},
                                             {b.add(b.mul(group, channels), ch), xs[1]}},
      wi{{b.coord(1), ws[0]}, {ch, ws[1]}};
  ExprId inside = kNone;
  for (int i = 0; i < spatial; ++i) {
    ExprId tap = b.loop(loop, i);
    ExprId p = b.add(b.sub(b.mul(b.coord(2 + i), a.strides[i]), b.integer(a.pad_low[i])),
                     b.mul(tap, a.dilations[i]));
    inside = b.both(inside, b.both(b.compare(Op::ge, p, b.integer(0)),
                                   b.compare(Op::lt, p, b.integer(x.size(2 + i)))));
    xi.push_back({p, xs[2 + i]});
    wi.push_back({tap, ws[2 + i]});
  }
  ExprId xv = b.load(0, b.linear(xi), inside), wv = b.load(1, b.linear(wi));
  k.loops[loop].operand = b.op(Op::mul, acc, {xv, wv});
  k.value = b.result(loop);
  return k;
}

}  // namespace

std::optional<Step> lower(const ir::Graph& g, const compiler::FusionPlan& plan, ValueId id,
                          const std::string& name) {
  const ir::Node& n = g.node(id);
  if (lowering_of(n.op) != Lowering::kernel_ir) return std::nullopt;
  Step step;
  step.reads = step_reads(g, plan, id);
  std::vector<DType> dtypes;
  for (ValueId v : step.reads) dtypes.push_back(g.node(v).shape.dtype());
  const Shape& out = n.shape;
  auto one = [&](Kernel k) {
    step.kernels.push_back(std::move(k));
    return std::optional<Step>(std::move(step));
  };
  if (ir::is_elementwise(n.op)) return one(fused(g, plan, id, step.reads, dtypes, name));
  switch (n.op) {
    case Op::iota: {
      Kernel k = make(name, out, sizes(out));
      Builder b(k, dtypes);
      k.value = b.coord(n.attr<ir::AxisAttrs>().axis);
      return one(std::move(k));
    }
    case Op::reshape: {  // only when the executable cannot alias it: a plain copy
      Kernel k = make(name, out, sizes(out));
      Builder b(k, dtypes);
      k.value = b.load(0, b.flat());
      return one(std::move(k));
    }
    case Op::broadcast: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& dims = n.attr<ir::AxesAttrs>().axes;
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      for (int i = 0; i < in.rank(); ++i) {
        if (in.size(i) == out.size(dims[i])) src[dims[i]] = is[i];
      }
      return one(strided(out, dtypes, src, 0, name));
    }
    case Op::transpose: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& perm = n.attr<ir::AxesAttrs>().axes;
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      for (int i = 0; i < out.rank(); ++i) src[i] = is[perm[i]];
      return one(strided(out, dtypes, src, 0, name));
    }
    case Op::slice: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& a = n.attr<ir::SliceAttrs>();
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      int64_t base = 0;
      for (int i = 0; i < out.rank(); ++i) {
        src[i] = is[i] * a.strides[i];
        base += a.starts[i] * is[i];
      }
      return one(strided(out, dtypes, src, base, name));
    }
    case Op::dynamic_slice: {
      const Shape& in = g.node(n.inputs[0]).shape;
      Kernel k = make(name, out, sizes(out));
      Builder b(k, dtypes);
      std::vector<ExprId> s = clamped_starts(b, 1, in, out);
      auto is = in.strides();
      std::vector<std::pair<ExprId, int64_t>> src;
      for (int a = 0; a < out.rank(); ++a) src.push_back({b.add(b.coord(a), s[a]), is[a]});
      k.value = b.load(0, b.linear(src));
      return one(std::move(k));
    }
    case Op::dynamic_update_slice:
      step.kernels = dynamic_update_slice(g, n, dtypes, name);
      return step;
    case Op::scatter:
      step.kernels = scatter(g, n, dtypes, name);
      return step;
    case Op::concatenate:
      return one(concatenate(g, n, dtypes, name));
    case Op::gather:
      return one(gather(g, n, dtypes, name));
    case Op::take_along:
      return one(take_along(g, n, dtypes, name));
    case Op::pad:
      return one(pad(g, n, dtypes, name));
    case Op::reduce_sum:
    case Op::reduce_prod:
    case Op::reduce_max:
    case Op::reduce_min:
      return one(reduce(g, n, dtypes, name));
    case Op::argmax:
    case Op::argmin:
      return one(arg_reduce(g, n, dtypes, name));
    case Op::cumsum:
      return one(cumsum(n, dtypes, name));
    case Op::argsort:
      return one(argsort(g, n, dtypes, name));
    case Op::dot:
      return one(dot(g, n, reads_folded(plan, n), dtypes, name));
    case Op::dequantize:
      return one(dequantize(g, n, dtypes, name));
    case Op::convolution:
      return one(convolution(g, n, dtypes, name));
    case Op::softmax:
    case Op::log_softmax:
      return one(softmax(n, dtypes, name));
    case Op::rms_norm:
    case Op::layer_norm:
      return one(norm(n, dtypes, name));
    case Op::rope:
      return one(rope(n, dtypes, name));
    default:
      return std::nullopt;
  }
}

// An op added to ops.def without a case here is an error, not a warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
Lowering lowering_of(Op op) {
  switch (op) {
    case Op::parameter:
    case Op::input:
    case Op::constant:
      return Lowering::leaf;
    case Op::attention:
      return Lowering::backend;
    case Op::gated_delta_rule:
    case Op::short_conv:
      return Lowering::decomposed;
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::mesh_coordinate:
      return Lowering::collective;
    case Op::iota:
    case Op::neg:
    case Op::abs:
    case Op::exp:
    case Op::log:
    case Op::log1p:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::tanh:
    case Op::logistic:
    case Op::sin:
    case Op::cos:
    case Op::erf:
    case Op::floor:
    case Op::ceil:
    case Op::round:
    case Op::sign:
    case Op::logical_not:
    case Op::is_nan:
    case Op::convert:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::pow:
    case Op::max:
    case Op::min:
    case Op::rem:
    case Op::atan2:
    case Op::logical_and:
    case Op::logical_or:
    case Op::logical_xor:
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::select:
    case Op::reduce_sum:
    case Op::reduce_max:
    case Op::reduce_min:
    case Op::reduce_prod:
    case Op::argmax:
    case Op::argmin:
    case Op::dot:
    case Op::broadcast:
    case Op::reshape:
    case Op::transpose:
    case Op::slice:
    case Op::dynamic_slice:
    case Op::dynamic_update_slice:
    case Op::concatenate:
    case Op::gather:
    case Op::take_along:
    case Op::scatter:
    case Op::pad:
    case Op::convolution:
    case Op::argsort:
    case Op::cumsum:
    case Op::softmax:
    case Op::log_softmax:
    case Op::rms_norm:
    case Op::layer_norm:
    case Op::rope:
    case Op::dequantize:
      return Lowering::kernel_ir;
  }
  fail("kernel: op {} is not in ops.def", static_cast<int>(op));
}
#pragma GCC diagnostic pop

bool lowers(const ir::Node& n) {
  if (!prism::is_float(n.shape.dtype())) return false;
  switch (n.op) {
    case Op::softmax:
    case Op::log_softmax:
    case Op::rope:
      return true;
    case Op::dequantize:
      return dequantizes(n.attr<ir::DequantizeAttrs>().format);
    case Op::rms_norm:
    case Op::layer_norm: {
      const auto& axes = n.attr<ir::NormAttrs>().axes;
      return !axes.empty() && axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
    }
    default:
      return false;
  }
}

std::string print(const Kernel& k) {
  static constexpr const char* kScalar[] = {"f64", "f32", "i64"};
  static constexpr const char* kCombine[] = {"none", "sum",    "prod",  "max",
                                             "min",  "argmax", "argmin"};
  std::string s = fmt::format("kernel {} -> {} over [{}]{}", k.name, name(k.out),
                              fmt::join(k.space, ", "), k.cooperative ? " cooperative" : "");
  if (k.when == InPlace::when_not_in_place) s += " (when not in place)";
  s += "\n";
  for (size_t j = 0; j < k.loops.size(); ++j) {
    const Loop& l = k.loops[j];
    s += fmt::format(
        "  loop {} over [{}]: {} in {} of e{}{}\n", j, fmt::join(l.extents, ", "),
        kCombine[static_cast<int>(l.combine)], kScalar[static_cast<int>(l.accumulator)], l.operand,
        l.writes ? (l.exclusive ? ", stores before each step" : ", stores each step") : "");
  }
  std::vector<bool> used = k.used();
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    if (!used[i]) continue;
    const Expr& e = k.exprs[i];
    std::string rhs;
    switch (e.kind) {
      case ExprKind::constant:
        rhs = e.type == Scalar::i64 ? fmt::format("{}", e.integer) : fmt::format("{}", e.number);
        break;
      case ExprKind::flat:
        rhs = "flat";
        break;
      case ExprKind::coord:
        rhs = fmt::format("coord {}", e.axis);
        break;
      case ExprKind::loop:
        rhs = fmt::format("loop {} axis {}", e.loop, e.axis);
        break;
      case ExprKind::result:
        rhs = fmt::format("result {}", e.loop);
        break;
      case ExprKind::load:
        rhs = e.operand < 0
                  ? fmt::format("load out[e{}]", e.args[0])
                  : fmt::format("load in{}{}[e{}]", e.operand,
                                e.view ? fmt::format(" as {}", name(e.dtype)) : "", e.args[0]);
        if (e.args.size() > 1) rhs += fmt::format(" if e{}", e.args[1]);
        break;
      case ExprKind::op:
        rhs = ir::op_name(e.op);
        for (ExprId a : e.args) rhs += fmt::format(" e{}", a);
        break;
      case ExprKind::round:
        rhs = fmt::format("round {} e{}", name(e.dtype), e.args[0]);
        break;
    }
    s += fmt::format("  e{}: {} = {}\n", i, kScalar[static_cast<int>(e.type)], rhs);
  }
  s += fmt::format("  out[{}] = e{}", k.at == kNone ? "flat" : fmt::format("e{}", k.at), k.value);
  if (k.mask != kNone) s += fmt::format(" if e{}", k.mask);
  return s + "\n";
}

}  // namespace prism::kernel
