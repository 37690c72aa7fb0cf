// Tracing of the causal short convolution: validation by tag, one IR node for the output
// ({B, S, C} x, {B, K, C} state, {K+1, C} weight), and the next state from primitives.
#include "prism/core/error.h"
#include "prism/nn/layout.h"
#include "prism/nn/nn.h"
#include "prism/tensor/tracer.h"

namespace prism::nn {

ShortConvResult short_conv(const Tensor& x, const Tensor& state, const Tensor& weight,
                           const std::optional<Tensor>& last, Tag seq, Tag channel, Tag tap) {
  constexpr std::string_view op = "short_conv";
  const Shape& xs = x.shape();
  PRISM_CHECK(is_float(x.dtype()), "short_conv: needs a floating-point x, got {}", xs.str());
  PRISM_CHECK(state.dtype() == x.dtype() && weight.dtype() == x.dtype(),
              "short_conv: x {}, state {} and weight {} must share a dtype", xs.str(),
              state.shape().str(), weight.shape().str());
  PRISM_CHECK(xs.has(seq) && xs.has(channel), "short_conv: x {} needs tags \"{}\" and \"{}\"",
              xs.dims_str(), seq.str(), channel.str());
  PRISM_CHECK(weight.rank() == 2 && weight.has(channel) && weight.has(tap) &&
                  weight.size(channel) == x.size(channel) && weight.size(tap) >= 2,
              "short_conv: weight {} must be {{{}={}, {}>=2}}", weight.shape().dims_str(),
              channel.str(), x.size(channel), tap.str());
  const int64_t taps = weight.size(tap), held = taps - 1;
  std::vector<Tag> order, batch;  // x's tags in order; those besides seq and channel
  for (const Dim& d : xs.dims()) {
    order.push_back(d.tag);
    if (d.tag != seq && d.tag != channel) batch.push_back(d.tag);
  }
  bool state_ok = state.rank() == x.rank() && state.has(seq) && state.size(seq) == held;
  for (const Dim& d : xs.dims()) {
    state_ok = state_ok && state.has(d.tag) && (d.tag == seq || state.size(d.tag) == d.size);
  }
  PRISM_CHECK(state_ok, "short_conv: state {} must have the tags of x {} with \"{}\" of {}",
              state.shape().dims_str(), xs.dims_str(), seq.str(), held);

  // To the IR's layout {B, S, C}, all batch tags merged into one.
  const Tag b_tag = "__batch";
  auto to_layout = [&](const Tensor& t) {
    std::vector<Tag> o = batch;
    o.insert(o.end(), {seq, channel});
    Tensor r = arrange(t, o);
    return batch.empty() ? insert_front(r, b_tag) : r.merge(batch, b_tag);
  };
  Tensor xl = to_layout(x), sl = to_layout(state), wl = weight.transpose({tap, channel});
  Tracer& tracer = Tracer::current(op);
  Tensor y = make_node(ir::Node{ir::Op::short_conv,
                                xl.shape(),
                                {tracer.use(xl, op), tracer.use(sl, op), tracer.use(wl, op)},
                                {}});
  std::vector<Dim> dims;
  for (Tag b : batch) dims.push_back({b, x.size(b)});
  dims.insert(dims.end(), {{seq, x.size(seq)}, {channel, x.size(channel)}});
  y = arrange(y.reshape(Shape(x.dtype(), dims, op)), order);

  // The window of inputs ending at `last`: in concat(state, x), positions last+1 .. last+held.
  Tensor window = concat({arrange(state, order), x}, seq);
  Tensor next =
      last ? window.dynamic_slice(seq, *last + 1.0, held) : window.slice(seq, x.size(seq), held);
  return {y, next};
}

}  // namespace prism::nn
