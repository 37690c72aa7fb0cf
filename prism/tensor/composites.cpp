// Tracing of the composite ops that are Tensor methods (softmax, log_softmax, the norms and
// dequantize):
// validation by tag, then one IR node each. The composites with more operands (rope,
// attention, ...) are free functions of prism/nn.
#include <algorithm>

#include "prism/core/error.h"
#include "prism/quant/dequantize.h"
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

Tensor Tensor::dequantize(quant::GgmlType format, DType to) const {
  const quant::GgmlTypeInfo& t = quant::info(format);
  PRISM_CHECK(t.block_elements > 1 && quant::can_dequantize(format),
              "dequantize: {} is not a block format prism dequantizes (Q4_0, Q4_1, Q5_0, Q5_1, "
              "Q8_0, Q4_K, Q5_K, Q6_K)",
              t.name);
  PRISM_CHECK(dtype() == DType::u8 && rank() >= 1,
              "dequantize: needs bytes (u8) with the blocks along the last tag, got {}",
              shape_.str());
  PRISM_CHECK(is_float(to), "dequantize: to {}, not a floating-point dtype", name(to));
  const int last = rank() - 1;
  const int64_t bytes = shape_.size(last);
  PRISM_CHECK(bytes % t.block_bytes == 0,
              "dequantize: {} bytes along \"{}\" of {} are not whole {} blocks of {} bytes", bytes,
              shape_.tag(last).str(), shape_.str(), t.name, t.block_bytes);
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  dims[last].size = bytes / t.block_bytes * t.block_elements;
  return make_node(Node{Op::dequantize,
                        Shape(to, dims, "dequantize"),
                        {Tracer::current("dequantize").use(*this, "dequantize")},
                        ir::DequantizeAttrs{format}});
}

}  // namespace prism
