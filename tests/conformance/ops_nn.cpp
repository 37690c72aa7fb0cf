// Matrix products (MatMul, Gemm, Einsum), softmax family and normalizations, Dropout (as
// inference).
#include <cctype>
#include <set>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {}  // namespace

Tensor numpy_matmul(const Tensor& a, const Tensor& b) {
  std::vector<int64_t> as = sizes_of(a), bs = sizes_of(b);
  bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  if (a_vector) as.insert(as.begin(), 1);
  if (b_vector) bs.push_back(1);
  std::vector<int64_t> a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  std::vector<int64_t> batch = broadcast_sizes({a_batch, b_batch});
  std::vector<Tag> a_tags, b_tags;
  int nb = static_cast<int>(batch.size());
  for (int i = 0; i < nb; ++i) a_tags.push_back(axis_tag(i, nb));
  b_tags = a_tags;
  a_tags.insert(a_tags.end(), {"m", "k"});
  b_tags.insert(b_tags.end(), {"k", "n"});
  auto full = [&](const Tensor& x, std::vector<int64_t> mat) {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), mat.begin(), mat.end());
    return broadcast_to_sizes(x, s);
  };
  Tensor fa = with_tags(full(reshape_to(a, as), {as[as.size() - 2], as.back()}), a_tags);
  Tensor fb = with_tags(full(reshape_to(b, bs), {bs[bs.size() - 2], bs.back()}), b_tags);
  std::vector<int64_t> out = batch;
  if (!a_vector) out.push_back(as[as.size() - 2]);
  if (!b_vector) out.push_back(bs.back());
  return reshape_to(fa.dot(fb, "k"), out);
}

namespace {

std::vector<Tensor> matmul(const NodeContext& ctx) {
  ctx.expect_attributes({});
  return {numpy_matmul(ctx.input(0), ctx.input(1))};
}

// A zero point, as a scalar or (per row of a matrix operand) a column to broadcast.
Tensor zero_point_of(const NodeContext& ctx, int i, bool per_row) {
  Tensor zp = ctx.input(i).convert(DType::i32);
  if (ctx.value(i).numel() == 1) return reshape_to(zp, {});
  return per_row ? reshape_to(zp, {ctx.value(i).numel(), 1}) : positional(zp);
}

// (a - a_zero_point) x (b - b_zero_point) in int32.
Tensor integer_matmul(const NodeContext& ctx, int a, int a_zp, int b, int b_zp) {
  Tensor x = ctx.input(a).convert(DType::i32), y = ctx.input(b).convert(DType::i32);
  auto subtract = [](const Tensor& v, const Tensor& zp) {
    auto both = broadcast_all({v, zp});
    return both[0] - both[1];
  };
  if (ctx.has_input(a_zp)) x = subtract(x, zero_point_of(ctx, a_zp, true));
  if (ctx.has_input(b_zp)) y = subtract(y, zero_point_of(ctx, b_zp, false));
  return numpy_matmul(x, y);
}

std::vector<Tensor> matmul_integer(const NodeContext& ctx) {
  ctx.expect_attributes({});
  return {integer_matmul(ctx, 0, 2, 1, 3)};
}

// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
std::vector<Tensor> qlinear_matmul(const NodeContext& ctx) {
  ctx.expect_attributes({});
  Tensor product = integer_matmul(ctx, 0, 2, 3, 5).convert(DType::f64);
  Tensor scale = reshape_to(ctx.input(1), {}).convert(DType::f64) *
                 reshape_to(ctx.input(4), {}).convert(DType::f64);
  Tensor y_scale = reshape_to(ctx.input(6), {}).convert(DType::f64);
  return {quantize(product * scale, y_scale, reshape_to(ctx.input(7), {}), ctx.dtype(7))};
}

std::vector<Tensor> gemm(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "beta", "transA", "transB"});
  Tensor a = with_tags(ctx.input(0), {"m", "k"});
  Tensor b = with_tags(ctx.input(1), {"k", "n"});
  if (ctx.attr_int("transA", 0)) a = with_tags(ctx.input(0), {"k", "m"});
  if (ctx.attr_int("transB", 0)) b = with_tags(ctx.input(1), {"n", "k"});
  Tensor y = positional(a.dot(b, "k").transpose({"m", "n"})) * ctx.attr_float("alpha", 1.0f);
  if (ctx.has_input(2)) {
    Tensor c = broadcast_to_sizes(ctx.input(2), sizes_of(y)) * ctx.attr_float("beta", 1.0f);
    y = y + c;
  }
  return {y};
}

// Einsum by tags: each letter is a tag; letters shared by two operands and absent from the
// output are contracted by dot, letters of one operand only are summed away first.
std::vector<Tensor> einsum(const NodeContext& ctx) {
  ctx.expect_attributes({"equation"});
  std::string eq;
  for (char c : ctx.attr_string("equation")) {
    if (c != ' ') eq += c;
  }
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow), out;
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // An ellipsis stands for the leading dims, aligned from the right across operands: they get
  // the upper-case letters, the last of them 'Z'.
  std::string ellipsis;
  for (size_t i = 0; i < terms.size(); ++i) {
    size_t at = terms[i].find("...");
    if (at == std::string::npos) continue;
    size_t count = ctx.rank(static_cast<int>(i)) - (terms[i].size() - 3);
    std::string letters;
    for (size_t k = 0; k < count; ++k) letters += static_cast<char>('Z' - (count - 1 - k));
    if (letters.size() > ellipsis.size()) ellipsis = letters;
    terms[i].replace(at, 3, letters);
  }
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (size_t at = out.find("..."); at != std::string::npos) out.replace(at, 3, ellipsis);
  } else {
    std::multiset<char> all;
    for (const std::string& t : terms) all.insert(t.begin(), t.end());
    out = ellipsis;
    for (char c : std::set<char>(all.begin(), all.end())) {
      if (std::islower(c) && all.count(c) == 1) out += c;
    }
  }
  auto tag = [](char c) { return Tag(std::string("e_") + c); };
  std::vector<Tensor> ops;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::string& t = terms[i];
    std::vector<Tag> tags;
    for (size_t k = 0; k < t.size(); ++k) {
      bool repeat = t.find(t[k]) < k;
      tags.push_back(repeat ? Tag(fmt::format("e_{}_{}", t[k], k)) : tag(t[k]));
    }
    Tensor x = with_tags(ctx.input(static_cast<int>(i)), tags);
    // A repeated letter takes the diagonal: pick x[..., j, j] with take_along on the second
    // occurrence, indexed by the position along the first, then drop that unit axis.
    for (size_t k = t.size(); k-- > 0;) {
      if (t.find(t[k]) == k) continue;
      Tag first = tag(t[k]), second = tags[k];
      Shape unit = x.shape();
      std::vector<Dim> dims(unit.dims().begin(), unit.dims().end());
      for (Dim& d : dims) d.size = d.tag == second ? 1 : d.size;
      Tensor index = Tensor::iota(Shape(DType::i64, dims), first);
      x = x.take_along(second, index);
      std::vector<Dim> kept;
      for (const Dim& d : x.shape().dims()) {
        if (d.tag != second) kept.push_back(d);
      }
      x = x.reshape(Shape(x.dtype(), kept));
      t.erase(k, 1);
    }
    ops.push_back(x);
  }
  // Which letters are still needed after operand i: by the output or a later operand.
  auto needed_after = [&](size_t i, char c) {
    if (out.find(c) != std::string::npos) return true;
    for (size_t j = i + 1; j < terms.size(); ++j) {
      if (terms[j].find(c) != std::string::npos) return true;
    }
    return false;
  };
  Tensor acc = ops[0];
  std::string acc_letters = terms[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<Tag> contract;
    std::string kept;
    for (char c : acc_letters) {
      if (terms[i].find(c) != std::string::npos && !needed_after(i, c)) {
        contract.push_back(tag(c));
      }
    }
    acc = acc.dot(ops[i], TagList(contract));
    for (const Dim& d : acc.shape().dims()) kept += d.tag.str().back();
    acc_letters = kept;
  }
  std::vector<Tag> summed;
  for (char c : acc_letters) {
    if (out.find(c) == std::string::npos) summed.push_back(tag(c));
  }
  if (!summed.empty()) acc = acc.sum(TagList(summed));
  std::vector<Tag> order;
  for (char c : out) order.push_back(tag(c));
  if (order.empty()) return {acc};
  return {positional(acc.transpose(TagList(order)))};
}

// Softmax, LogSoftmax and Hardmax: one axis from opset 13; before, the input is seen as 2-D
// ([before axis, from axis on]) and normalized over the second dim.
OpBuilder softmax_like(Tensor (*f)(const Tensor&, Tag)) {
  return [f](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({"axis"});
    Tensor x = ctx.input(0);
    int rank = x.rank();
    if (ctx.opset() >= 13) {
      int axis = normalize_axis(ctx.attr_int("axis", -1), rank);
      return {f(x, axis_tag(axis, rank))};
    }
    int axis = normalize_axis(ctx.attr_int("axis", 1), rank);
    std::vector<int64_t> sizes = sizes_of(x);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= sizes[i];
    Tensor y = f(reshape_to(x, {outer, inner}), axis_tag(1, 2));
    return {reshape_to(y, sizes)};
  };
}

Tensor softmax(const Tensor& x, Tag t) { return x.softmax(t); }
Tensor log_softmax(const Tensor& x, Tag t) { return x.log_softmax(t); }
// One at the first maximum along t, zero elsewhere.
Tensor hardmax(const Tensor& x, Tag t) {
  Tensor first = x.argmax(t, DType::i64);
  return eq(Tensor::iota(x.shape().with_dtype(DType::i64), t), first).convert(x.dtype());
}

// Normalizes over the tags `axes` of positional x: (x - mean) / sqrt(var + eps). Mean and the
// inverse deviation come back too, with the normalized axes kept as size 1.
struct Normalized {
  Tensor y, mean, inv_std;
};
Normalized normalize(const Tensor& x, const std::vector<int>& axes, double eps) {
  int rank = x.rank();
  std::vector<Tag> tags;
  std::vector<int64_t> kept = sizes_of(x);
  for (int a : axes) {
    tags.push_back(axis_tag(a, rank));
    kept[a] = 1;
  }
  Tensor mean = x.mean(TagList(tags));
  Tensor centered = x - mean;
  Tensor inv_std = ((centered * centered).mean(TagList(tags)) + eps).rsqrt();
  return {centered * inv_std, reshape_to(mean, kept), reshape_to(inv_std, kept)};
}

std::vector<Tensor> layer_norm(const NodeContext& ctx) {
  ctx.expect_attributes({"axis", "epsilon", "stash_type"});
  if (ctx.attr_int("stash_type", 1) != 1) unsupported("LayerNormalization: stash_type != float");
  Tensor x = ctx.input(0);
  int rank = x.rank(), axis = normalize_axis(ctx.attr_int("axis", -1), rank);
  std::vector<int> axes;
  for (int a = axis; a < rank; ++a) axes.push_back(a);
  Normalized n = normalize(x, axes, ctx.attr_float("epsilon", 1e-5f));
  Tensor y = positional(n.y) * broadcast_to_sizes(ctx.input(1), sizes_of(x));
  if (ctx.has_input(2)) y = y + broadcast_to_sizes(ctx.input(2), sizes_of(x));
  return {y, n.mean, n.inv_std};
}

std::vector<Tensor> batch_norm(const NodeContext& ctx) {
  ctx.expect_attributes({"epsilon", "momentum", "training_mode"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  std::vector<int64_t> sizes = sizes_of(x);
  double eps = ctx.attr_float("epsilon", 1e-5f);
  Tensor scale = per_channel(ctx.input(1), sizes), bias = per_channel(ctx.input(2), sizes);
  Tensor mean = per_channel(ctx.input(3), sizes), var = per_channel(ctx.input(4), sizes);
  if (ctx.attr_int("training_mode", 0) == 0) {
    return {(x - mean) * (var + eps).rsqrt() * scale + bias};
  }
  // Training: normalize with the batch's statistics and update the running ones.
  std::vector<int> axes{0};
  for (int a = 2; a < rank; ++a) axes.push_back(a);
  Normalized n = normalize(x, axes, eps);
  std::vector<Tag> tags;
  for (int a : axes) tags.push_back(axis_tag(a, rank));
  Tensor batch_mean = x.mean(TagList(tags));
  Tensor centered = x - batch_mean;
  Tensor batch_var = (centered * centered).mean(TagList(tags));
  double momentum = ctx.attr_float("momentum", 0.9f);
  Tensor running_mean = ctx.input(3) * momentum + positional(batch_mean) * (1 - momentum);
  Tensor running_var = ctx.input(4) * momentum + positional(batch_var) * (1 - momentum);
  Tensor y = positional(n.y) * scale + bias;
  return {y, running_mean, running_var};
}

std::vector<Tensor> instance_norm(const NodeContext& ctx) {
  ctx.expect_attributes({"epsilon"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  std::vector<int> axes;
  for (int a = 2; a < rank; ++a) axes.push_back(a);
  Normalized n = normalize(x, axes, ctx.attr_float("epsilon", 1e-5f));
  std::vector<int64_t> sizes = sizes_of(x);
  return {positional(n.y) * per_channel(ctx.input(1), sizes) + per_channel(ctx.input(2), sizes)};
}

std::vector<Tensor> mean_variance_norm(const NodeContext& ctx) {
  ctx.expect_attributes({"axes"});
  std::vector<int> axes;
  for (int64_t a : ctx.attr_ints("axes", {0, 2, 3})) axes.push_back(normalize_axis(a, ctx.rank(0)));
  // The ONNX function adds 1e-9 to the deviation's square root; adding it to the variance
  // instead differs by far less than the tolerance for the test's magnitudes.
  return {positional(normalize(ctx.input(0), axes, 1e-9).y)};
}

// Local response normalization over the channel axis: the windowed sum of squares is a sum of
// shifted slices of the zero-padded squares.
std::vector<Tensor> lrn(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "beta", "bias", "size"});
  Tensor x = ctx.input(0);
  int rank = x.rank();
  Tag channel = axis_tag(1, rank);
  int64_t size = ctx.attr_int("size", 1), channels = x.size(channel);
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  Tensor squares = (x * x).pad(channel, before, after);
  Tensor sum = squares.slice(channel, 0, channels);
  for (int64_t i = 1; i < size; ++i) sum = sum + squares.slice(channel, i, channels);
  double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f);
  double bias = ctx.attr_float("bias", 1.0f);
  Tensor denominator = pow(sum * (alpha / size) + bias, Tensor::scalar(beta, x.dtype()));
  return {x / denominator};
}

// Dropout at inference: the identity, with an all-true mask.
std::vector<Tensor> dropout(const NodeContext& ctx) {
  ctx.expect_attributes({"ratio", "seed", "is_test"});
  bool training = ctx.has_input(2) && ctx.scalar(2) != 0;
  double ratio = ctx.has_input(1) ? ctx.scalar(1) : ctx.attr_float("ratio", 0.5f);
  if (training && ratio != 0) unsupported("Dropout: training mode draws random numbers");
  Tensor x = ctx.input(0);
  return {x, Tensor::full(x.shape().with_dtype(DType::boolean), 1)};
}

}  // namespace

void register_nn_ops(OpTable& t) {
  t["MatMul"] = matmul;
  t["MatMulInteger"] = matmul_integer;
  t["QLinearMatMul"] = qlinear_matmul;
  t["Gemm"] = gemm;
  t["Einsum"] = einsum;
  t["Softmax"] = softmax_like(softmax);
  t["LogSoftmax"] = softmax_like(log_softmax);
  t["Hardmax"] = softmax_like(hardmax);
  t["LayerNormalization"] = layer_norm;
  t["BatchNormalization"] = batch_norm;
  t["InstanceNormalization"] = instance_norm;
  t["MeanVarianceNormalization"] = mean_variance_norm;
  t["LRN"] = lrn;
  t["Dropout"] = dropout;
}

}  // namespace prism::conformance
