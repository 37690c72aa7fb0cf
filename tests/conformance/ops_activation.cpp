// Activations and the trigonometric/hyperbolic functions prism has no primitive for, composed
// from exp, log, sqrt and atan2.
#include <cmath>

#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

Tensor zero_like(const Tensor& x) { return Tensor::scalar(0, x.dtype()); }

std::vector<Tensor> leaky_relu(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha"});
  Tensor x = ctx.input(0);
  double alpha = ctx.attr_float("alpha", 0.01f);
  return {select(lt(x, zero_like(x)), x * alpha, x)};
}

std::vector<Tensor> elu(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha"});
  Tensor x = ctx.input(0);
  double alpha = ctx.attr_float("alpha", 1.0f);
  return {select(lt(x, zero_like(x)), (x.exp() - 1.0) * alpha, x)};
}

std::vector<Tensor> celu(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha"});
  Tensor x = ctx.input(0);
  double alpha = ctx.attr_float("alpha", 1.0f);
  Tensor negative = minimum(zero_like(x), ((x / alpha).exp() - 1.0) * alpha);
  return {maximum(zero_like(x), x) + negative};
}

std::vector<Tensor> selu(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "gamma"});
  Tensor x = ctx.input(0);
  double alpha = ctx.attr_float("alpha", 1.67326319217681884765625f);
  double gamma = ctx.attr_float("gamma", 1.05070102214813232421875f);
  return {select(le(x, zero_like(x)), (x.exp() - 1.0) * alpha, x) * gamma};
}

std::vector<Tensor> thresholded_relu(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha"});
  Tensor x = ctx.input(0);
  double alpha = ctx.attr_float("alpha", 1.0f);
  return {select(gt(x, Tensor::scalar(alpha, x.dtype())), x, zero_like(x))};
}

Tensor hard_sigmoid_of(const Tensor& x, double alpha, double beta) {
  return minimum(maximum(x * alpha + beta, zero_like(x)), Tensor::scalar(1, x.dtype()));
}

std::vector<Tensor> hard_sigmoid(const NodeContext& ctx) {
  ctx.expect_attributes({"alpha", "beta"});
  return {
      hard_sigmoid_of(ctx.input(0), ctx.attr_float("alpha", 0.2f), ctx.attr_float("beta", 0.5f))};
}

std::vector<Tensor> hard_swish(const NodeContext& ctx) {
  ctx.expect_attributes({});
  Tensor x = ctx.input(0);
  return {x * hard_sigmoid_of(x, 1.0 / 6.0, 0.5)};
}

// log(1 + e^x), written so large x do not overflow: max(x, 0) + log1p(e^-|x|).
Tensor softplus_of(const Tensor& x) { return maximum(x, zero_like(x)) + (-x.abs()).exp().log1p(); }

std::vector<Tensor> shrink(const NodeContext& ctx) {
  ctx.expect_attributes({"bias", "lambd"});
  Tensor x = ctx.input(0);
  double bias = ctx.attr_float("bias", 0.0f), lambd = ctx.attr_float("lambd", 0.5f);
  Tensor below = lt(x, Tensor::scalar(-lambd, x.dtype()));
  Tensor above = gt(x, Tensor::scalar(lambd, x.dtype()));
  return {select(below, x + bias, select(above, x - bias, zero_like(x)))};
}

std::vector<Tensor> prelu(const NodeContext& ctx) {
  ctx.expect_attributes({});
  auto v = broadcast_all({ctx.input(0), ctx.input(1)});
  return {select(lt(v[0], zero_like(v[0])), v[0] * v[1], v[0])};
}

std::vector<Tensor> gelu(const NodeContext& ctx) {
  ctx.expect_attributes({"approximate"});
  return {ctx.input(0).gelu(ctx.attr_string("approximate", "none") == "tanh")};
}

OpBuilder unary(Tensor (*f)(const Tensor&)) {
  return [f](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({});
    return {f(ctx.input(0))};
  };
}

Tensor one(const Tensor& x) { return Tensor::scalar(1, x.dtype()); }

}  // namespace

void register_activation_ops(OpTable& t) {
  t["Relu"] = unary([](const Tensor& x) { return x.relu(); });
  t["LeakyRelu"] = leaky_relu;
  t["Elu"] = elu;
  t["Celu"] = celu;
  t["Selu"] = selu;
  t["ThresholdedRelu"] = thresholded_relu;
  t["HardSigmoid"] = hard_sigmoid;
  t["HardSwish"] = hard_swish;
  t["Softplus"] = unary(softplus_of);
  t["Softsign"] = unary([](const Tensor& x) { return x / (x.abs() + 1.0); });
  t["Mish"] = unary([](const Tensor& x) { return x * softplus_of(x).tanh(); });
  t["Shrink"] = shrink;
  t["PRelu"] = prelu;
  t["Gelu"] = gelu;

  t["Tan"] = unary([](const Tensor& x) { return x.sin() / x.cos(); });
  t["Atan"] = unary([](const Tensor& x) { return atan2(x, one(x)); });
  t["Asin"] = unary([](const Tensor& x) { return atan2(x, (1.0 - x * x).sqrt()); });
  t["Acos"] = unary([](const Tensor& x) { return atan2((1.0 - x * x).sqrt(), x); });
  t["Sinh"] = unary([](const Tensor& x) { return (x.exp() - (-x).exp()) * 0.5; });
  t["Cosh"] = unary([](const Tensor& x) { return (x.exp() + (-x).exp()) * 0.5; });
  t["Asinh"] = unary([](const Tensor& x) { return (x + (x * x + 1.0).sqrt()).log(); });
  t["Acosh"] = unary([](const Tensor& x) { return (x + (x * x - 1.0).sqrt()).log(); });
  t["Atanh"] = unary([](const Tensor& x) { return ((1.0 + x) / (1.0 - x)).log() * 0.5; });
}

}  // namespace prism::conformance
