// Convolutions: Conv, ConvTranspose (as a convolution of the stride-dilated input with the
// flipped kernel), ConvInteger (computed exactly in f64).
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

struct ConvGeometry {
  std::vector<int64_t> strides, dilations, pad_low, pad_high;
};

// Strides, dilations and pads of a Conv or ConvTranspose node over `spatial` dims. For Conv,
// auto_pad SAME pads so that out = ceil(in / stride).
ConvGeometry conv_geometry(const NodeContext& ctx, bool transposed) {
  std::vector<int64_t> in = ctx.dims(0), k = ctx.dims(1);
  int n = static_cast<int>(in.size()) - 2;
  ConvGeometry g;
  g.strides = ctx.attr_ints("strides", std::vector<int64_t>(n, 1));
  g.dilations = ctx.attr_ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> output_padding = ctx.attr_ints("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> output_shape = ctx.attr_ints("output_shape");
  std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  for (int i = 0; i < n; ++i) {
    int64_t s = g.strides[i], span = (k[2 + i] - 1) * g.dilations[i] + 1, size = in[2 + i];
    int64_t low = pads[i], high = pads[n + i];
    if (transposed && (!output_shape.empty() || auto_pad.starts_with("SAME"))) {
      // The pads that give the requested size (in * stride for SAME), split with the odd one
      // at the end for SAME_UPPER and at the start otherwise.
      int64_t target = output_shape.empty() ? size * s : output_shape[output_shape.size() - n + i];
      // Halves round down (toward -inf): a negative total, a larger output, grows at the end.
      int64_t total = s * (size - 1) + output_padding[i] + span - target;
      int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      low = auto_pad == "SAME_UPPER" ? half : total - half;
      high = total - low;
    } else if (!transposed && auto_pad.starts_with("SAME")) {
      int64_t out = (size + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + span - size);
      low = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      high = total - low;
    } else if (auto_pad == "VALID") {
      low = high = 0;
    }
    g.pad_low.push_back(low);
    // ConvTranspose's output_padding adds to the end: a negative end pad.
    g.pad_high.push_back(high - (transposed ? output_padding[i] : 0));
  }
  return g;
}

// prism's conv on positional tensors: x [N, C, spatial...], w [M, C / groups, k...].
Tensor conv_positional(const Tensor& x, const Tensor& w, const ConvGeometry& g, int64_t groups) {
  int n = x.rank() - 2;
  ConvOptions o;
  o.groups = groups;
  o.strides = g.strides;
  o.dilations = g.dilations;
  o.pad_low = g.pad_low;
  o.pad_high = g.pad_high;
  for (int i = 0; i < n; ++i) o.spatial.push_back(Tag(fmt::format("s{}", i)));
  std::vector<Tag> x_tags{o.batch, o.channels}, w_tags{o.out_channels, o.channels};
  x_tags.insert(x_tags.end(), o.spatial.begin(), o.spatial.end());
  w_tags.insert(w_tags.end(), o.spatial.begin(), o.spatial.end());
  return positional(conv(with_tags(x, x_tags), with_tags(w, w_tags), o));
}

std::vector<Tensor> conv_op(const NodeContext& ctx) {
  ctx.expect_attributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  Tensor y = conv_positional(ctx.input(0), ctx.input(1), conv_geometry(ctx, false),
                             ctx.attr_int("group", 1));
  if (ctx.has_input(2)) y = y + per_channel(ctx.input(2), sizes_of(y));
  return {y};
}

// ConvTranspose as a Conv: spread the input out by the stride (stride - 1 zeros between
// elements, via a padded unit axis merged in), pad by the kernel's reach minus the pads, and
// convolve with the kernel flipped and its channel axes swapped per group.
std::vector<Tensor> conv_transpose(const NodeContext& ctx) {
  ctx.expect_attributes({"auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                         "output_shape", "pads", "strides"});
  Tensor x = ctx.input(0), w = ctx.input(1);
  int rank = x.rank(), n = rank - 2;
  int64_t groups = ctx.attr_int("group", 1);
  ConvGeometry g = conv_geometry(ctx, true);
  for (int i = 0; i < n; ++i) {
    Tag tag = axis_tag(2 + i, rank), gap("gap");
    int64_t s = g.strides[i], size = x.size(tag);
    if (s == 1) continue;
    x = x.insert(gap, 1, 3 + i).pad(gap, 0, s - 1).merge({tag, gap}, tag);
    x = x.slice(tag, 0, (size - 1) * s + 1);
  }
  std::vector<int64_t> k = sizes_of(w);  // [C, M / groups, k...]
  ConvGeometry forward{std::vector<int64_t>(n, 1), g.dilations, {}, {}};
  for (int i = 0; i < n; ++i) {
    int64_t reach = (k[2 + i] - 1) * g.dilations[i];
    forward.pad_low.push_back(reach - g.pad_low[i]);
    forward.pad_high.push_back(reach - g.pad_high[i]);
    Tag tag = axis_tag(2 + i, rank);
    std::vector<int64_t> reversed;
    for (int64_t j = k[2 + i] - 1; j >= 0; --j) reversed.push_back(j);
    Tensor index = Tensor::constant(HostBuffer::from<int64_t>(Shape(DType::i64, {{tag, k[2 + i]}}),
                                                              std::span<const int64_t>(reversed)));
    w = w.gather(tag, index);
  }
  // [C, M/g, k...] -> [g, C/g, M/g, k...] -> [g, M/g, C/g, k...] -> [M, C/g, k...]
  int64_t c = k[0], m = k[1] * groups;
  std::vector<int64_t> grouped{groups, c / groups, k[1]}, kernel{m, c / groups};
  grouped.insert(grouped.end(), k.begin() + 2, k.end());
  kernel.insert(kernel.end(), k.begin() + 2, k.end());
  Tensor wg = reshape_to(w, grouped);
  std::vector<Tag> order{axis_tag(0, rank + 1), axis_tag(2, rank + 1), axis_tag(1, rank + 1)};
  for (int i = 0; i < n; ++i) order.push_back(axis_tag(3 + i, rank + 1));
  w = reshape_to(wg.transpose(TagList(order)), kernel);
  Tensor y = conv_positional(x, w, forward, groups);
  if (ctx.has_input(2)) y = y + per_channel(ctx.input(2), sizes_of(y));
  return {y};
}

// ConvInteger: (x - x_zero_point) conv (w - w_zero_point) to int32, computed in f64 (exact for
// the sums of 8-bit products).
std::vector<Tensor> conv_integer(const NodeContext& ctx) {
  ctx.expect_attributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  Tensor x = ctx.input(0).convert(DType::f64), w = ctx.input(1).convert(DType::f64);
  if (ctx.has_input(2)) x = x - reshape_to(ctx.input(2), {}).convert(DType::f64);
  if (ctx.has_input(3)) {
    if (ctx.value(3).numel() != 1) unsupported("ConvInteger: per-channel w_zero_point");
    w = w - reshape_to(ctx.input(3), {}).convert(DType::f64);
  }
  Tensor y = conv_positional(x, w, conv_geometry(ctx, false), ctx.attr_int("group", 1));
  return {y.convert(DType::i32)};
}

// QLinearConv: inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
// y_zero_point, bias (int32). The integer convolution is exact in f64, then requantized.
std::vector<Tensor> qlinear_conv(const NodeContext& ctx) {
  ctx.expect_attributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  auto scalar_f64 = [&](int i) {
    if (ctx.value(i).numel() != 1) unsupported("QLinearConv: per-channel input {}", i);
    return reshape_to(ctx.input(i), {}).convert(DType::f64);
  };
  Tensor x = ctx.input(0).convert(DType::f64) - scalar_f64(2);
  Tensor w = ctx.input(3).convert(DType::f64) - scalar_f64(5);
  // conv_geometry reads the kernel as input 1; QLinearConv has it at 3.
  std::vector<int64_t> in = ctx.dims(0), k = ctx.dims(3);
  ConvGeometry g;
  int n = static_cast<int>(in.size()) - 2;
  g.strides = ctx.attr_ints("strides", std::vector<int64_t>(n, 1));
  g.dilations = ctx.attr_ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (ctx.attr_string("auto_pad", "NOTSET") != "NOTSET") unsupported("QLinearConv: auto_pad");
  g.pad_low.assign(pads.begin(), pads.begin() + n);
  g.pad_high.assign(pads.begin() + n, pads.end());
  Tensor y = conv_positional(x, w, g, ctx.attr_int("group", 1));
  if (ctx.has_input(8)) y = y + per_channel(ctx.input(8).convert(DType::f64), sizes_of(y));
  Tensor scale = scalar_f64(1) * scalar_f64(4);
  return {quantize(y * scale, scalar_f64(6), reshape_to(ctx.input(7), {}), ctx.dtype(7))};
}

}  // namespace

void register_conv_ops(OpTable& t) {
  t["Conv"] = conv_op;
  t["ConvTranspose"] = conv_transpose;
  t["ConvInteger"] = conv_integer;
  t["QLinearConv"] = qlinear_conv;
}

}  // namespace prism::conformance
