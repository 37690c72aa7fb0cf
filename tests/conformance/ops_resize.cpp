// Resize (and the older Upsample). Interpolation is separable: each axis is resampled on its
// own, innermost first, as a weighted sum of gathers. Which input positions each output reads
// and with which weights follows from the attributes and sizes alone, so those tables are
// computed on the host and enter the graph as constants; the data only flows through
// gather, multiply and add.
#include <cmath>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

struct ResizeMode {
  std::string mode = "nearest";
  std::string transform = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
};

// The input coordinate of output position x, or NaN when it falls outside a crop.
double source_coordinate(const ResizeMode& m, double x, int64_t in, int64_t out, double scale,
                         double roi_start, double roi_end) {
  const std::string& t = m.transform;
  // The scaled length, not the rounded output size: what the transforms are defined on.
  double scaled = scale * double(in);
  if (t == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (t == "pytorch_half_pixel") return scaled > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
  if (t == "align_corners") return scaled == 1 ? 0 : x * double(in - 1) / (scaled - 1);
  if (t == "asymmetric") return x / scale;
  if (t == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (t == "tf_crop_and_resize") {
    double c = scaled == 1 ? (roi_end - roi_start) * double(in - 1) / 2
                           : x * (roi_end - roi_start) * double(in - 1) / (scaled - 1);
    c += roi_start * double(in - 1);
    return c < 0 || c > double(in - 1) ? NAN : c;
  }
  unsupported("Resize: coordinate_transformation_mode \"{}\"", t);
}

// The taps of one output position: input indices (edge-clamped) and their weights.
struct Taps {
  std::vector<int64_t> index;
  std::vector<double> weight;
};

Taps taps_at(const ResizeMode& m, double c, int64_t in) {
  // Left neighbour and the fraction past it, in (0, 1]: an exact input position counts as
  // fully past the neighbour on its left.
  double left = std::floor(c), ratio = c - left;
  if (ratio == 0) {
    left -= 1;
    ratio = 1;
  }
  auto f = static_cast<int64_t>(left);
  Taps t;
  if (m.mode == "nearest") {
    bool right;
    if (ratio == 1 || m.nearest == "ceil") {
      right = true;
    } else if (m.nearest == "round_prefer_floor") {
      right = ratio > 0.5;
    } else if (m.nearest == "round_prefer_ceil") {
      right = ratio >= 0.5;
    } else if (m.nearest == "floor") {
      right = false;
    } else {
      unsupported("Resize: nearest_mode \"{}\"", m.nearest);
    }
    t.index = {right ? f + 1 : f};
    t.weight = {1};
  } else if (m.mode == "linear") {
    t.index = {f, f + 1};
    t.weight = {1 - ratio, ratio};
  } else if (m.mode == "cubic") {
    double a = m.cubic_a;
    auto far = [a](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1<d<2
    auto near = [a](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };       // d<=1
    t.index = {f - 1, f, f + 1, f + 2};
    t.weight = {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
  } else {
    unsupported("Resize: mode \"{}\"", m.mode);
  }
  if (m.exclude_outside) {
    double total = 0;
    for (size_t i = 0; i < t.index.size(); ++i) {
      if (t.index[i] < 0 || t.index[i] >= in) t.weight[i] = 0;
      total += t.weight[i];
    }
    for (double& w : t.weight) w /= total;
  }
  for (int64_t& i : t.index) i = std::clamp<int64_t>(i, 0, in - 1);
  return t;
}

Tensor resample_axis(const Tensor& x, int axis, int64_t out, double scale, double roi_start,
                     double roi_end, const ResizeMode& m) {
  int rank = x.rank();
  Tag tag = axis_tag(axis, rank);
  int64_t in = x.size(tag);
  std::vector<Taps> taps;
  std::vector<uint8_t> outside;
  bool identity = out == in;
  for (int64_t o = 0; o < out; ++o) {
    double c = source_coordinate(m, double(o), in, out, scale, roi_start, roi_end);
    outside.push_back(std::isnan(c));
    taps.push_back(outside.back() ? taps_at(m, 0, in) : taps_at(m, c, in));
    identity = identity && c == double(o);
  }
  if (identity) return x;
  Shape along(DType::i64, {{tag, out}});
  Tensor y;
  for (size_t k = 0; k < taps[0].index.size(); ++k) {
    std::vector<int64_t> index;
    std::vector<double> weight;
    for (const Taps& t : taps) {
      index.push_back(t.index[k]);
      weight.push_back(t.weight[k]);
    }
    Tensor picked =
        x.gather(tag, Tensor::constant(HostBuffer::from<int64_t>(along, std::span(index))));
    if (taps[0].index.size() > 1) {
      HostBuffer w = HostBuffer::from<double>(along, std::span<const double>(weight));
      picked = picked * Tensor::constant(w.convert(x.dtype()));
    }
    y = y.valid() ? y + picked : picked;
  }
  bool any_outside = std::find(outside.begin(), outside.end(), 1) != outside.end();
  if (any_outside) {
    HostBuffer mask = HostBuffer::from<uint8_t>(along, std::span<const uint8_t>(outside));
    Tensor fill = Tensor::scalar(m.extrapolation, x.dtype());
    y = select(Tensor::constant(mask.convert(DType::boolean)), fill, y);
  }
  return y;
}

std::vector<Tensor> resize(const NodeContext& ctx) {
  ctx.expect_attributes({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                         "exclude_outside", "extrapolation_value"});
  ResizeMode m;
  m.mode = ctx.attr_string("mode", "nearest");
  m.transform = ctx.attr_string("coordinate_transformation_mode", "half_pixel");
  m.nearest = ctx.attr_string("nearest_mode", "round_prefer_floor");
  m.cubic_a = ctx.attr_float("cubic_coeff_a", -0.75f);
  m.exclude_outside = ctx.attr_int("exclude_outside", 0) != 0;
  m.extrapolation = ctx.attr_float("extrapolation_value", 0);
  std::vector<int64_t> in = ctx.dims(0);
  int rank = static_cast<int>(in.size());
  auto present = [&](int i) { return ctx.has_input(i) && ctx.value(i).numel() > 0; };
  // Opset 10 takes (X, scales); later ones (X, roi, scales, sizes).
  int scales_input = ctx.opset() >= 11 ? 2 : 1;
  std::vector<double> roi, scales;
  std::vector<int64_t> out(in);
  if (ctx.opset() >= 11 && present(1)) roi = ctx.value(1).to_f64();
  if (ctx.opset() >= 11 && present(3)) {
    out = ctx.ints(3);
    for (int a = 0; a < rank; ++a) scales.push_back(double(out[a]) / double(in[a]));
  } else {
    PRISM_CHECK(present(scales_input), "Resize: neither scales nor sizes given");
    scales = ctx.value(scales_input).to_f64();
    for (int a = 0; a < rank; ++a) out[a] = static_cast<int64_t>(std::floor(in[a] * scales[a]));
  }
  Tensor x = ctx.input(0);
  for (int a = rank - 1; a >= 0; --a) {
    double start = roi.empty() ? 0 : roi[a], end = roi.empty() ? 1 : roi[rank + a];
    x = resample_axis(x, a, out[a], scales[a], start, end, m);
  }
  return {x};
}

// Upsample (deprecated): integer-scale nearest repeats, or linear with asymmetric coordinates.
std::vector<Tensor> upsample(const NodeContext& ctx) {
  ctx.expect_attributes({"mode", "scales"});
  ResizeMode m;
  m.mode = ctx.attr_string("mode", "nearest");
  m.transform = "asymmetric";
  m.nearest = "floor";
  std::vector<int64_t> in = ctx.dims(0);
  std::vector<double> scales;
  if (ctx.has_input(1)) {
    scales = ctx.value(1).to_f64();
  } else {
    for (float s : ctx.attr("scales")->floats) scales.push_back(s);
  }
  Tensor x = ctx.input(0);
  int rank = static_cast<int>(in.size());
  for (int a = rank - 1; a >= 0; --a) {
    auto out = static_cast<int64_t>(std::floor(in[a] * scales[a]));
    x = resample_axis(x, a, out, scales[a], 0, 1, m);
  }
  return {x};
}

}  // namespace

void register_resize_ops(OpTable& t) {
  t["Resize"] = resize;
  t["Upsample"] = upsample;
}

}  // namespace prism::conformance
