// Tracing of the composite ops: validation by tag, then one IR node each.
#include <algorithm>
#include <cmath>

#include "prism/core/error.h"
#include "prism/nn/layout.h"
#include "prism/nn/nn.h"
#include "prism/tensor/tracer.h"

namespace prism {

using ir::Node;
using ir::Op;

namespace nn {

std::vector<double> rope_inv_freq(int64_t dim, double theta) {
  std::vector<double> f(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) f[i] = std::pow(theta, -2.0 * i / double(dim));
  return f;
}

std::pair<Tensor, Tensor> rope_tables(const Tensor& positions, const std::vector<double>& inv_freq,
                                      Tag half) {
  PRISM_CHECK(is_integer(positions.dtype()), "rope: positions must be integers, got {}",
              positions.shape().str());
  std::vector<float> f(inv_freq.begin(), inv_freq.end());
  Tensor freq = Tensor::constant(HostBuffer::from<float>(
      Shape(DType::f32, {{half, static_cast<int64_t>(f.size())}}), std::span<const float>(f)));
  Tensor angles = positions.convert(DType::f32) * freq;
  return {angles.cos(), angles.sin()};
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tag dim, bool interleaved) {
  require_float("rope", x);
  int axis = x.shape().axis(dim, "rope");
  int64_t d = x.shape().size(axis);
  PRISM_CHECK(d % 2 == 0, "rope: tag \"{}\" must have an even size, got {} in {}", dim.str(), d,
              x.shape().dims_str());
  // x with `dim` last, so that the IR's positional layout holds.
  std::vector<Tag> order;
  for (const Dim& t : x.shape().dims())
    if (t.tag != dim) order.push_back(t.tag);
  order.push_back(dim);
  Tensor xt = arrange(x, order);
  std::vector<Dim> half_dims(xt.shape().dims().begin(), xt.shape().dims().end());
  half_dims.back().size = d / 2;
  Shape table(x.dtype(), half_dims, "rope");
  for (const Tensor* t : {&cos, &sin}) {
    PRISM_CHECK(t->has(dim) && t->size(dim) == d / 2,
                "rope: tables {} need tag \"{}\" of size {} (half of {} in {})",
                t->shape().dims_str(), dim.str(), d / 2, d, x.shape().dims_str());
  }
  Tensor c = cos.convert(x.dtype()).broadcast_to(table);
  Tensor s = sin.convert(x.dtype()).broadcast_to(table);
  Tracer& tracer = Tracer::current("rope");
  Tensor y = make_node(Node{Op::rope,
                            xt.shape(),
                            {tracer.use(xt, "rope"), tracer.use(c, "rope"), tracer.use(s, "rope")},
                            ir::RopeAttrs{interleaved}});
  std::vector<Tag> back;
  for (const Dim& t : x.shape().dims()) back.push_back(t.tag);
  return arrange(y, back);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  constexpr std::string_view op = "attention";
  require_float(op, q);
  PRISM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
              "attention: q {}, k {} and v {} must share a dtype", q.shape().str(), k.shape().str(),
              v.shape().str());
  const Shape& qs = q.shape();
  std::vector<Tag> batch;
  for (const Dim& d : qs.dims()) {
    if (d.tag != o.head && d.tag != o.query && d.tag != o.dim) batch.push_back(d.tag);
  }
  PRISM_CHECK(qs.has(o.head) && qs.has(o.query) && qs.has(o.dim),
              "attention: q {} needs tags \"{}\", \"{}\" and \"{}\"", qs.dims_str(), o.head.str(),
              o.query.str(), o.dim.str());
  for (const Tensor* t : {&k, &v}) {
    PRISM_CHECK(t->rank() == static_cast<int>(batch.size()) + 3 && t->has(o.head) &&
                    t->has(o.key) && t->has(o.dim),
                "attention: k and v need the batch tags of q {} and \"{}\", \"{}\", \"{}\"; got {}",
                qs.dims_str(), o.head.str(), o.key.str(), o.dim.str(), t->shape().dims_str());
    for (Tag b : batch) {
      PRISM_CHECK(t->has(b) && t->size(b) == q.size(b),
                  "attention: batch tag \"{}\" is {} in q {} but differs in {}", b.str(), q.size(b),
                  qs.dims_str(), t->shape().dims_str());
    }
  }
  int64_t hq = q.size(o.head), hkv = k.size(o.head);
  PRISM_CHECK(v.size(o.head) == hkv && hkv > 0 && hq % hkv == 0,
              "attention: {} query heads need a divisor of kv heads, got k {} and v {}", hq,
              k.shape().dims_str(), v.shape().dims_str());
  PRISM_CHECK(k.size(o.dim) == q.size(o.dim), "attention: tag \"{}\" is {} in q {} but {} in k {}",
              o.dim.str(), q.size(o.dim), qs.dims_str(), k.size(o.dim), k.shape().dims_str());
  PRISM_CHECK(v.size(o.key) == k.size(o.key), "attention: tag \"{}\" is {} in k {} but {} in v {}",
              o.key.str(), k.size(o.key), k.shape().dims_str(), v.size(o.key),
              v.shape().dims_str());

  // To the IR's layout {B, H, S, D}, all batch tags merged into one.
  const Tag b_tag = "__batch";
  auto to_layout = [&](const Tensor& t, Tag seq) {
    std::vector<Tag> order = batch;
    order.insert(order.end(), {o.head, seq, o.dim});
    Tensor r = arrange(t, order);
    return batch.empty() ? insert_front(r, b_tag) : r.merge(batch, b_tag);
  };
  Tensor ql = to_layout(q, o.query), kl = to_layout(k, o.key), vl = to_layout(v, o.key);
  Tracer& tracer = Tracer::current(op);
  std::vector<ir::ValueId> inputs{tracer.use(ql, op), tracer.use(kl, op), tracer.use(vl, op)};
  ir::AttentionAttrs attrs;
  attrs.scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(double(q.size(o.dim)));
  attrs.causal = o.causal;
  attrs.window = o.window;
  if (o.mask) {
    const Tensor& m = *o.mask;
    PRISM_CHECK(m.dtype() == DType::boolean || m.dtype() == q.dtype(),
                "attention: mask {} must be bool or {}", m.shape().str(), name(q.dtype()));
    std::vector<Dim> dims;
    for (Tag b : batch) dims.push_back({b, q.size(b)});
    dims.insert(dims.end(), {{o.head, hq}, {o.query, q.size(o.query)}, {o.key, k.size(o.key)}});
    Tensor full = m.broadcast_to(Shape(m.dtype(), dims, op));
    full = batch.empty() ? insert_front(full, b_tag) : full.merge(batch, b_tag);
    inputs.push_back(tracer.use(full, op));
    attrs.has_mask = true;
  }
  if (o.offset) {
    PRISM_CHECK(o.offset->rank() == 0 && is_integer(o.offset->dtype()),
                "attention: offset must be an integer scalar, got {}", o.offset->shape().str());
    inputs.push_back(tracer.use(*o.offset, op));
    attrs.has_offset = true;
  }
  std::vector<Dim> out_dims(ql.shape().dims().begin(), ql.shape().dims().end());
  out_dims[3].size = v.size(o.dim);
  Tensor y = make_node(Node{Op::attention, Shape(q.dtype(), out_dims, op), inputs, attrs});
  // Back to q's tags and order.
  if (batch.empty()) {
    y = y.reshape(
        Shape(q.dtype(), {{o.head, hq}, {o.query, q.size(o.query)}, {o.dim, v.size(o.dim)}}));
  } else {
    std::vector<Dim> parts;
    for (Tag b : batch) parts.push_back({b, q.size(b)});
    std::vector<Dim> dims = parts;
    dims.insert(dims.end(), {{o.head, hq}, {o.query, q.size(o.query)}, {o.dim, v.size(o.dim)}});
    y = y.reshape(Shape(q.dtype(), dims, op));
  }
  std::vector<Tag> order;
  for (const Dim& d : qs.dims()) order.push_back(d.tag);
  return arrange(y, order);
}

}  // namespace nn
}  // namespace prism
