// Reductions: Reduce* (axes, keepdims, noop_with_empty_axes), ArgMax/ArgMin, CumSum, TopK.
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

// The reduced axes of a Reduce* node: the `axes` input where the op takes it (ReduceSum from
// opset 13, the others from 18), else the attribute; empty means all axes unless
// noop_with_empty_axes is set (then nothing is reduced).
std::vector<int> reduce_axes(const NodeContext& ctx, bool& noop) {
  int rank = ctx.rank(0);
  bool axes_input = ctx.op() == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  std::vector<int64_t> given = axes_input
                                   ? (ctx.has_input(1) ? ctx.ints(1) : std::vector<int64_t>{})
                                   : ctx.attr_ints("axes");
  noop = given.empty() && ctx.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int> axes;
  for (int64_t a : given) axes.push_back(normalize_axis(a, rank));
  if (given.empty()) {
    for (int a = 0; a < rank; ++a) axes.push_back(a);
  }
  return axes;
}

// Reduces x over `axes` with f, keeping them as size-1 dims when keepdims is set.
Tensor reduce_keeping(const Tensor& x, const std::vector<int>& axes, bool keepdims,
                      Tensor (*f)(const Tensor&, const TagList&)) {
  int rank = x.rank();
  std::vector<Tag> tags;
  for (int a : axes) tags.push_back(axis_tag(a, rank));
  Tensor y = f(x, TagList(tags));
  if (!keepdims) return positional(y);
  std::vector<int64_t> sizes = sizes_of(x);
  for (int a : axes) sizes[a] = 1;
  return reshape_to(y, sizes);
}

using ReduceFn = Tensor (*)(const Tensor&, const TagList&);

// `pre` maps the input before summing (|x|, x^2...), `post` maps the result (sqrt, log).
OpBuilder reduce(ReduceFn f, Tensor (*pre)(const Tensor&) = nullptr,
                 Tensor (*post)(const Tensor&) = nullptr) {
  return [=](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({"axes", "keepdims", "noop_with_empty_axes"});
    bool noop = false;
    std::vector<int> axes = reduce_axes(ctx, noop);
    Tensor x = ctx.input(0);
    if (noop) return {x};
    if (pre) x = pre(x);
    Tensor y = reduce_keeping(x, axes, ctx.attr_int("keepdims", 1) != 0, f);
    return {post ? post(y) : y};
  };
}

Tensor sum(const Tensor& x, const TagList& t) { return x.sum(t); }
Tensor mean(const Tensor& x, const TagList& t) { return x.mean(t); }
Tensor max(const Tensor& x, const TagList& t) { return x.max(t); }
Tensor min(const Tensor& x, const TagList& t) { return x.min(t); }
Tensor prod(const Tensor& x, const TagList& t) { return x.prod(t); }
// log(sum(exp(x))) shifted by the maximum, so large inputs do not overflow.
Tensor log_sum_exp(const Tensor& x, const TagList& t) {
  Tensor m = x.max(t);
  return (x - m).exp().sum(t).log() + m;
}

// ArgMax/ArgMin to int64. select_last_index reverses the axis (a gather with reversed
// indices), takes the first extreme there and maps the index back.
OpBuilder arg_reduce(bool is_max) {
  return [is_max](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({"axis", "keepdims", "select_last_index"});
    Tensor x = ctx.input(0);
    int rank = x.rank();
    int axis = normalize_axis(ctx.attr_int("axis", 0), rank);
    Tag tag = axis_tag(axis, rank);
    int64_t n = x.size(tag);
    bool last = ctx.attr_int("select_last_index", 0) != 0;
    if (last) {
      std::vector<int64_t> reversed;
      for (int64_t i = n - 1; i >= 0; --i) reversed.push_back(i);
      Tensor idx = Tensor::constant(HostBuffer::from<int64_t>(Shape(DType::i64, {{tag, n}}),
                                                              std::span<const int64_t>(reversed)));
      x = x.gather(tag, idx);
    }
    Tensor i = is_max ? x.argmax(tag, DType::i64) : x.argmin(tag, DType::i64);
    if (last) i = static_cast<double>(n - 1) - i;
    if (ctx.attr_int("keepdims", 1) == 0) return {positional(i)};
    std::vector<int64_t> sizes = sizes_of(x);
    sizes[axis] = 1;
    return {reshape_to(i, sizes)};
  };
}

std::vector<Tensor> cumsum(const NodeContext& ctx) {
  ctx.expect_attributes({"exclusive", "reverse"});
  Tensor x = ctx.input(0);
  int axis = normalize_axis(static_cast<int64_t>(ctx.scalar(1)), x.rank());
  return {x.cumsum(axis_tag(axis, x.rank()), ctx.attr_int("exclusive", 0) != 0,
                   ctx.attr_int("reverse", 0) != 0)};
}

std::vector<Tensor> top_k(const NodeContext& ctx) {
  ctx.expect_attributes({"axis", "largest", "sorted", "k"});
  if (ctx.attr_int("sorted", 1) == 0) unsupported("TopK: sorted=0 (unspecified order)");
  Tensor x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_int("axis", -1), x.rank());
  int64_t k = ctx.opset() >= 10 ? ctx.ints(1).at(0) : ctx.attr_int("k", 0);
  auto [values, indices] =
      x.top_k(axis_tag(axis, x.rank()), k, ctx.attr_int("largest", 1) != 0, DType::i64);
  return {values, indices};
}

}  // namespace

void register_reduce_ops(OpTable& t) {
  t["ReduceSum"] = reduce(sum);
  t["ReduceMean"] = reduce(mean);
  t["ReduceMax"] = reduce(max);
  t["ReduceMin"] = reduce(min);
  t["ReduceProd"] = reduce(prod);
  t["ReduceL1"] = reduce(sum, [](const Tensor& x) { return x.abs(); });
  t["ReduceL2"] = reduce(
      sum, [](const Tensor& x) { return x * x; }, [](const Tensor& y) { return y.sqrt(); });
  t["ReduceSumSquare"] = reduce(sum, [](const Tensor& x) { return x * x; });
  t["ReduceLogSum"] = reduce(sum, nullptr, [](const Tensor& y) { return y.log(); });
  t["ReduceLogSumExp"] = reduce(log_sum_exp);
  t["ArgMax"] = arg_reduce(true);
  t["ArgMin"] = arg_reduce(false);
  t["CumSum"] = cumsum;
  t["TopK"] = top_k;
}

}  // namespace prism::conformance
