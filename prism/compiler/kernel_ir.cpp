// Lowering graph steps into the kernel IR: fused elementwise groups, data movement as index
// maps, and reductions.
#include "prism/compiler/kernel_ir.h"

#include <fmt/format.h>

#include <algorithm>

#include "prism/core/error.h"

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

std::vector<bool> Kernel::in_loop() const {
  std::vector<bool> inside(exprs.size(), false);
  for (size_t e = 0; e < exprs.size(); ++e) {
    inside[e] = exprs[e].kind == ExprKind::loop;
    for (ExprId a : exprs[e].args) inside[e] = inside[e] || inside[a];
  }
  return inside;
}

std::vector<bool> Kernel::used() const {
  std::vector<bool> used(exprs.size(), false);
  if (value != kNone) used[value] = true;
  if (at != kNone) used[at] = true;
  for (size_t e = exprs.size(); e-- > 0;) {
    if (!used[e]) continue;
    for (ExprId a : exprs[e].args) used[a] = true;
  }
  return used;
}

std::vector<ValueId> step_reads(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                ValueId id) {
  const ir::Node& n = graph.node(id);
  if (!ir::is_elementwise(n.op)) return n.inputs;
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
  ExprId loop(int axis) { return index_leaf(ExprKind::loop, axis); }

  ExprId load(int operand, ExprId index, ExprId mask = kNone) {
    Expr e;
    e.kind = ExprKind::load;
    e.type = scalar_of(operands_.at(operand));
    e.operand = operand;
    e.args = {index};
    if (mask != kNone) e.args.push_back(mask);
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

// Ops of real analysis, which have no integer counterpart.
bool float_only(Op op) {
  switch (op) {
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
    case Op::atan2:
      return true;
    default:
      return false;
  }
}

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
    PRISM_CHECK(prism::is_float(in) || !float_only(n.op),
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
  std::vector<int64_t> kept;
  std::vector<int> kept_axes;
  for (int a = 0; a < x.rank(); ++a) {
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) {
      kept.push_back(x.size(a));
      kept_axes.push_back(a);
    }
  }
  Kernel k = make(name, n.shape, kept);
  Builder b(k, dtypes);
  Reduction r;
  std::vector<std::pair<ExprId, int64_t>> src;
  for (size_t j = 0; j < kept_axes.size(); ++j) {
    src.push_back({b.coord(static_cast<int>(j)), xs[kept_axes[j]]});
  }
  for (size_t j = 0; j < axes.size(); ++j) {
    r.loops.push_back(x.size(axes[j]));
    src.push_back({b.loop(static_cast<int>(j)), xs[axes[j]]});
  }
  switch (n.op) {
    case Op::reduce_sum:
      r.combine = Combine::sum;
      break;
    case Op::reduce_prod:
      r.combine = Combine::prod;
      break;
    case Op::reduce_max:
      r.combine = Combine::max;
      break;
    default:
      r.combine = Combine::min;
      break;
  }
  r.accumulator = scalar_of(x.dtype());
  k.value = b.load(0, b.linear(src));
  k.reduction = r;
  return k;
}

Kernel arg_reduce(const ir::Graph& g, const ir::Node& n, const std::vector<DType>& dtypes,
                  const std::string& name) {
  const Shape& x = g.node(n.inputs[0]).shape;
  const int axis = n.attr<ir::AxisAttrs>().axis;
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < x.rank(); ++a) (a < axis ? outer : inner) *= a == axis ? 1 : x.size(a);
  Kernel k = make(name, n.shape, {outer, inner});
  Builder b(k, dtypes);
  Reduction r;
  r.loops = {x.size(axis)};
  r.combine = n.op == Op::argmax ? Combine::argmax : Combine::argmin;
  r.accumulator = scalar_of(x.dtype());
  k.value = b.load(
      0, b.linear({{b.coord(0), x.size(axis) * inner}, {b.loop(0), inner}, {b.coord(1), 1}}));
  k.reduction = r;
  return k;
}

}  // namespace

std::optional<Step> lower(const ir::Graph& g, const compiler::FusionPlan& plan, ValueId id,
                          const std::string& name) {
  const ir::Node& n = g.node(id);
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
    default:
      return std::nullopt;
  }
}

std::string print(const Kernel& k) {
  static constexpr const char* kScalar[] = {"f64", "f32", "i64"};
  static constexpr const char* kCombine[] = {"sum", "prod", "max", "min", "argmax", "argmin"};
  std::string s =
      fmt::format("kernel {} -> {} over [{}]", k.name, name(k.out), fmt::join(k.space, ", "));
  if (k.reduction) {
    s += fmt::format(" {} in {} over [{}]", kCombine[static_cast<int>(k.reduction->combine)],
                     kScalar[static_cast<int>(k.reduction->accumulator)],
                     fmt::join(k.reduction->loops, ", "));
  }
  if (k.when == InPlace::when_not_in_place) s += " (when not in place)";
  s += "\n";
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
        rhs = fmt::format("loop {}", e.axis);
        break;
      case ExprKind::load:
        rhs = fmt::format("load in{}[e{}]", e.operand, e.args[0]);
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
  s += fmt::format("  out[{}] = e{}\n", k.at == kNone ? "flat" : fmt::format("e{}", k.at), k.value);
  return s;
}

}  // namespace prism::kernel
