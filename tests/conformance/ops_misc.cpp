// Smaller families: BitShift, ReverseSequence, the window functions, and linear
// quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear).
#include <numbers>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

// Shifts as products with powers of two (computed in f64, exact up to 2^53).
std::vector<Tensor> bit_shift(const NodeContext& ctx) {
  ctx.expect_attributes({"direction"});
  auto v = broadcast_all({ctx.input(0), ctx.input(1)});
  DType dtype = v[0].dtype();
  Tensor factor = pow(Tensor::scalar(2, DType::f64), v[1].convert(DType::f64)).convert(dtype);
  std::string direction = ctx.attr_string("direction");
  if (direction == "LEFT") return {v[0] * factor};
  if (direction == "RIGHT") return {v[0] / factor};
  unsupported("BitShift: direction \"{}\"", direction);
}

// Reverses the first sequence_lens[b] steps of each batch entry: a take_along the time axis
// with indices len - 1 - t inside the sequence and t after it.
std::vector<Tensor> reverse_sequence(const NodeContext& ctx) {
  ctx.expect_attributes({"batch_axis", "time_axis"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  int batch_axis = static_cast<int>(ctx.attr_int("batch_axis", 1));
  int time_axis = static_cast<int>(ctx.attr_int("time_axis", 0));
  std::vector<int64_t> sizes = sizes_of(x), lens_shape(rank, 1);
  lens_shape[batch_axis] = sizes[batch_axis];
  Tensor lens = broadcast_to_sizes(reshape_to(ctx.input(1).convert(DType::i64), lens_shape), sizes);
  Tensor t = Tensor::iota(positional_shape(DType::i64, sizes), axis_tag(time_axis, rank));
  Tensor idx = select(lt(t, lens), lens - 1.0 - t, t);
  return {x.take_along(axis_tag(time_axis, rank), idx)};
}

// sum_k a_k cos(2 pi k n / N) over n < size, N = size (periodic) or size - 1 (symmetric).
OpBuilder window(std::vector<double> coefficients) {
  return [coefficients](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({"output_datatype", "periodic"});
    auto size = static_cast<int64_t>(ctx.scalar(0));
    double n = ctx.attr_int("periodic", 1) != 0 ? double(size) : double(size - 1);
    DType dtype = to_dtype(static_cast<onnx::ElemType>(ctx.attr_int("output_datatype", 1)));
    Tensor i = Tensor::iota(positional_shape(DType::f64, {size}), axis_tag(0, 1));
    Tensor w = Tensor::full(positional_shape(DType::f64, {size}), coefficients[0]);
    for (size_t k = 1; k < coefficients.size(); ++k) {
      w = w + (i * (2 * std::numbers::pi * double(k) / n)).cos() * coefficients[k];
    }
    return {w.convert(dtype)};
  };
}

// A scale or zero point: a scalar, or a vector along `axis` of x (per-axis quantization).
Tensor quant_param(const NodeContext& ctx, int i, const std::vector<int64_t>& x_sizes) {
  Tensor p = ctx.input(i);
  if (p.rank() == 0 || ctx.value(i).numel() == 1) return reshape_to(p, {});
  int axis = normalize_axis(ctx.attr_int("axis", 1), static_cast<int>(x_sizes.size()));
  std::vector<int64_t> s(x_sizes.size(), 1);
  s[axis] = x_sizes[axis];
  return broadcast_to_sizes(reshape_to(p, s), x_sizes);
}

std::vector<Tensor> quantize_linear(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  Tensor x = ctx.input(0);
  std::vector<int64_t> sizes = sizes_of(x);
  Tensor scale = quant_param(ctx, 1, sizes);
  Tensor zero = ctx.has_input(2) ? quant_param(ctx, 2, sizes) : Tensor::scalar(0, DType::u8);
  return {quantize(x, scale, zero, zero.dtype())};
}

std::vector<Tensor> dequantize_linear(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  Tensor x = ctx.input(0);
  std::vector<int64_t> sizes = sizes_of(x);
  Tensor scale = quant_param(ctx, 1, sizes);
  Tensor centered = x.convert(scale.dtype());
  if (ctx.has_input(2)) centered = centered - quant_param(ctx, 2, sizes).convert(scale.dtype());
  return {centered * scale};
}

// u8 quantization with the scale and zero point that map [min(x, 0), max(x, 0)] onto 0..255.
std::vector<Tensor> dynamic_quantize_linear(const NodeContext& ctx) {
  ctx.expect_attributes({});
  Tensor x = ctx.input(0);
  std::vector<Tag> all;
  for (int i = 0; i < x.rank(); ++i) all.push_back(axis_tag(i, x.rank()));
  Tensor zero = Tensor::scalar(0, x.dtype());
  Tensor hi = maximum(x.max(TagList(all)), zero), lo = minimum(x.min(TagList(all)), zero);
  Tensor scale = (hi - lo) / 255.0;
  Tensor zero_point = minimum(maximum((-lo / scale).round(), zero), Tensor::scalar(255, x.dtype()))
                          .convert(DType::u8);
  return {quantize(x, scale, zero_point, DType::u8), scale, zero_point};
}

}  // namespace

void register_misc_ops(OpTable& t) {
  t["BitShift"] = bit_shift;
  t["ReverseSequence"] = reverse_sequence;
  t["HannWindow"] = window({0.5, -0.5});
  t["HammingWindow"] = window({25.0 / 46.0, -21.0 / 46.0});
  t["BlackmanWindow"] = window({0.42, -0.5, 0.08});
  t["QuantizeLinear"] = quantize_linear;
  t["DequantizeLinear"] = dequantize_linear;
  t["DynamicQuantizeLinear"] = dynamic_quantize_linear;
}

}  // namespace prism::conformance
