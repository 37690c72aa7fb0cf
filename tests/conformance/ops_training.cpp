// The optimizers of the ai.onnx.preview.training domain (Adagrad, Momentum, Adam): elementwise
// updates of n tensors at once. Inputs are R (learning rate), T (step count), then n tensors of
// each kind; the step count is read on the host, everything else is traced.
#include <cmath>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

// The rank-0 learning rate (given with any shape of one element).
Tensor learning_rate(const NodeContext& ctx) { return reshape_to(ctx.input(0), {}); }

// Number of tensors updated: inputs after R and T, split into `kinds` groups.
int group_size(const NodeContext& ctx, int kinds) {
  int n = (ctx.num_inputs() - 2) / kinds;
  PRISM_CHECK(n * kinds + 2 == ctx.num_inputs(), "{}: {} inputs do not form {} groups", ctx.op(),
              ctx.num_inputs(), kinds);
  return n;
}

std::vector<Tensor> adagrad(const NodeContext& ctx) {
  ctx.expect_attributes({"decay_factor", "epsilon", "norm_coefficient"});
  int n = group_size(ctx, 3);
  double decay = ctx.attr_float("decay_factor", 0), eps = ctx.attr_float("epsilon", 0);
  double norm = ctx.attr_float("norm_coefficient", 0);
  Tensor r = learning_rate(ctx) / (1 + ctx.scalar(1) * decay);
  std::vector<Tensor> xs, hs;
  for (int i = 0; i < n; ++i) {
    Tensor x = ctx.input(2 + i), g = ctx.input(2 + n + i), h = ctx.input(2 + 2 * n + i);
    Tensor g_reg = x * norm + g;
    Tensor h_new = h + g_reg * g_reg;
    xs.push_back(x - r * g_reg / (h_new.sqrt() + eps));
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

std::vector<Tensor> momentum(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "beta", "mode", "norm_coefficient"});
  int n = group_size(ctx, 3);
  double alpha = ctx.attr_float("alpha", 0), beta = ctx.attr_float("beta", 0);
  double norm = ctx.attr_float("norm_coefficient", 0);
  std::string mode = ctx.attr_string("mode", "standard");
  if (mode != "standard" && mode != "nesterov") unsupported("Momentum: mode \"{}\"", mode);
  // The first step (T = 0) takes the gradient unscaled.
  double beta_now = ctx.scalar(1) > 0 ? beta : 1.0;
  Tensor r = learning_rate(ctx);
  std::vector<Tensor> xs, vs;
  for (int i = 0; i < n; ++i) {
    Tensor x = ctx.input(2 + i), g = ctx.input(2 + n + i), v = ctx.input(2 + 2 * n + i);
    Tensor g_reg = x * norm + g;
    Tensor v_new = v * alpha + g_reg * beta_now;
    Tensor step = mode == "standard" ? v_new : g_reg + v_new * alpha;
    xs.push_back(x - r * step);
    vs.push_back(v_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

std::vector<Tensor> adam(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"});
  int n = group_size(ctx, 4);
  double alpha = ctx.attr_float("alpha", 0.9f), beta = ctx.attr_float("beta", 0.999f);
  double eps = ctx.attr_float("epsilon", 0), norm = ctx.attr_float("norm_coefficient", 0);
  double post = ctx.attr_float("norm_coefficient_post", 0);
  double t = ctx.scalar(1);
  // Bias correction of both moments, folded into the learning rate (from the second step on).
  double correction = t > 0 ? std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : 1;
  Tensor r = learning_rate(ctx) * correction;
  std::vector<Tensor> xs, vs, hs;
  for (int i = 0; i < n; ++i) {
    Tensor x = ctx.input(2 + i), g = ctx.input(2 + n + i);
    Tensor v = ctx.input(2 + 2 * n + i), h = ctx.input(2 + 3 * n + i);
    Tensor g_reg = x * norm + g;
    Tensor v_new = v * alpha + g_reg * (1 - alpha);
    Tensor h_new = h * beta + g_reg * g_reg * (1 - beta);
    Tensor x_new = x - r * v_new / (h_new.sqrt() + eps);
    xs.push_back(x_new * (1 - post));
    vs.push_back(v_new);
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

}  // namespace

void register_training_ops(OpTable& t) {
  t["ai.onnx.preview.training.Adagrad"] = adagrad;
  t["ai.onnx.preview.training.Momentum"] = momentum;
  t["ai.onnx.preview.training.Adam"] = adam;
}

}  // namespace prism::conformance
