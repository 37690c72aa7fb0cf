// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, from take_along (the
// target class of each sample), gather (its weight) and reductions.
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

// -log_prob[n, target[n, ...], ...] * weight[target], zero where target == ignore_index,
// reduced as `reduction` says. `log_prob` is [N, C, d...], `target` [N, d...].
Tensor nll(const NodeContext& ctx, const Tensor& log_prob, const Tensor& target,
           const std::optional<Tensor>& weight) {
  int rank = log_prob.rank();
  std::vector<int64_t> target_dims = sizes_of(target), unit = target_dims;
  unit.insert(unit.begin() + 1, 1);
  Tensor t = target.convert(DType::i64);
  Tensor valid = Tensor::full(t.shape().with_dtype(DType::boolean), 1);
  if (ctx.has_attr("ignore_index")) {
    valid = ne(t, Tensor::scalar(static_cast<double>(ctx.attr_int("ignore_index", 0)), DType::i64));
  }
  Tensor safe = select(valid, t, Tensor::scalar(0, DType::i64));
  Tensor picked = log_prob.take_along(axis_tag(1, rank), reshape_to(safe, unit));
  picked = reshape_to(picked, target_dims);
  DType dtype = log_prob.dtype();
  Tensor w = Tensor::full(positional_shape(dtype, target_dims), 1);
  if (weight) {
    std::vector<Dim> dims;
    for (size_t i = 0; i < target_dims.size(); ++i) {
      dims.push_back({Tag(fmt::format("i{}", i)), target_dims[i]});
    }
    w = reshape_to(positional(*weight).gather("p0", safe.reshape(Shape(DType::i64, dims))),
                   target_dims);
  }
  w = select(valid, w, Tensor::scalar(0, dtype));
  Tensor loss = -(picked * w);
  std::string reduction = ctx.attr_string("reduction", "mean");
  std::vector<Tag> all;
  for (int i = 0; i < loss.rank(); ++i) all.push_back(axis_tag(i, loss.rank()));
  if (reduction == "none") return loss;
  if (reduction == "sum") return loss.sum(TagList(all));
  if (reduction == "mean") return loss.sum(TagList(all)) / w.sum(TagList(all));
  unsupported("{}: reduction \"{}\"", ctx.op(), reduction);
}

std::optional<Tensor> optional_input(const NodeContext& ctx, int i) {
  if (!ctx.has_input(i)) return std::nullopt;
  return ctx.input(i);
}

std::vector<Tensor> nll_loss(const NodeContext& ctx) {
  ctx.expect_attributes({"ignore_index", "reduction"});
  return {nll(ctx, ctx.input(0), ctx.input(1), optional_input(ctx, 2))};
}

std::vector<Tensor> softmax_cross_entropy(const NodeContext& ctx) {
  ctx.expect_attributes({"ignore_index", "reduction"});
  Tensor scores = ctx.input(0);
  Tensor log_prob = scores.log_softmax(axis_tag(1, scores.rank()));
  return {nll(ctx, log_prob, ctx.input(1), optional_input(ctx, 2)), log_prob};
}

}  // namespace

void register_loss_ops(OpTable& t) {
  t["NegativeLogLikelihoodLoss"] = nll_loss;
  t["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
}

}  // namespace prism::conformance
