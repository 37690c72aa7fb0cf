// Smaller families: BitShift, ReverseSequence, the window functions, and linear
// quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear), DFT and
// STFT, Det, TfIdfVectorizer.
#include <cmath>
#include <numbers>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

// Shifts as products with (integer) powers of two.
std::vector<Tensor> bit_shift(const NodeContext& ctx) {
  ctx.expect_attributes({"direction"});
  auto v = broadcast_all({ctx.input(0), ctx.input(1)});
  Tensor factor = pow(Tensor::scalar(2, v[0].dtype()), v[1]);
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

// DFT along `axis` of positional x (last axis: 1 real or 2 complex parts) as products with
// cosine and sine tables: for output bin k and input n, theta = 2 pi k n / N, Y = sum x e^{-i
// theta} (e^{+i theta} / N for the inverse). The tables depend on sizes only.
Tensor dft_along(Tensor x, int axis, int64_t length, bool onesided, bool inverse) {
  std::vector<int64_t> sizes = sizes_of(x);
  int rank = x.rank();
  PRISM_CHECK(axis < rank - 1, "DFT: axis {} is the real/imaginary axis", axis);
  Tag signal = axis_tag(axis, rank), last = axis_tag(rank - 1, rank);
  if (length < sizes[axis]) x = x.slice(signal, 0, length);
  if (length > sizes[axis]) x = x.pad(signal, 0, length - sizes[axis]);
  int64_t bins = onesided ? length / 2 + 1 : length;
  std::vector<double> cos_table, sin_table;
  for (int64_t n = 0; n < length; ++n) {
    for (int64_t k = 0; k < bins; ++k) {
      double theta = 2 * std::numbers::pi * double((k * n) % length) / double(length);
      cos_table.push_back(std::cos(theta));
      sin_table.push_back(std::sin(theta));
    }
  }
  Shape table_shape(DType::f64, {{signal, length}, {"bin", bins}});
  auto table = [&](const std::vector<double>& v) {
    return Tensor::constant(
        HostBuffer::from<double>(table_shape, std::span<const double>(v)).convert(x.dtype()));
  };
  Tensor c = table(cos_table), s = table(sin_table);
  Tensor re = x.slice(last, 0, 1), im;
  if (sizes.back() == 2) im = x.slice(last, 1, 1);
  // Each part keeps its unit last axis; the bins replace the signal axis in place.
  std::vector<Tag> order;
  for (int a = 0; a < rank; ++a) order.push_back(a == axis ? Tag("bin") : axis_tag(a, rank));
  auto project = [&](const Tensor& part, const Tensor& t) {
    return part.dot(t, signal).transpose(TagList(order));
  };
  double sign = inverse ? 1 : -1;
  Tensor out_re = project(re, c), out_im = project(re, s) * sign;
  if (im.valid()) {
    out_re = out_re - project(im, s) * sign;
    out_im = out_im + project(im, c);
  }
  Tensor y = concat({out_re, out_im}, last);
  if (inverse) y = y / double(length);
  return positional(y);
}

std::vector<Tensor> dft(const NodeContext& ctx) {
  ctx.expect_attributes({"axis", "inverse", "onesided"});
  int axis = normalize_axis(ctx.attr_int("axis", 1), ctx.rank(0));
  int64_t length = ctx.has_input(1) ? static_cast<int64_t>(ctx.scalar(1)) : ctx.dims(0)[axis];
  return {dft_along(ctx.input(0), axis, length, ctx.attr_int("onesided", 0) != 0,
                    ctx.attr_int("inverse", 0) != 0)};
}

[[noreturn]] int64_t unsupported_length() {
  unsupported("STFT: neither frame_length nor a window gives the frame length");
}

// STFT: frames of the signal ([batch, length, parts]) cut with strided slices, windowed,
// stacked on a frame axis and transformed: [batch, frames, bins, 2].
std::vector<Tensor> stft(const NodeContext& ctx) {
  ctx.expect_attributes({"onesided"});
  Tensor signal = ctx.input(0);
  std::vector<int64_t> sizes = sizes_of(signal);
  auto step = static_cast<int64_t>(ctx.scalar(1));
  int64_t frame = ctx.has_input(3)   ? static_cast<int64_t>(ctx.scalar(3))
                  : ctx.has_input(2) ? ctx.dims(2)[0]
                                     : unsupported_length();
  int64_t frames = (sizes[1] - frame) / step + 1;
  std::vector<Tensor> parts;
  for (int64_t f = 0; f < frames; ++f) {
    Tensor part = signal.slice(axis_tag(1, 3), f * step, frame);
    if (ctx.has_input(2)) {
      auto windowed = broadcast_all({part, reshape_to(ctx.input(2), {frame, 1})});
      part = windowed[0] * windowed[1];
    }
    parts.push_back(reshape_to(part, {sizes[0], 1, frame, sizes[2]}));
  }
  Tensor framed = concat(parts, axis_tag(1, 4));
  return {dft_along(framed, 2, frame, ctx.attr_int("onesided", 1) != 0, false)};
}
// Det of the trailing square matrices by cofactor expansion, written out for n <= 3 (prism
// has no factorization primitive for larger ones).
std::vector<Tensor> det(const NodeContext& ctx) {
  ctx.expect_attributes({});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  int64_t n = ctx.dims(0).back();
  if (n > 3) unsupported("Det: {}x{} matrices (only up to 3x3 are written out)", n, n);
  Tag row = axis_tag(rank - 2, rank), col = axis_tag(rank - 1, rank);
  auto at = [&](int64_t i, int64_t j) { return x.slice(row, i, 1).slice(col, j, 1); };
  Tensor d;
  if (n == 1) {
    d = at(0, 0);
  } else if (n == 2) {
    d = at(0, 0) * at(1, 1) - at(0, 1) * at(1, 0);
  } else {
    d = at(0, 0) * (at(1, 1) * at(2, 2) - at(1, 2) * at(2, 1)) -
        at(0, 1) * (at(1, 0) * at(2, 2) - at(1, 2) * at(2, 0)) +
        at(0, 2) * (at(1, 0) * at(2, 1) - at(1, 1) * at(2, 0));
  }
  std::vector<int64_t> batch = ctx.dims(0);
  batch.resize(batch.size() - 2);
  return {reshape_to(d, batch)};
}

// TfIdfVectorizer over integer tokens. The pool of n-grams is an attribute, so each pool entry
// becomes one count: for every skip distance, the token windows that match it (one slice per
// n-gram position compared with the pool's token, and-ed together), summed over positions.
std::vector<Tensor> tf_idf_vectorizer(const NodeContext& ctx) {
  ctx.expect_attributes({"max_gram_length", "min_gram_length", "max_skip_count", "mode",
                         "ngram_counts", "ngram_indexes", "pool_int64s", "weights"});
  if (!ctx.has_attr("pool_int64s")) unsupported("TfIdfVectorizer: a string pool");
  Tensor x = ctx.input(0).convert(DType::i64);
  bool batched = x.rank() == 2;
  if (!batched) x = reshape_to(x, {1, ctx.dims(0)[0]});
  int64_t rows = x.size("p1"), length = x.size("p0");
  int64_t min_n = ctx.attr_int("min_gram_length", 1), max_n = ctx.attr_int("max_gram_length", 1);
  int64_t max_skip = ctx.attr_int("max_skip_count", 0);
  std::vector<int64_t> counts = ctx.attr_ints("ngram_counts"),
                       indexes = ctx.attr_ints("ngram_indexes");
  std::vector<int64_t> pool = ctx.attr_ints("pool_int64s");
  std::vector<float> weights =
      ctx.attr("weights") ? ctx.attr("weights")->floats : std::vector<float>{};
  std::string mode = ctx.attr_string("mode", "TF");
  int64_t outputs = 0;
  for (int64_t i : indexes) outputs = std::max(outputs, i + 1);
  std::vector<Tensor> columns(outputs);
  Shape column_shape = positional_shape(DType::f32, {rows});
  int64_t entry = 0;  // index of the n-gram in pool order
  for (size_t level = 0; level < counts.size(); ++level) {
    int64_t n = static_cast<int64_t>(level) + 1;
    int64_t begin = counts[level];
    int64_t end = level + 1 < counts.size() ? counts[level + 1] : int64_t(pool.size());
    for (int64_t at = begin; at + n <= end; at += n, ++entry) {
      Tensor count = Tensor::zeros(column_shape);
      if (n >= min_n && n <= max_n) {
        for (int64_t skip = 0; skip <= (n == 1 ? 0 : max_skip); ++skip) {
          int64_t windows = length - (n - 1) * (skip + 1);
          if (windows <= 0) continue;
          Tensor match;
          for (int64_t j = 0; j < n; ++j) {
            Tensor part = x.slice("p0", j * (skip + 1), windows);
            Tensor same = eq(part, Tensor::scalar(double(pool[at + j]), DType::i64));
            match = match.valid() ? logical_and(match, same) : same;
          }
          count = count + positional(match.convert(DType::f32).sum("p0"));
        }
      }
      double weight = entry < int64_t(weights.size()) ? weights[entry] : 1.0;
      if (mode == "IDF") {
        count = select(gt(count, Tensor::scalar(0)), Tensor::full(column_shape, weight),
                       Tensor::zeros(column_shape));
      } else if (mode == "TFIDF") {
        count = count * weight;
      } else if (mode != "TF") {
        unsupported("TfIdfVectorizer: mode \"{}\"", mode);
      }
      columns[indexes.at(entry)] = reshape_to(count, {rows, 1});
    }
  }
  for (Tensor& c : columns) {
    if (!c.valid()) c = Tensor::zeros(positional_shape(DType::f32, {rows, 1}));
  }
  Tensor y = concat(columns, "p0");
  if (!batched) y = reshape_to(y, {outputs});
  return {y};
}

}  // namespace

void register_misc_ops(OpTable& t) {
  t["BitShift"] = bit_shift;
  t["DFT"] = dft;
  t["Det"] = det;
  t["TfIdfVectorizer"] = tf_idf_vectorizer;
  t["STFT"] = stft;
  t["ReverseSequence"] = reverse_sequence;
  t["HannWindow"] = window({0.5, -0.5});
  t["HammingWindow"] = window({25.0 / 46.0, -21.0 / 46.0});
  t["BlackmanWindow"] = window({0.42, -0.5, 0.08});
  t["QuantizeLinear"] = quantize_linear;
  t["DequantizeLinear"] = dequantize_linear;
  t["DynamicQuantizeLinear"] = dynamic_quantize_linear;
}

}  // namespace prism::conformance
