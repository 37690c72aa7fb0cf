// Ops that move or make data without arithmetic on it: Reshape, Flatten, Squeeze, Unsqueeze,
// Transpose, Concat, Split, Slice, Expand, Tile, Pad, Shape, Size, Constant, ConstantOfShape,
// Range, EyeLike, Trilu, DepthToSpace, SpaceToDepth.
#include <cmath>
#include <numeric>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

int64_t product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  const size_t end = std::min(to, v.size());
  if (from >= end) return 1;
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from),
                         v.begin() + static_cast<std::ptrdiff_t>(end), int64_t{1},
                         std::multiplies<>());
}

// x (positional) with its axes in the order `perm`, relabelled positionally.
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<Tag> order;
  for (int64_t p : perm) order.push_back(axis_tag(normalize_axis(p, x.rank()), x.rank()));
  return positional(positional(x).transpose(order));
}

// Integers given as input `i` from `input_opset` on, as attribute `attr` before.
std::vector<int64_t> ints_from(const NodeContext& ctx, int i, int64_t input_opset,
                               std::string_view attr) {
  if (ctx.opset() >= input_opset) return ctx.has_input(i) ? ctx.ints(i) : std::vector<int64_t>{};
  return ctx.attr_ints(attr);
}

std::vector<Tensor> reshape(const NodeContext& ctx) {
  ctx.expect_attributes({"allowzero"});
  std::vector<int64_t> in = ctx.dims(0), shape = ctx.ints(1);
  bool allow_zero = ctx.attr_int("allowzero", 0) != 0;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) shape[i] = in.at(i);
    if (shape[i] == -1) inferred = static_cast<int>(i);
  }
  if (inferred >= 0) {
    shape[inferred] = 1;
    shape[inferred] = product(in) / product(shape);
  }
  return {reshape_to(ctx.input(0), shape)};
}

std::vector<Tensor> flatten(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  std::vector<int64_t> in = ctx.dims(0);
  int rank = static_cast<int>(in.size());
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  return {reshape_to(ctx.input(0), {product(in, 0, axis), product(in, axis)})};
}

std::vector<Tensor> squeeze(const NodeContext& ctx) {
  ctx.expect_attributes({"axes"});
  std::vector<int64_t> in = ctx.dims(0), axes = ints_from(ctx, 1, 13, "axes");
  std::vector<bool> drop(in.size(), false);
  for (int64_t a : axes) drop[normalize_axis(a, static_cast<int>(in.size()))] = true;
  std::vector<int64_t> out;
  for (size_t i = 0; i < in.size(); ++i) {
    bool squeezed = axes.empty() ? in[i] == 1 : drop[i];
    if (!squeezed) out.push_back(in[i]);
  }
  return {reshape_to(ctx.input(0), out)};
}

std::vector<Tensor> unsqueeze(const NodeContext& ctx) {
  ctx.expect_attributes({"axes"});
  std::vector<int64_t> in = ctx.dims(0), axes = ints_from(ctx, 1, 13, "axes");
  int out_rank = static_cast<int>(in.size() + axes.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : axes) inserted[normalize_axis(a, out_rank)] = true;
  std::vector<int64_t> out;
  size_t next = 0;
  for (int i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : in.at(next++));
  return {reshape_to(ctx.input(0), out)};
}

std::vector<Tensor> transpose(const NodeContext& ctx) {
  ctx.expect_attributes({"perm"});
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty()) {
    for (int i = ctx.rank(0) - 1; i >= 0; --i) perm.push_back(i);
  }
  return {permute(ctx.input(0), perm)};
}

std::vector<Tensor> concat_op(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  int rank = ctx.rank(0);
  int axis = normalize_axis(ctx.attr_int("axis", 0), rank);
  std::vector<Tensor> parts;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.value(i).numel() > 0) parts.push_back(positional(ctx.input(i)));
  }
  if (parts.empty()) unsupported("Concat: every input is empty");
  return {concat(parts, axis_tag(axis, rank))};
}

std::vector<Tensor> split(const NodeContext& ctx) {
  ctx.expect_attributes({"axis", "split", "num_outputs"});
  Tensor x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_int("axis", 0), x.rank());
  Tag tag = axis_tag(axis, x.rank());
  std::vector<int64_t> sizes = ints_from(ctx, 1, 13, "split");
  int64_t total = x.size(tag);
  if (sizes.empty()) {
    int64_t n = ctx.num_outputs(), part = (total + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::min(part, total - i * part));
  }
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(tag, start, s));
    start += s;
  }
  return out;
}

// Reverses `tag` with a gather of reversed indices (prism slices have positive strides).
Tensor reverse(const Tensor& x, Tag tag) {
  int64_t n = x.size(tag);
  std::vector<int64_t> idx;
  for (int64_t i = n - 1; i >= 0; --i) idx.push_back(i);
  Tag along("reversed");
  Tensor index = Tensor::constant(
      HostBuffer::from<int64_t>(Shape(DType::i64, {{along, n}}), std::span<const int64_t>(idx)));
  return positional(x.gather(tag, index));
}

std::vector<Tensor> slice(const NodeContext& ctx) {
  ctx.expect_attributes({"starts", "ends", "axes"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() >= 10) {
    starts = ctx.ints(1);
    ends = ctx.ints(2);
    if (ctx.has_input(3)) axes = ctx.ints(3);
    if (ctx.has_input(4)) steps = ctx.ints(4);
  } else {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.attr_ints("axes");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  steps.resize(starts.size(), 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    int axis = normalize_axis(axes[i], rank);
    Tag tag = axis_tag(axis, rank);
    int64_t n = x.size(tag), step = steps[i];
    PRISM_CHECK(step != 0, "Slice: step 0");
    // numpy's clamping: negative indices count from the end; then clamp into range.
    int64_t start = starts[i] < 0 ? starts[i] + n : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + n : ends[i];
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, 0, n);
    } else {
      // Walk the reversed axis instead: index j there is n - 1 - j here.
      start = std::clamp<int64_t>(start, -1, n - 1);
      end = std::clamp<int64_t>(end, -1, n - 1);
      x = reverse(x, tag);
      start = n - 1 - start;
      end = n - 1 - end;
      step = -step;
    }
    int64_t length = end > start ? (end - start + step - 1) / step : 0;
    x = x.slice(tag, start, length, step);
  }
  return {x};
}

std::vector<Tensor> expand(const NodeContext& ctx) {
  ctx.expect_attributes({});
  std::vector<int64_t> out = broadcast_sizes({ctx.dims(0), ctx.ints(1)});
  return {broadcast_to_sizes(ctx.input(0), out)};
}

// Tile: each repeated axis gets a broadcast copy axis in front of it, merged into it.
std::vector<Tensor> tile(const NodeContext& ctx) {
  ctx.expect_attributes({});
  Tensor x = ctx.input(0);
  std::vector<int64_t> repeats = ctx.ints(1);
  int rank = x.rank();
  for (int a = 0; a < rank; ++a) {
    if (repeats.at(a) == 1) continue;
    Tag tag = axis_tag(a, rank), copies("copies");
    x = x.insert(copies, repeats[a], a).merge({copies, tag}, tag);
  }
  return {x};
}

std::vector<Tensor> pad(const NodeContext& ctx) {
  ctx.expect_attributes({"mode", "pads", "value"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  std::vector<int64_t> pads;
  double value = 0;
  if (ctx.opset() >= 11) {
    pads = ctx.ints(1);
    if (ctx.has_input(2)) value = ctx.scalar(2);
    if (ctx.has_input(3)) unsupported("Pad: the axes input is not modelled");
  } else {
    pads = ctx.attr_ints("pads");
    value = ctx.attr_float("value", 0);
  }
  std::string mode = ctx.attr_string("mode", "constant");
  ir::PadMode pad_mode = ir::PadMode::constant;
  if (mode == "edge") {
    pad_mode = ir::PadMode::edge;
  } else if (mode == "reflect") {
    pad_mode = ir::PadMode::reflect;
  } else if (mode != "constant") {
    unsupported("Pad: mode \"{}\"", mode);
  }
  for (int a = 0; a < rank; ++a) {
    int64_t low = pads.at(a), high = pads.at(a + rank);
    if (low != 0 || high != 0) x = x.pad(axis_tag(a, rank), low, high, value, pad_mode);
  }
  return {x};
}

HostBuffer i64_buffer(const std::vector<int64_t>& v, bool scalar = false) {
  Shape shape =
      scalar ? Shape::scalar(DType::i64) : positional_shape(DType::i64, {int64_t(v.size())});
  return HostBuffer::from<int64_t>(shape, std::span<const int64_t>(v));
}

std::vector<Tensor> shape_op(const NodeContext& ctx) {
  ctx.expect_attributes({"start", "end"});
  std::vector<int64_t> dims = ctx.dims(0);
  auto rank = static_cast<int64_t>(dims.size());
  auto clamp_index = [rank](int64_t i) {
    return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank);
  };
  int64_t start = clamp_index(ctx.attr_int("start", 0));
  int64_t end = std::max(start, clamp_index(ctx.attr_int("end", rank)));
  return {Tensor::constant(i64_buffer({dims.begin() + start, dims.begin() + end}))};
}

std::vector<Tensor> size_op(const NodeContext& ctx) {
  ctx.expect_attributes({});
  return {Tensor::constant(i64_buffer({ctx.value(0).numel()}, true))};
}

std::vector<Tensor> constant(const NodeContext& ctx) {
  const onnx::Node& n = ctx.node();
  if (const onnx::Attribute* a = n.attribute("value"))
    return {Tensor::constant(to_host_buffer(*a->t))};
  if (const onnx::Attribute* a = n.attribute("value_float")) return {Tensor::scalar(a->f)};
  if (const onnx::Attribute* a = n.attribute("value_int")) {
    return {Tensor::scalar(static_cast<double>(a->i), DType::i64)};
  }
  if (const onnx::Attribute* a = n.attribute("value_ints")) {
    return {Tensor::constant(i64_buffer(a->ints))};
  }
  if (const onnx::Attribute* a = n.attribute("value_floats")) {
    Shape shape = positional_shape(DType::f32, {int64_t(a->floats.size())});
    return {Tensor::constant(HostBuffer::from<float>(shape, std::span<const float>(a->floats)))};
  }
  unsupported("Constant: no tensor, float or int value (sparse or string values)");
}

std::vector<Tensor> constant_of_shape(const NodeContext& ctx) {
  ctx.expect_attributes({"value"});
  std::vector<int64_t> shape = ctx.has_input(0) ? ctx.ints(0) : std::vector<int64_t>{};
  DType dtype = DType::f32;
  double value = 0;
  if (const onnx::Attribute* a = ctx.attr("value")) {
    HostBuffer v = to_host_buffer(*a->t);
    dtype = v.dtype();
    value = v.to_f64().at(0);
  }
  return {Tensor::full(positional_shape(dtype, shape), value)};
}

std::vector<Tensor> range(const NodeContext& ctx) {
  ctx.expect_attributes({});
  double start = ctx.scalar(0), limit = ctx.scalar(1), delta = ctx.scalar(2);
  auto n = static_cast<int64_t>(std::max(std::ceil((limit - start) / delta), 0.0));
  DType dtype = ctx.dtype(0);
  Tensor i = Tensor::iota(positional_shape(dtype, {n}), axis_tag(0, 1));
  return {i * delta + start};
}

// Rows and columns of the last two axes of `shape`, as iotas (i64) to compare.
std::pair<Tensor, Tensor> row_col(const std::vector<int64_t>& sizes) {
  Shape s = positional_shape(DType::i64, sizes);
  int r = static_cast<int>(sizes.size());
  return {Tensor::iota(s, axis_tag(r - 2, r)), Tensor::iota(s, axis_tag(r - 1, r))};
}

std::vector<Tensor> eye_like(const NodeContext& ctx) {
  ctx.expect_attributes({"k", "dtype"});
  DType dtype = ctx.has_attr("dtype")
                    ? to_dtype(static_cast<onnx::ElemType>(ctx.attr_int("dtype", 1)))
                    : ctx.dtype(0);
  auto [row, col] = row_col(ctx.dims(0));
  return {eq(row + static_cast<double>(ctx.attr_int("k", 0)), col).convert(dtype)};
}

std::vector<Tensor> trilu(const NodeContext& ctx) {
  ctx.expect_attributes({"upper"});
  Tensor x = ctx.input(0);
  auto k = static_cast<double>(ctx.has_input(1) ? ctx.ints(1).at(0) : 0);
  auto [row, col] = row_col(ctx.dims(0));
  Tensor keep = ctx.attr_int("upper", 1) != 0 ? ge(col - row, Tensor::scalar(k, DType::i64))
                                              : le(col - row, Tensor::scalar(k, DType::i64));
  return {select(keep, x, Tensor::scalar(0, x.dtype()))};
}

std::vector<Tensor> depth_to_space(const NodeContext& ctx) {
  ctx.expect_attributes({"blocksize", "mode"});
  std::vector<int64_t> d = ctx.dims(0);
  int64_t b = ctx.attr_int("blocksize", 1), n = d[0], c = d[1], h = d[2], w = d[3];
  Tensor x = ctx.input(0);
  if (ctx.attr_string("mode", "DCR") == "DCR") {
    x = permute(reshape_to(x, {n, b, b, c / (b * b), h, w}), {0, 3, 4, 1, 5, 2});
  } else {
    x = permute(reshape_to(x, {n, c / (b * b), b, b, h, w}), {0, 1, 4, 2, 5, 3});
  }
  return {reshape_to(x, {n, c / (b * b), h * b, w * b})};
}

std::vector<Tensor> space_to_depth(const NodeContext& ctx) {
  ctx.expect_attributes({"blocksize"});
  std::vector<int64_t> d = ctx.dims(0);
  int64_t b = ctx.attr_int("blocksize", 1), n = d[0], c = d[1], h = d[2], w = d[3];
  Tensor x = permute(reshape_to(ctx.input(0), {n, c, h / b, b, w / b, b}), {0, 3, 5, 1, 2, 4});
  return {reshape_to(x, {n, c * b * b, h / b, w / b})};
}

}  // namespace

void register_shape_ops(OpTable& t) {
  t["Reshape"] = reshape;
  t["Flatten"] = flatten;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
  t["Transpose"] = transpose;
  t["Concat"] = concat_op;
  t["Split"] = split;
  t["Slice"] = slice;
  t["Expand"] = expand;
  t["Tile"] = tile;
  t["Pad"] = pad;
  t["Shape"] = shape_op;
  t["Size"] = size_op;
  t["Constant"] = constant;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range;
  t["EyeLike"] = eye_like;
  t["Trilu"] = trilu;
  t["DepthToSpace"] = depth_to_space;
  t["SpaceToDepth"] = space_to_depth;
}

}  // namespace prism::conformance
