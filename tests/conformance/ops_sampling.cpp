// Sampling at traced positions: GridSample (positions from the grid input) and RoiAlign (from
// the boxes). The whole computation is traced.
// Pixel coordinates are computed with elementwise ops, each interpolation tap becomes a flat
// index into the image's H*W pixels (take_along), and the taps are summed with their weights.
// Padding follows the usual definition: zeros outside, border clamps, reflection mirrors.
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

struct Sampler {
  std::string mode, padding;
  bool align_corners = false;
};

Tensor constant_like(const Tensor& x, double v) { return Tensor::scalar(v, x.dtype()); }

Tensor clip(const Tensor& x, double lo, double hi) {
  return minimum(maximum(x, constant_like(x, lo)), constant_like(x, hi));
}

// Mirrors x into [twice_low / 2, twice_high / 2] (bounds doubled so that half-pixel edges stay
// integers), repeating the reflection as often as needed.
Tensor reflect(const Tensor& x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return constant_like(x, 0);
  double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  Tensor d = (x - low).abs();
  Tensor extra = rem(d, constant_like(d, span));
  Tensor flips = (d / span).floor();
  Tensor even = eq(rem(flips, constant_like(flips, 2)), constant_like(flips, 0));
  return select(even, extra + low, (span - extra) + low);
}

Tensor reflect_into(const Tensor& x, int64_t size, bool align_corners) {
  return align_corners ? reflect(x, 0, 2.0 * double(size - 1))
                       : reflect(x, -1, 2.0 * double(size) - 1);
}

// Grid values in [-1, 1] to pixel coordinates.
Tensor unnormalize(const Tensor& g, int64_t size, bool align_corners) {
  if (align_corners) return (g + 1.0) * (0.5 * double(size - 1));
  return ((g + 1.0) * double(size) - 1.0) * 0.5;
}

// Where bilinear and nearest sample: border and reflection move the coordinate inside.
Tensor sample_coordinate(const Tensor& c, int64_t size, const Sampler& s) {
  if (s.padding == "border") return clip(c, 0, double(size - 1));
  if (s.padding == "reflection")
    return clip(reflect_into(c, size, s.align_corners), 0, double(size - 1));
  return c;
}

// A tap's integer coordinate made valid for indexing, and whether it lies inside (zeros
// padding reads 0 outside; bicubic's border and reflection bound each tap instead).
std::pair<Tensor, Tensor> bound_tap(const Tensor& c, int64_t size, const Sampler& s) {
  Tensor inside =
      logical_and(ge(c, constant_like(c, 0)), le(c, constant_like(c, double(size - 1))));
  Tensor bounded = c;
  if (s.mode == "bicubic" && s.padding == "reflection") {
    bounded = reflect_into(c, size, s.align_corners);
  }
  bounded = clip(bounded, 0, double(size - 1));
  if (s.padding != "zeros") inside = Tensor::full(inside.shape(), 1);
  return {bounded, inside};
}

// Cubic convolution weights (A = -0.75) of the taps at floor - 1 .. floor + 2 for fraction t.
std::vector<Tensor> cubic_weights(const Tensor& t) {
  constexpr double a = -0.75;
  auto near = [&](const Tensor& d) { return ((d * (a + 2) - (a + 3)) * d) * d + 1.0; };
  auto far = [&](const Tensor& d) { return ((d * a - 5 * a) * d + 8 * a) * d - 4 * a; };
  return {far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)};
}

std::vector<Tensor> grid_sample(const NodeContext& ctx) {
  ctx.expect_attributes({"align_corners", "mode", "padding_mode"});
  Sampler s{ctx.attr_string("mode", "bilinear"), ctx.attr_string("padding_mode", "zeros"),
            ctx.attr_int("align_corners", 0) != 0};
  std::vector<int64_t> xd = ctx.dims(0), gd = ctx.dims(1);
  if (xd.size() != 4) unsupported("GridSample: only 2-D images");
  int64_t n = xd[0], c = xd[1], h = xd[2], w = xd[3], ho = gd[1], wo = gd[2];
  Tensor grid = positional(ctx.input(1));
  Tensor gx = reshape_to(grid.slice("p0", 0, 1), {n, ho * wo});
  Tensor gy = reshape_to(grid.slice("p0", 1, 1), {n, ho * wo});
  Tensor x = unnormalize(gx, w, s.align_corners), y = unnormalize(gy, h, s.align_corners);
  if (s.mode != "bicubic") {
    x = sample_coordinate(x, w, s);
    y = sample_coordinate(y, h, s);
  }
  // Taps along each axis: (integer coordinate, weight).
  auto taps = [&](const Tensor& coord) {
    std::vector<std::pair<Tensor, Tensor>> out;
    if (s.mode == "nearest") {
      out.emplace_back(coord.round(), Tensor::full(coord.shape(), 1));
    } else if (s.mode == "bilinear") {
      Tensor f = coord.floor(), t = coord - f;
      out.emplace_back(f, 1.0 - t);
      out.emplace_back(f + 1.0, t);
    } else if (s.mode == "bicubic") {
      Tensor f = coord.floor();
      std::vector<Tensor> weights = cubic_weights(coord - f);
      for (int k = 0; k < 4; ++k) out.emplace_back(f + double(k - 1), weights[k]);
    } else {
      unsupported("GridSample: mode \"{}\"", s.mode);
    }
    return out;
  };
  Tensor image = reshape_to(ctx.input(0), {n, c, h * w});
  Tensor result;
  for (auto& [ty, wy] : taps(y)) {
    auto [iy, in_y] = bound_tap(ty, h, s);
    for (auto& [tx, wx] : taps(x)) {
      auto [ix, in_x] = bound_tap(tx, w, s);
      Tensor flat = (iy * double(w) + ix).convert(DType::i64);  // {n, ho*wo}
      Tensor index = broadcast_to_sizes(reshape_to(flat, {n, 1, ho * wo}), {n, c, ho * wo});
      Tensor picked = image.take_along(axis_tag(2, 3), index);
      Tensor weight = select(logical_and(in_x, in_y), wx * wy, constant_like(wx, 0));
      Tensor term =
          picked * broadcast_to_sizes(reshape_to(weight, {n, 1, ho * wo}), {n, c, ho * wo});
      result = result.valid() ? result + term : term;
    }
  }
  return {reshape_to(result, {n, c, ho, wo})};
}

// RoiAlign (average mode, a fixed sampling_ratio): each region's sample points are traced
// from its box (start + bin size * a constant offset per point), bilinearly interpolated with
// take_along into the region's image, and averaged per output bin.
std::vector<Tensor> roi_align(const NodeContext& ctx) {
  ctx.expect_attributes({"coordinate_transformation_mode", "mode", "output_height", "output_width",
                         "sampling_ratio", "spatial_scale"});
  if (ctx.attr_string("mode", "avg") != "avg") unsupported("RoiAlign: mode \"max\"");
  int64_t ratio = ctx.attr_int("sampling_ratio", 0);
  if (ratio <= 0)
    unsupported("RoiAlign: adaptive sampling (its sample count depends on the boxes)");
  int64_t oh = ctx.attr_int("output_height", 1), ow = ctx.attr_int("output_width", 1);
  double scale = ctx.attr_float("spatial_scale", 1.0f);
  bool half_pixel = ctx.attr_string("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  std::vector<int64_t> xd = ctx.dims(0);
  int64_t c = xd[1], h = xd[2], w = xd[3], rois = ctx.dims(1)[0];
  // Each region's image: [R, C, H*W].
  Tensor images = reshape_to(ctx.input(0), {xd[0], c, h * w});
  Tensor batch = with_tags(ctx.input(2).convert(DType::i64), {"roi"});
  images = positional(images.gather(axis_tag(0, 3), batch));
  Tensor boxes = positional(ctx.input(1));  // [R, 4]: x1 y1 x2 y2
  auto corner = [&](int64_t i) { return reshape_to(boxes.slice("p0", i, 1), {rois, 1}); };
  double offset = half_pixel ? 0.5 : 0;
  Tensor x0 = corner(0) * scale - offset, y0 = corner(1) * scale - offset;
  Tensor rw = corner(2) * scale - offset - x0, rh = corner(3) * scale - offset - y0;
  if (!half_pixel) {
    rw = maximum(rw, constant_like(rw, 1));
    rh = maximum(rh, constant_like(rh, 1));
  }
  // Sample points in bin-major order: (bin row, bin col, sample row, sample col).
  int64_t points = oh * ow * ratio * ratio;
  std::vector<double> fy, fx;
  for (int64_t py = 0; py < oh; ++py) {
    for (int64_t px = 0; px < ow; ++px) {
      for (int64_t iy = 0; iy < ratio; ++iy) {
        for (int64_t ix = 0; ix < ratio; ++ix) {
          fy.push_back((double(py) + (double(iy) + 0.5) / double(ratio)) / double(oh));
          fx.push_back((double(px) + (double(ix) + 0.5) / double(ratio)) / double(ow));
        }
      }
    }
  }
  DType dtype = boxes.dtype();
  auto offsets = [&](const std::vector<double>& v) {
    return Tensor::constant(
        HostBuffer::from<double>(positional_shape(DType::f64, {1, points}), std::span(v))
            .convert(dtype));
  };
  auto span_of = [&](const Tensor& start, const Tensor& size, const std::vector<double>& f) {
    auto v = broadcast_all({start, size, offsets(f)});
    return v[0] + v[1] * v[2];  // [R, points]
  };
  Tensor y = span_of(y0, rh, fy), x = span_of(x0, rw, fx);
  // Bilinear taps with RoiAlign's edge rules: points beyond one pixel outside read 0, others
  // are clamped onto the image.
  auto axis_taps = [&](Tensor p, int64_t size, Tensor& valid) {
    valid = logical_and(
        valid, logical_and(ge(p, constant_like(p, -1)), le(p, constant_like(p, double(size)))));
    p = maximum(p, constant_like(p, 0));
    Tensor low = p.floor();
    Tensor at_end = ge(low, constant_like(low, double(size - 1)));
    Tensor last = constant_like(low, double(size - 1));
    low = select(at_end, last, low);
    Tensor high = select(at_end, last, low + 1.0);
    Tensor frac = select(at_end, constant_like(p, 0), p - low);
    return std::vector<std::pair<Tensor, Tensor>>{{low, 1.0 - frac}, {high, frac}};
  };
  Tensor valid = Tensor::full(y.shape().with_dtype(DType::boolean), 1);
  auto ty = axis_taps(y, h, valid);
  auto tx = axis_taps(x, w, valid);
  Tensor sum;
  for (auto& [iy, wy] : ty) {
    for (auto& [ix, wx] : tx) {
      Tensor flat = (iy * double(w) + ix).convert(DType::i64);
      Tensor index = broadcast_to_sizes(reshape_to(flat, {rois, 1, points}), {rois, c, points});
      Tensor weight = select(valid, wx * wy, constant_like(wx, 0));
      Tensor term = images.take_along(axis_tag(2, 3), index) *
                    broadcast_to_sizes(reshape_to(weight, {rois, 1, points}), {rois, c, points});
      sum = sum.valid() ? sum + term : term;
    }
  }
  Tensor per_sample = reshape_to(sum, {rois, c, oh, ow, ratio * ratio});
  return {reshape_to(per_sample.mean(axis_tag(4, 5)), {rois, c, oh, ow})};
}

}  // namespace

void register_sampling_ops(OpTable& t) {
  t["GridSample"] = grid_sample;
  t["RoiAlign"] = roi_align;
}

}  // namespace prism::conformance
