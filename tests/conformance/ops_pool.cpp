// Pooling. prism has no windowed reduction primitive, so a pool is composed: pad the spatial
// dims, take one strided slice per kernel offset, and fold the slices with max or +.
#include <limits>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_low, pad_high;
  std::vector<int64_t> extra_high;  // padding ceil_mode adds past the explicit pads
  std::vector<int64_t> out;
};

Window window(const NodeContext& ctx) {
  std::vector<int64_t> in = ctx.dims(0);
  int n = static_cast<int>(in.size()) - 2;
  Window w;
  w.kernel = ctx.attr_ints("kernel_shape");
  w.strides = ctx.attr_ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = ctx.attr_ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  bool ceil_mode = ctx.attr_int("ceil_mode", 0) != 0;
  for (int i = 0; i < n; ++i) {
    int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1, size = in[2 + i], s = w.strides[i];
    int64_t low = pads[i], high = pads[n + i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t out = (size + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + span - size);
      int64_t small = total / 2;
      low = auto_pad == "SAME_UPPER" ? small : total - small;
      high = total - low;
    } else if (auto_pad == "VALID") {
      low = high = 0;
    }
    int64_t padded = size + low + high;
    int64_t out = ceil_mode ? (padded - span + s - 1) / s + 1 : (padded - span) / s + 1;
    // A window that would start in the high padding only is dropped (as in ONNX and PyTorch).
    if (ceil_mode && (out - 1) * s >= size + low) --out;
    w.pad_low.push_back(low);
    w.pad_high.push_back(high);
    w.extra_high.push_back(std::max<int64_t>(0, (out - 1) * s + span - padded));
    w.out.push_back(out);
  }
  return w;
}

// Pads the spatial dims of x: explicit pads with `pad_value`, the ceil-mode overhang with
// `extra_value`.
Tensor pad_window(Tensor x, const Window& w, double pad_value, double extra_value) {
  int rank = x.rank(), n = rank - 2;
  for (int i = 0; i < n; ++i) {
    Tag t = axis_tag(2 + i, rank);
    if (w.pad_low[i] || w.pad_high[i]) x = x.pad(t, w.pad_low[i], w.pad_high[i], pad_value);
    if (w.extra_high[i]) x = x.pad(t, 0, w.extra_high[i], extra_value);
  }
  return x;
}

int64_t window_offsets(const Window& w) {
  int64_t offsets = 1;
  for (int64_t k : w.kernel) offsets *= k;
  return offsets;
}

// The elements at kernel offset `o` (row-major over the kernel) of every window of padded x.
Tensor window_slice(const Tensor& padded, const Window& w, int64_t o) {
  int rank = padded.rank(), n = rank - 2;
  Tensor part = padded;
  for (int i = n - 1; i >= 0; --i) {
    int64_t k = o % w.kernel[i];
    o /= w.kernel[i];
    part = part.slice(axis_tag(2 + i, rank), k * w.dilations[i], w.out[i], w.strides[i]);
  }
  return part;
}

// Pads x and folds the slices of every kernel offset with `fold`.
Tensor pool(const Tensor& x, const Window& w, double pad_value, double extra_value,
            Tensor (*fold)(const Tensor&, const Tensor&)) {
  Tensor padded = pad_window(x, w, pad_value, extra_value);
  Tensor acc = window_slice(padded, w, 0);
  for (int64_t o = 1; o < window_offsets(w); ++o) acc = fold(acc, window_slice(padded, w, o));
  return acc;
}

Tensor add(const Tensor& a, const Tensor& b) { return a + b; }

// The flat index of every element of an {N, C, spatial...} tensor: row-major, or with the
// spatial dims column-major when storage_order is 1.
Tensor flat_index(const std::vector<int64_t>& sizes, bool column_major) {
  int rank = static_cast<int>(sizes.size());
  Shape shape = positional_shape(DType::i64, sizes);
  std::vector<int> order{0, 1};
  for (int a = 2; a < rank; ++a) order.push_back(column_major ? rank + 1 - a : a);
  Tensor index = Tensor::zeros(shape);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    int a = order[i];
    index = index + Tensor::iota(shape, axis_tag(a, rank)) * static_cast<double>(stride);
    stride *= sizes[a];
  }
  return index;
}

std::vector<Tensor> max_pool(const NodeContext& ctx) {
  ctx.expect_attributes(
      {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  Tensor x = ctx.input(0);
  if (!is_float(x.dtype()) && x.dtype() != DType::u8 && x.dtype() != DType::i8) {
    unsupported("MaxPool: dtype {}", name(x.dtype()));
  }
  double lowest = is_float(x.dtype())      ? -std::numeric_limits<double>::infinity()
                  : x.dtype() == DType::u8 ? 0
                                           : -128;
  Window w = window(ctx);
  if (!ctx.wants_output(1)) return {pool(x, w, lowest, lowest, maximum)};
  // With Indices: fold values and their flat indices together, keeping the first maximum.
  Tensor padded = pad_window(x, w, lowest, lowest);
  Tensor index =
      pad_window(flat_index(sizes_of(x), ctx.attr_int("storage_order", 0) == 1), w, -1, -1);
  Tensor best = window_slice(padded, w, 0), best_index = window_slice(index, w, 0);
  for (int64_t o = 1; o < window_offsets(w); ++o) {
    Tensor v = window_slice(padded, w, o);
    Tensor better = gt(v, best);
    best = select(better, v, best);
    best_index = select(better, window_slice(index, w, o), best_index);
  }
  return {best, best_index};
}

// MaxUnpool: zeros with each value written at its flat index, a scatter on the flattened
// output.
std::vector<Tensor> max_unpool(const NodeContext& ctx) {
  ctx.expect_attributes({"kernel_shape", "pads", "strides"});
  std::vector<int64_t> in = ctx.dims(0), out = in;
  int n = static_cast<int>(in.size()) - 2;
  std::vector<int64_t> k = ctx.attr_ints("kernel_shape");
  std::vector<int64_t> s = ctx.attr_ints("strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> p = ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  for (int i = 0; i < n; ++i) out[2 + i] = (in[2 + i] - 1) * s[i] - p[i] - p[n + i] + k[i];
  int64_t total = 1, count = ctx.value(0).numel();
  for (int64_t d : out) total *= d;
  Tensor x = ctx.input(0);
  Tensor flat = Tensor::zeros(positional_shape(x.dtype(), {total}));
  Tensor values = reshape_to(x, {count});
  Tensor index = reshape_to(ctx.input(1), {count});
  Tensor y = reshape_to(flat.scatter(axis_tag(0, 1), index, values), out);
  // The indices address the default output; a larger output_shape pads it at the end.
  if (ctx.has_input(2)) {
    std::vector<int64_t> shape = ctx.ints(2);
    int rank = n + 2;
    for (int a = 2; a < rank; ++a) {
      if (shape[a] != out[a]) y = y.pad(axis_tag(a, rank), 0, shape[a] - out[a]);
    }
  }
  return {y};
}

// AveragePool divides by the number of elements each window covered: the pool of a ones
// tensor, padded with 1 where pads count (count_include_pad) and 0 elsewhere.
std::vector<Tensor> average_pool(const NodeContext& ctx) {
  ctx.expect_attributes({"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape",
                         "pads", "strides"});
  Tensor x = ctx.input(0);
  Window w = window(ctx);
  Tensor sum = pool(x, w, 0, 0, add);
  double counted = ctx.attr_int("count_include_pad", 0) != 0 ? 1 : 0;
  Tensor count = pool(Tensor::full(x.shape(), 1), w, counted, 0, add);
  return {sum / count};
}

OpBuilder global_pool(bool is_max) {
  return [is_max](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({});
    Tensor x = ctx.input(0);
    int rank = x.rank();
    std::vector<Tag> spatial;
    std::vector<int64_t> kept = sizes_of(x);
    for (int a = 2; a < rank; ++a) {
      spatial.push_back(axis_tag(a, rank));
      kept[a] = 1;
    }
    Tensor y = is_max ? x.max(TagList(spatial)) : x.mean(TagList(spatial));
    return {reshape_to(y, kept)};
  };
}

}  // namespace

void register_pool_ops(OpTable& t) {
  t["MaxPool"] = max_pool;
  t["MaxUnpool"] = max_unpool;
  t["AveragePool"] = average_pool;
  t["GlobalMaxPool"] = global_pool(true);
  t["GlobalAveragePool"] = global_pool(false);
}

}  // namespace prism::conformance
