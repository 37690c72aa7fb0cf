// Elementwise ONNX ops: unary math, arithmetic with numpy broadcasting, comparisons, logic,
// Where, Cast, Clip, Mod, Pow and the variadic Sum/Mean/Max/Min.
#include <limits>

#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

using UnaryFn = Tensor (*)(const Tensor&);
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

OpBuilder unary(UnaryFn f) {
  return [f](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({});
    return {f(ctx.input(0))};
  };
}

OpBuilder binary(BinaryFn f) {
  return [f](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({});
    auto v = broadcast_all({ctx.input(0), ctx.input(1)});
    return {f(v[0], v[1])};
  };
}

// Folds all inputs with f after broadcasting them together (Sum, Max, Min).
OpBuilder variadic(BinaryFn f) {
  return [f](const NodeContext& ctx) -> std::vector<Tensor> {
    ctx.expect_attributes({});
    std::vector<Tensor> in;
    for (int i = 0; i < ctx.num_inputs(); ++i) in.push_back(ctx.input(i));
    in = broadcast_all(std::move(in));
    Tensor acc = in[0];
    for (size_t i = 1; i < in.size(); ++i) acc = f(acc, in[i]);
    return {acc};
  };
}

Tensor add(const Tensor& a, const Tensor& b) { return a + b; }
Tensor sub(const Tensor& a, const Tensor& b) { return a - b; }
Tensor mul(const Tensor& a, const Tensor& b) { return a * b; }
Tensor div(const Tensor& a, const Tensor& b) { return a / b; }

// Python's modulo (the result takes the divisor's sign) from C's fmod: where the remainder is
// non-zero and its sign differs from the divisor's, add the divisor once.
Tensor python_mod(const Tensor& a, const Tensor& b) {
  Tensor r = rem(a, b);
  if (!info(a.dtype()).is_signed) return r;
  Tensor zero = Tensor::scalar(0, a.dtype());
  Tensor wrong_sign = logical_and(ne(r, zero), logical_xor(lt(r, zero), lt(b, zero)));
  return select(wrong_sign, r + b, r);
}

std::vector<Tensor> mod(const NodeContext& ctx) {
  ctx.expect_attributes({"fmod"});
  auto v = broadcast_all({ctx.input(0), ctx.input(1)});
  bool c_fmod = ctx.attr_int("fmod", 0) == 1;
  return {c_fmod ? rem(v[0], v[1]) : python_mod(v[0], v[1])};
}

// Pow keeps the base's type. The exponent is converted to it, except that an integer base
// with a float exponent is raised in f64 and truncated back (as numpy's cast does).
std::vector<Tensor> power(const NodeContext& ctx) {
  ctx.expect_attributes({});
  auto v = broadcast_all({ctx.input(0), ctx.input(1)});
  DType base = v[0].dtype();
  if (is_float(base) || !is_float(v[1].dtype())) return {pow(v[0], v[1].convert(base))};
  Tensor r = pow(v[0].convert(DType::f64), v[1].convert(DType::f64));
  return {r.convert(base)};
}

std::vector<Tensor> mean(const NodeContext& ctx) {
  std::vector<Tensor> sum = variadic(add)(ctx);
  return {sum[0] / static_cast<double>(ctx.num_inputs())};
}

std::vector<Tensor> where(const NodeContext& ctx) {
  ctx.expect_attributes({});
  auto v = broadcast_all({ctx.input(0), ctx.input(1), ctx.input(2)});
  return {select(v[0], v[1], v[2])};
}

std::vector<Tensor> cast(const NodeContext& ctx) {
  ctx.expect_attributes({"to"});
  DType to = to_dtype(static_cast<onnx::ElemType>(ctx.attr_int("to", 0)));
  return {ctx.input(0).convert(to)};
}

std::vector<Tensor> cast_like(const NodeContext& ctx) {
  ctx.expect_attributes({});
  return {ctx.input(0).convert(ctx.dtype(1))};
}

// Clip: bounds are attributes before opset 11 and optional scalar inputs after.
std::vector<Tensor> clip(const NodeContext& ctx) {
  ctx.expect_attributes({"min", "max"});
  Tensor x = ctx.input(0);
  std::optional<Tensor> lo, hi;
  if (ctx.opset() < 11) {
    if (ctx.has_attr("min")) lo = Tensor::scalar(ctx.attr_float("min", 0), x.dtype());
    if (ctx.has_attr("max")) hi = Tensor::scalar(ctx.attr_float("max", 0), x.dtype());
  } else {
    if (ctx.has_input(1)) lo = positional(ctx.input(1)).reshape(Shape::scalar(x.dtype()));
    if (ctx.has_input(2)) hi = positional(ctx.input(2)).reshape(Shape::scalar(x.dtype()));
  }
  if (lo) x = maximum(x, *lo);
  if (hi) x = minimum(x, *hi);
  return {x};
}

std::vector<Tensor> is_inf(const NodeContext& ctx) {
  ctx.expect_attributes({"detect_negative", "detect_positive"});
  Tensor x = ctx.input(0);
  double inf = std::numeric_limits<double>::infinity();
  Tensor pos = eq(x, Tensor::scalar(inf, x.dtype()));
  Tensor neg = eq(x, Tensor::scalar(-inf, x.dtype()));
  bool want_pos = ctx.attr_int("detect_positive", 1) != 0;
  bool want_neg = ctx.attr_int("detect_negative", 1) != 0;
  if (want_pos && want_neg) return {logical_or(pos, neg)};
  if (want_pos) return {pos};
  if (want_neg) return {neg};
  return {logical_and(pos, neg)};  // all false
}

}  // namespace

void register_elementwise_ops(OpTable& t) {
  t["Abs"] = unary([](const Tensor& x) { return x.abs(); });
  t["Neg"] = unary([](const Tensor& x) { return x.neg(); });
  t["Exp"] = unary([](const Tensor& x) { return x.exp(); });
  t["Log"] = unary([](const Tensor& x) { return x.log(); });
  t["Sqrt"] = unary([](const Tensor& x) { return x.sqrt(); });
  t["Tanh"] = unary([](const Tensor& x) { return x.tanh(); });
  t["Sigmoid"] = unary([](const Tensor& x) { return x.logistic(); });
  t["Sin"] = unary([](const Tensor& x) { return x.sin(); });
  t["Cos"] = unary([](const Tensor& x) { return x.cos(); });
  t["Erf"] = unary([](const Tensor& x) { return x.erf(); });
  t["Floor"] = unary([](const Tensor& x) { return x.floor(); });
  t["Ceil"] = unary([](const Tensor& x) { return x.ceil(); });
  t["Round"] = unary([](const Tensor& x) { return x.round(); });
  t["Sign"] = unary([](const Tensor& x) { return x.sign(); });
  t["Reciprocal"] = unary([](const Tensor& x) { return 1.0 / x; });
  t["Not"] = unary([](const Tensor& x) { return x.logical_not(); });
  t["IsNaN"] = unary([](const Tensor& x) { return x.is_nan(); });
  t["Identity"] = unary([](const Tensor& x) { return x; });
  t["IsInf"] = is_inf;

  t["Add"] = binary(add);
  t["Sub"] = binary(sub);
  t["Mul"] = binary(mul);
  t["Div"] = binary(div);
  t["Pow"] = power;
  t["Mod"] = mod;
  t["And"] = binary(logical_and);
  t["Or"] = binary(logical_or);
  t["Xor"] = binary(logical_xor);
  t["Equal"] = binary(eq);
  t["Less"] = binary(lt);
  t["LessOrEqual"] = binary(le);
  t["Greater"] = binary(gt);
  t["GreaterOrEqual"] = binary(ge);
  t["Where"] = where;

  t["Sum"] = variadic(add);
  t["Max"] = variadic(maximum);
  t["Min"] = variadic(minimum);
  t["Mean"] = mean;

  t["Cast"] = cast;
  t["CastLike"] = cast_like;
  t["Clip"] = clip;
}

}  // namespace prism::conformance
