// Tracing of the composite ops that are Tensor methods (softmax, log_softmax and the norms):
// validation by tag, then one IR node each. The composites with more operands (rope,
// attention, ...) are free functions of prism/nn.
#include <algorithm>

#include "prism/core/error.h"
#include "prism/tensor/tracer.h"

namespace prism {

using ir::Node;
using ir::Op;

namespace {

Tensor norm(Op op, const Tensor& x, const TagList& tags, double eps) {
  std::string_view name = ir::op_name(op);
  require_float(name, x);
  ir::NormAttrs attrs{{}, eps};
  for (Tag t : tags) attrs.axes.push_back(x.shape().axis(t, name));
  std::sort(attrs.axes.begin(), attrs.axes.end());
  return make_node(Node{op, x.shape(), {Tracer::current(name).use(x, name)}, std::move(attrs)});
}

}  // namespace

Tensor Tensor::softmax(Tag tag) const {
  require_float("softmax", *this);
  return make_node(Node{Op::softmax,
                        shape_,
                        {Tracer::current("softmax").use(*this, "softmax")},
                        ir::AxisAttrs{shape_.axis(tag, "softmax")}});
}

Tensor Tensor::log_softmax(Tag tag) const {
  require_float("log_softmax", *this);
  return make_node(Node{Op::log_softmax,
                        shape_,
                        {Tracer::current("log_softmax").use(*this, "log_softmax")},
                        ir::AxisAttrs{shape_.axis(tag, "log_softmax")}});
}

Tensor Tensor::rms_norm(TagList tags, double eps) const {
  return norm(Op::rms_norm, *this, tags, eps);
}
Tensor Tensor::layer_norm(TagList tags, double eps) const {
  return norm(Op::layer_norm, *this, tags, eps);
}

}  // namespace prism
