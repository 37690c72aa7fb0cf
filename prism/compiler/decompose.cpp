// Decompositions of the composite ops into primitives, written with the Tensor API. The
// composite's operands are renamed to positional tags ("0", "1", ...) first, since the tags a
// model traced with are not known here.
#include <cmath>
#include <limits>
#include <span>
#include <string>

#include "prism/compiler/passes.h"
#include "prism/core/error.h"
#include "prism/core/tracer.h"

namespace prism::compiler {
namespace {

using ir::Op;

Tag pos(int i) { return Tag(std::to_string(i)); }

// `t` with the given tags, in order (a reshape that moves no data).
Tensor named(const Tensor& t, std::span<const Tag> tags) {
  std::vector<Dim> dims;
  for (int i = 0; i < t.rank(); ++i) dims.push_back({tags[i], t.shape().size(i)});
  return t.reshape(Shape(t.dtype(), dims));
}
Tensor named(const Tensor& t, std::initializer_list<Tag> tags) {
  return named(t, std::span(tags.begin(), tags.size()));
}

// `t` with tags "0", "1", ...
Tensor positional(const Tensor& t) {
  std::vector<Tag> tags;
  for (int i = 0; i < t.rank(); ++i) tags.push_back(pos(i));
  return named(t, tags);
}

// Computes in f32 when x is a half type, as the CPU kernels do.
DType compute_dtype(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

Tensor softmax(const Tensor& x, Tag t, bool log) {
  Tensor xf = x.convert(compute_dtype(x.dtype()));
  Tensor shifted = xf - xf.max(t);
  Tensor y = log ? shifted - shifted.exp().sum(t).log() : shifted.exp() / shifted.exp().sum(t);
  return y.convert(x.dtype());
}

Tensor norm(const Tensor& x, const ir::NormAttrs& a, bool center) {
  std::vector<Tag> tags;
  for (int axis : a.axes) tags.push_back(pos(axis));
  Tensor xf = x.convert(compute_dtype(x.dtype()));
  if (center) xf = xf - xf.mean(tags);
  Tensor y = xf * ((xf * xf).mean(tags) + a.eps).rsqrt();
  return y.convert(x.dtype());
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  int last = x.rank() - 1;
  Tag d = pos(last);
  int64_t half = x.shape().size(last) / 2;
  if (!interleaved) {
    Tensor x1 = x.slice(d, 0, half), x2 = x.slice(d, half, half);
    return concat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, d);
  }
  Tensor pairs = x.split(d, {{d, half}, {"pair", 2}});
  Tensor even = pairs.slice("pair", 0, 1), odd = pairs.slice("pair", 1, 1);
  Tensor c = cos.insert("pair", 1, cos.rank()), s = sin.insert("pair", 1, sin.rank());
  Tensor y = concat({even * c - odd * s, odd * c + even * s}, "pair");
  return y.merge({d, "pair"}, d);
}

// q {b,h,s,d}, k {b,g,t,d}, v {b,g,t,e} with positional tags "0".."3"; mask {b,h,s,t}.
Tensor attention(const std::vector<Tensor>& in, const ir::AttentionAttrs& a) {
  DType ct = compute_dtype(in[0].dtype());
  Tensor q = named(in[0], {"b", "h", "s", "d"}).convert(ct);
  Tensor k = named(in[1], {"b", "g", "t", "d"}).convert(ct);
  Tensor v = named(in[2], {"b", "g", "t", "e"}).convert(ct);
  int64_t hq = q.size("h"), hkv = k.size("g"), sq = q.size("s"), sk = k.size("t");
  q = q.split("h", {{"g", hkv}, {"r", hq / hkv}});
  Tensor scores = q.dot(k, "d") * a.scale;  // {b,g,r,s,t}
  const double inf = std::numeric_limits<double>::infinity();
  size_t next = 3;
  if (a.has_mask) {
    Tensor m = named(in[next++], {"b", "h", "s", "t"}).split("h", {{"g", hkv}, {"r", hq / hkv}});
    scores = m.dtype() == DType::boolean ? select(m, scores, Tensor::scalar(-inf, ct))
                                         : scores + m.convert(ct);
  }
  if (a.causal || a.window > 0) {
    Tensor offset =
        a.has_offset ? in[next].convert(DType::i64) : Tensor::scalar(double(sk - sq), DType::i64);
    Tensor qpos = Tensor::iota(Shape(DType::i64, {{"s", sq}}), "s") + offset;
    Tensor kpos = Tensor::iota(Shape(DType::i64, {{"t", sk}}), "t");
    Tensor visible = Tensor::full(Shape(DType::boolean, {{"s", sq}, {"t", sk}}), 1);
    if (a.causal) visible = logical_and(visible, le(kpos, qpos));
    if (a.window > 0) visible = logical_and(visible, gt(kpos, qpos - double(a.window)));
    scores = select(visible, scores, Tensor::scalar(-inf, ct));
  }
  Tensor p = scores.softmax("t");
  Tensor y = p.dot(v, "t");  // {b,g,r,s,e}
  return positional(y.merge({"g", "r"}, "h").transpose({"b", "h", "s", "e"}))
      .convert(in[0].dtype());
}

// x {b,s,c}, state {b,k,c}, weight {k+1,c}: y[t] = sum_j weight[j] * concat(state, x)[t + j].
Tensor short_conv(const Tensor& x, const Tensor& state, const Tensor& weight) {
  DType ct = compute_dtype(x.dtype());
  Tensor window = concat({named(state, {"b", "s", "c"}), named(x, {"b", "s", "c"})}, "s");
  window = window.convert(ct);
  Tensor w = named(weight, {"j", "c"}).convert(ct);
  int64_t taps = w.size("j"), len = x.shape().size(1);
  Tensor y;
  for (int64_t j = 0; j < taps; ++j) {
    Tensor term =
        window.slice("s", j, len) * w.slice("j", j, 1).reshape(Shape(ct, {{"c", w.size("c")}}));
    y = j == 0 ? term : y + term;
  }
  return positional(y).convert(x.dtype());
}

Tensor decompose_node(const ir::Node& n, const std::vector<Tensor>& in) {
  switch (n.op) {
    case Op::softmax:
    case Op::log_softmax:
      return softmax(in[0], pos(n.attr<ir::AxisAttrs>().axis), n.op == Op::log_softmax);
    case Op::rms_norm:
      return norm(in[0], n.attr<ir::NormAttrs>(), false);
    case Op::layer_norm:
      return norm(in[0], n.attr<ir::NormAttrs>(), true);
    case Op::rope:
      return rope(in[0], in[1], in[2], n.attr<ir::RopeAttrs>().interleaved);
    case Op::attention:
      return attention(in, n.attr<ir::AttentionAttrs>());
    case Op::short_conv:
      return short_conv(in[0], in[1], in[2]);
    default:
      fail("decompose: {} is not a composite", ir::op_name(n.op));
  }
}

}  // namespace

ir::Graph decompose(const ir::Graph& graph, const std::function<bool(const ir::Node&)>& keep) {
  Tracer tracer;
  std::vector<ir::ValueId> map(graph.size());
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    ir::Node n = graph.node(id);
    for (ir::ValueId& in : n.inputs) in = map[in];
    if (ir::op_kind(n.op) != ir::OpKind::composite || keep(n)) {
      map[id] = tracer.graph().add(std::move(n));
      continue;
    }
    std::vector<Tensor> in;
    for (ir::ValueId v : n.inputs) in.push_back(positional(tracer.wrap(v)));
    Tensor y = decompose_node(n, in).reshape(n.shape);
    map[id] = tracer.use(y, "decompose");
  }
  for (ir::ValueId out : graph.outputs()) tracer.graph().outputs().push_back(map[out]);
  return std::move(tracer.graph());
}

}  // namespace prism::compiler
