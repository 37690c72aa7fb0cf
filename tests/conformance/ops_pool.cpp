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

// Pads the spatial dims of x (explicit pads with `pad_value`, ceil-mode overhang with
// `extra_value`), then folds one strided slice per kernel offset with `fold`.
Tensor pool(Tensor x, const Window& w, double pad_value, double extra_value,
            Tensor (*fold)(const Tensor&, const Tensor&)) {
  int rank = x.rank(), n = rank - 2;
  for (int i = 0; i < n; ++i) {
    Tag t = axis_tag(2 + i, rank);
    if (w.pad_low[i] || w.pad_high[i]) x = x.pad(t, w.pad_low[i], w.pad_high[i], pad_value);
    if (w.extra_high[i]) x = x.pad(t, 0, w.extra_high[i], extra_value);
  }
  int64_t offsets = 1;
  for (int64_t k : w.kernel) offsets *= k;
  Tensor acc;
  for (int64_t o = 0; o < offsets; ++o) {
    Tensor part = x;
    int64_t rest = o;
    for (int i = n - 1; i >= 0; --i) {
      int64_t k = rest % w.kernel[i];
      rest /= w.kernel[i];
      part = part.slice(axis_tag(2 + i, rank), k * w.dilations[i], w.out[i], w.strides[i]);
    }
    acc = acc.valid() ? fold(acc, part) : part;
  }
  return acc;
}

Tensor add(const Tensor& a, const Tensor& b) { return a + b; }

std::vector<Tensor> max_pool(const NodeContext& ctx) {
  ctx.expect_attributes(
      {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  if (ctx.wants_output(1)) unsupported("MaxPool: the Indices output");
  Tensor x = ctx.input(0);
  double lowest = is_float(x.dtype())      ? -std::numeric_limits<double>::infinity()
                  : x.dtype() == DType::u8 ? 0
                                           : -128;
  if (!is_float(x.dtype()) && x.dtype() != DType::u8 && x.dtype() != DType::i8) {
    unsupported("MaxPool: dtype {}", name(x.dtype()));
  }
  return {pool(x, window(ctx), lowest, lowest, maximum)};
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
  t["AveragePool"] = average_pool;
  t["GlobalMaxPool"] = global_pool(true);
  t["GlobalAveragePool"] = global_pool(false);
}

}  // namespace prism::conformance
