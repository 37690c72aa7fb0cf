// Tracing of the gated delta rule composite: validation by tag, the operands brought to the
// IR's layout, one node whose rows hold the outputs and then the final state.
#include <algorithm>
#include <string>

#include "prism/core/error.h"
#include "prism/nn/layout.h"
#include "prism/nn/nn.h"
#include "prism/tensor/tracer.h"

namespace prism::nn {

using ir::Node;

GatedDeltaRuleResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& g, const Tensor& beta, const Tensor& state,
                                      const GatedDeltaRuleOptions& o) {
  constexpr std::string_view op = "gated_delta_rule";
  const Tag h = o.head, s = o.seq, dk = o.key_dim, dv = o.value_dim;
  PRISM_CHECK(is_float(state.dtype()), "gated_delta_rule: state {} must be floating-point",
              state.shape().str());
  PRISM_CHECK(o.chunk >= 0, "gated_delta_rule: chunk must be 0 or positive, got {}", o.chunk);
  // Batch tags: v's tags besides head, sequence and value dim.
  std::vector<Tag> batch;
  for (const Dim& d : v.shape().dims()) {
    if (d.tag != h && d.tag != s && d.tag != dv) batch.push_back(d.tag);
  }
  auto expect = [&](const Tensor& t, const char* what, std::initializer_list<Tag> own) {
    PRISM_CHECK(is_float(t.dtype()), "gated_delta_rule: {} {} must be floating-point", what,
                t.shape().str());
    bool ok = t.rank() == static_cast<int>(batch.size() + own.size());
    for (Tag b : batch) ok = ok && t.has(b) && t.size(b) == v.size(b);
    for (Tag x : own) ok = ok && t.has(x);
    std::vector<std::string> names;
    for (Tag x : own) names.push_back("\"" + x.str() + "\"");
    PRISM_CHECK(ok, "gated_delta_rule: {} {} needs the batch tags of v {} and {}", what,
                t.shape().dims_str(), v.shape().dims_str(), fmt::join(names, ", "));
  };
  expect(v, "v", {h, s, dv});
  expect(q, "q", {h, s, dk});
  expect(k, "k", {h, s, dk});
  expect(g, "g", {h, s});
  expect(beta, "beta", {h, s});
  expect(state, "state", {h, dk, dv});
  const int64_t heads = v.size(h), key_heads = k.size(h), len = v.size(s);
  const int64_t kdim = k.size(dk), vdim = v.size(dv);
  PRISM_CHECK(q.size(h) == key_heads && q.size(s) == len && q.size(dk) == kdim,
              "gated_delta_rule: q {} and k {} must have the same sizes", q.shape().dims_str(),
              k.shape().dims_str());
  PRISM_CHECK(k.size(s) == len && g.size(s) == len && beta.size(s) == len,
              "gated_delta_rule: tag \"{}\" differs among q {}, k {}, v {}, g {}, beta {}", s.str(),
              q.shape().dims_str(), k.shape().dims_str(), v.shape().dims_str(),
              g.shape().dims_str(), beta.shape().dims_str());
  PRISM_CHECK(key_heads > 0 && heads % key_heads == 0 && g.size(h) == heads &&
                  beta.size(h) == heads && state.size(h) == heads,
              "gated_delta_rule: {} value heads (v, g, beta, state) need a multiple of the {} key "
              "heads of q and k; got g {}, beta {}, state {}",
              heads, key_heads, g.shape().dims_str(), beta.shape().dims_str(),
              state.shape().dims_str());
  PRISM_CHECK(state.size(dk) == kdim && state.size(dv) == vdim,
              "gated_delta_rule: state {} must be {{\"{}\"={}, \"{}\"={}}} for k {} and v {}",
              state.shape().dims_str(), dk.str(), kdim, dv.str(), vdim, k.shape().dims_str(),
              v.shape().dims_str());

  // To the IR's layout, batch tags merged into one, in the state's dtype.
  const Tag b_tag = "__batch";
  const DType dtype = state.dtype();
  auto to_layout = [&](const Tensor& t, std::initializer_list<Tag> own) {
    std::vector<Tag> order = batch;
    order.insert(order.end(), own);
    Tensor r = arrange(t.convert(dtype), order);
    return batch.empty() ? insert_front(r, b_tag) : r.merge(batch, b_tag);
  };
  Tracer& tracer = Tracer::current(op);
  std::vector<ir::ValueId> inputs;
  for (const Tensor& t :
       {to_layout(q, {h, s, dk}), to_layout(k, {h, s, dk}), to_layout(v, {h, s, dv}),
        to_layout(g, {h, s}), to_layout(beta, {h, s}), to_layout(state, {h, dk, dv})}) {
    inputs.push_back(tracer.use(t, op));
  }
  int64_t b = 1;
  for (Tag t : batch) b *= v.size(t);
  std::vector<Dim> packed_dims{{b_tag, b}, {h, heads}, {Tag("__rows"), len + kdim}, {dv, vdim}};
  Shape packed(dtype, packed_dims, op);
  Tensor y = make_node(Node{ir::Op::gated_delta_rule, packed, inputs,
                            ir::GatedDeltaRuleAttrs{len > 1 ? std::min(o.chunk, len) : 0}});

  // Back to the callers' tags: outputs in v's order and dtype, the state in its own order.
  std::vector<Dim> batch_dims;
  for (Tag t : batch) batch_dims.push_back({t, v.size(t)});
  auto unbatch = [&](const Tensor& t, std::vector<Dim> own) {
    std::vector<Dim> dims = batch_dims;
    dims.insert(dims.end(), own.begin(), own.end());
    return t.reshape(Shape(dtype, dims, op));
  };
  auto order_of = [](const Tensor& t) {
    std::vector<Tag> tags;
    for (const Dim& d : t.shape().dims()) tags.push_back(d.tag);
    return tags;
  };
  Tensor out = unbatch(y.slice("__rows", 0, len), {{h, heads}, {s, len}, {dv, vdim}});
  Tensor last = unbatch(y.slice("__rows", len, kdim), {{h, heads}, {dk, kdim}, {dv, vdim}});
  return {arrange(out, order_of(v)).convert(v.dtype()), arrange(last, order_of(state))};
}

}  // namespace prism::nn
