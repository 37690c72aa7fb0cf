// Every op of prism/ir/ops.def, in each dtype it is used in, through the cross-platform
// comparison (tests/unit/platforms.h): the CPU against the CPU with composites decomposed and
// against every other platform available (OpenCL on PoCL and the XLA CPU PJRT plugin in CI). An op
// added to the table without a case here fails EveryOpHasACase, naming it; a platform that computes
// an op differently fails that op's case, naming the platform and the dtype.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "prism/nn/nn.h"
#include "tests/unit/platforms.h"
#include "tests/unit/quant_blocks.h"

namespace prism {
namespace {

using ir::Op;
using testing::S;

struct OpCase {
  std::string name;  // op, then dtype
  Op op;             // must appear in the traced graph
  TraceFn fn;
  std::vector<HostBuffer> inputs;
  double tol = 1e-5;
};
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Deterministic values in [lo, hi], on a grid of quarters (so that ties and exact halves occur
// for comparisons and rounding), in `dtype`.
HostBuffer values(const Shape& shape, DType dtype, double lo, double hi, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  uint32_t x = seed * 2654435761u + 12345u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    const double u = (x >> 8) / double(1u << 24);
    f = static_cast<float>(std::round((lo + (hi - lo) * u) * 4) / 4);
  }
  return testing::f32(shape, v).convert(dtype);
}

template <typename F>
TraceFn fn1(F f) {
  return [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0])}; };
}
template <typename F>
TraceFn fn2(F f) {
  return [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0], in[1])}; };
}
template <typename F>
TraceFn fn3(F f) {
  return [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0], in[1], in[2])}; };
}

std::string dtype_name(DType t) { return std::string(name(t)); }

// A tolerance for float results in `dtype`: the CPU's f32 math and a device's differ in the
// last bits of transcendental functions; halves round once more.
double tol_for(DType t, double f32_tol = 1e-5) {
  return t == DType::bf16 ? 1.6e-2 : t == DType::f16 ? 2e-3 : f32_tol;
}

std::vector<OpCase> cases() {
  std::vector<OpCase> out;
  const Shape x = S({{"a", 3}, {"b", 5}});
  const std::vector<DType> floats{DType::f32, DType::f16, DType::bf16};

  // Elementwise, one operand: [lo, hi] keeps each in its domain.
  struct Unary {
    Op op;
    std::function<Tensor(Tensor)> f;
    double lo, hi;
    bool ints = false;  // also on i32
  };
  const std::vector<Unary> unary{
      {Op::neg, [](Tensor t) { return t.neg(); }, -3, 3, true},
      {Op::abs, [](Tensor t) { return t.abs(); }, -3, 3, true},
      {Op::exp, [](Tensor t) { return t.exp(); }, -2, 2},
      {Op::log, [](Tensor t) { return t.log(); }, 0.25, 4},
      {Op::log1p, [](Tensor t) { return t.log1p(); }, -0.5, 3},
      {Op::sqrt, [](Tensor t) { return t.sqrt(); }, 0, 4},
      {Op::rsqrt, [](Tensor t) { return t.rsqrt(); }, 0.25, 4},
      {Op::tanh, [](Tensor t) { return t.tanh(); }, -3, 3},
      {Op::logistic, [](Tensor t) { return t.logistic(); }, -4, 4},
      {Op::sin, [](Tensor t) { return t.sin(); }, -3, 3},
      {Op::cos, [](Tensor t) { return t.cos(); }, -3, 3},
      {Op::erf, [](Tensor t) { return t.erf(); }, -2, 2},
      {Op::floor, [](Tensor t) { return t.floor(); }, -3, 3},
      {Op::ceil, [](Tensor t) { return t.ceil(); }, -3, 3},
      {Op::round, [](Tensor t) { return t.round(); }, -3, 3},
      {Op::sign, [](Tensor t) { return t.sign(); }, -2, 2, true},
      {Op::is_nan, [](Tensor t) { return (t / t).is_nan(); }, -1, 1},  // 0/0 where t is 0
      {Op::logical_not, [](Tensor t) { return gt(t, Tensor::scalar(0, t.dtype())).logical_not(); },
       -2, 2, true},
  };
  for (const Unary& u : unary) {
    std::vector<DType> dtypes = floats;
    if (u.ints) dtypes.push_back(DType::i32);
    for (DType t : dtypes) {
      out.push_back({std::string(ir::op_name(u.op)) + "_" + dtype_name(t),
                     u.op,
                     fn1(u.f),
                     {values(x, t, u.lo, u.hi, static_cast<uint32_t>(u.op))},
                     tol_for(t)});
    }
  }
  for (DType from : {DType::f32, DType::bf16, DType::i32}) {
    for (DType to : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
      if (from == to) continue;
      out.push_back({"convert_" + dtype_name(from) + "_to_" + dtype_name(to),
                     Op::convert,
                     fn1([to](Tensor t) { return t.convert(to); }),
                     {values(x, from, 0, 200, 7)},
                     tol_for(to)});
    }
  }

  // Elementwise, two operands: b's range keeps div, rem and pow defined.
  struct Binary {
    Op op;
    std::function<Tensor(Tensor, Tensor)> f;
    double a_lo, a_hi, b_lo, b_hi;
    bool ints = false;
  };
  const std::vector<Binary> binary{
      {Op::add, [](Tensor a, Tensor b) { return a + b; }, -3, 3, -3, 3, true},
      {Op::sub, [](Tensor a, Tensor b) { return a - b; }, -3, 3, -3, 3, true},
      {Op::mul, [](Tensor a, Tensor b) { return a * b; }, -3, 3, -3, 3, true},
      {Op::div, [](Tensor a, Tensor b) { return a / b; }, -6, 6, 1, 3, true},
      {Op::pow, [](Tensor a, Tensor b) { return pow(a, b); }, 0.25, 3, -2, 2},
      {Op::max, [](Tensor a, Tensor b) { return maximum(a, b); }, -2, 2, -2, 2, true},
      {Op::min, [](Tensor a, Tensor b) { return minimum(a, b); }, -2, 2, -2, 2, true},
      {Op::rem, [](Tensor a, Tensor b) { return rem(a, b); }, -7, 7, 1, 3, true},
      {Op::atan2, [](Tensor a, Tensor b) { return atan2(a, b); }, -2, 2, -2, 2},
      {Op::eq, [](Tensor a, Tensor b) { return eq(a, b); }, -1, 1, -1, 1, true},
      {Op::ne, [](Tensor a, Tensor b) { return ne(a, b); }, -1, 1, -1, 1, true},
      {Op::lt, [](Tensor a, Tensor b) { return lt(a, b); }, -1, 1, -1, 1, true},
      {Op::le, [](Tensor a, Tensor b) { return le(a, b); }, -1, 1, -1, 1, true},
      {Op::gt, [](Tensor a, Tensor b) { return gt(a, b); }, -1, 1, -1, 1, true},
      {Op::ge, [](Tensor a, Tensor b) { return ge(a, b); }, -1, 1, -1, 1, true},
  };
  for (const Binary& b : binary) {
    std::vector<DType> dtypes = floats;
    if (b.ints) dtypes.push_back(DType::i32);
    for (DType t : dtypes) {
      const auto seed = static_cast<uint32_t>(b.op) * 3;
      out.push_back({std::string(ir::op_name(b.op)) + "_" + dtype_name(t),
                     b.op,
                     fn2(b.f),
                     {values(x, t, b.a_lo, b.a_hi, seed), values(x, t, b.b_lo, b.b_hi, seed + 1)},
                     tol_for(t)});
    }
  }
  // Logical ops on the bools that comparisons make.
  auto positive = [](Tensor t) { return gt(t, Tensor::scalar(0, t.dtype())); };
  for (auto [op, f] : std::vector<std::pair<Op, std::function<Tensor(Tensor, Tensor)>>>{
           {Op::logical_and, [](Tensor a, Tensor b) { return logical_and(a, b); }},
           {Op::logical_or, [](Tensor a, Tensor b) { return logical_or(a, b); }},
           {Op::logical_xor, [](Tensor a, Tensor b) { return logical_xor(a, b); }}}) {
    out.push_back({std::string(ir::op_name(op)),
                   op,
                   fn2([f, positive](Tensor a, Tensor b) { return f(positive(a), positive(b)); }),
                   {values(x, DType::f32, -1, 1, 11), values(x, DType::f32, -1, 1, 12)}});
  }
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    out.push_back({"select_" + dtype_name(t),
                   Op::select,
                   fn2([positive](Tensor a, Tensor b) { return select(positive(a), a, b); }),
                   {values(x, t, -2, 2, 21), values(x, t, -2, 2, 22)}});
  }

  // Leaves beside parameters and inputs, which every case has.
  out.push_back({"constant",
                 Op::constant,
                 fn1([](Tensor t) {
                   return t + Tensor::constant(values(S({{"b", 5}}), DType::f32, -1, 1, 31));
                 }),
                 {values(x, DType::f32, -1, 1, 32)}});
  out.push_back(
      {"iota",
       Op::iota,
       fn1([](Tensor t) {
         return t + Tensor::iota(S({{"a", 3}, {"b", 5}}, DType::i32), "b").convert(DType::f32);
       }),
       {values(x, DType::f32, -1, 1, 33)}});

  // Reductions and structural ops, in f32 and bf16 (and i32 where they move integers).
  for (DType t : {DType::f32, DType::bf16}) {
    const std::string d = fmt::format("_{}", name(t));
    const double tol = tol_for(t, 1e-5);
    HostBuffer a = values(x, t, -2, 2, 41);
    out.push_back(
        {"reduce_sum" + d, Op::reduce_sum, fn1([](Tensor v) { return v.sum({"b"}); }), {a}, tol});
    out.push_back(
        {"reduce_max" + d, Op::reduce_max, fn1([](Tensor v) { return v.max({"a"}); }), {a}, tol});
    out.push_back({"reduce_min" + d,
                   Op::reduce_min,
                   fn1([](Tensor v) {
                     return v.min({"a", "b"});
                   }),
                   {a},
                   tol});
    out.push_back({"reduce_prod" + d,
                   Op::reduce_prod,
                   fn1([](Tensor v) { return v.prod({"b"}); }),
                   {values(x, t, 0.5, 1.5, 42)},
                   tol});
    out.push_back({"argmax" + d, Op::argmax, fn1([](Tensor v) { return v.argmax("b"); }), {a}});
    out.push_back({"argmin" + d, Op::argmin, fn1([](Tensor v) { return v.argmin("a"); }), {a}});
    out.push_back({"dot" + d,
                   Op::dot,
                   fn2([](Tensor v, Tensor w) { return v.dot(w, {"b"}); }),
                   {a, values(S({{"b", 5}, {"c", 4}}), t, -2, 2, 43)},
                   tol_for(t, 1e-5)});
    out.push_back({"broadcast" + d,
                   Op::broadcast,
                   fn1([](Tensor v) {
                     return v.broadcast_to(S({{"c", 2}, {"a", 3}, {"b", 5}}, v.dtype()));
                   }),
                   {a}});
    out.push_back({"reshape" + d,
                   Op::reshape,
                   fn1([](Tensor v) {
                     return v.reshape(S({{"n", 15}}, v.dtype())) * 2.0;
                   }),
                   {a},
                   tol});
    out.push_back({"transpose" + d,
                   Op::transpose,
                   fn1([](Tensor v) {
                     return v.transpose({"b", "a"}) * 2.0;
                   }),
                   {a},
                   tol});
    out.push_back(
        {"slice" + d, Op::slice, fn1([](Tensor v) { return v.slice("b", 1, 2, 2); }), {a}});
    out.push_back({"pad" + d, Op::pad, fn1([](Tensor v) { return v.pad("b", 2, 1, -1); }), {a}});
    out.push_back({"pad_edge" + d,
                   Op::pad,
                   fn1([](Tensor v) { return v.pad("b", 2, 3, 0, ir::PadMode::edge); }),
                   {a}});
    out.push_back({"pad_reflect" + d,
                   Op::pad,
                   fn1([](Tensor v) { return v.pad("b", 2, 1, 0, ir::PadMode::reflect); }),
                   {a}});
    out.push_back(
        {"cumsum" + d, Op::cumsum, fn1([](Tensor v) { return v.cumsum("b", true); }), {a}, tol});
    out.push_back({"concatenate" + d,
                   Op::concatenate,
                   fn2([](Tensor v, Tensor w) {
                     return concat({v, w, v}, "b");
                   }),
                   {a, values(S({{"a", 3}, {"b", 2}}), t, -2, 2, 44)}});
    out.push_back({"argsort" + d,
                   Op::argsort,
                   fn1([](Tensor v) { return v.top_k("b", 3).second; }),
                   {values(x, t, -2, 2, 45)}});
  }
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    const std::string d = fmt::format("_{}", name(t));
    HostBuffer a = values(x, t, -9, 9, 51);
    HostBuffer start = testing::i32(Shape::scalar(DType::i32), {2});
    out.push_back({"dynamic_slice" + d,
                   Op::dynamic_slice,
                   fn2([](Tensor v, Tensor s) { return v.dynamic_slice("b", s, 3); }),
                   {a, start}});
    out.push_back({"dynamic_update_slice" + d,
                   Op::dynamic_update_slice,
                   fn3([](Tensor v, Tensor u, Tensor s) {
                     return v.dynamic_update_slice(u, {{"b", s}});
                   }),
                   {a, values(S({{"a", 3}, {"b", 2}}), t, -9, 9, 52), start}});
    HostBuffer idx =
        testing::i32(S({{"a", 3}, {"b", 5}}), {0, 4, 2, 1, 1, 3, 0, 0, 4, 2, 2, 1, 4, 3, 0});
    out.push_back({"gather" + d,
                   Op::gather,
                   fn2([](Tensor v, Tensor i) { return v.gather("a", i); }),
                   {a, testing::i32(S({{"s", 4}}), {2, 0, 1, 2})}});
    out.push_back({"take_along" + d,
                   Op::take_along,
                   fn2([](Tensor v, Tensor i) { return v.take_along("b", i); }),
                   {a, idx}});
    HostBuffer unique = testing::i32(S({{"a", 3}, {"b", 2}}), {4, 0, 1, 3, 2, 0});
    out.push_back({"scatter" + d,
                   Op::scatter,
                   fn3([](Tensor v, Tensor i, Tensor u) {
                     return v.scatter("b", i, u, ir::ScatterReduce::add);
                   }),
                   {a, unique, values(S({{"a", 3}, {"b", 2}}), t, -9, 9, 53)}});
  }
  out.push_back(
      {"convolution_f32",
       Op::convolution,
       fn2([](Tensor v, Tensor k) {
         return conv(v, k, {.spatial = {"h", "w"}, .pad_low = {1, 0}, .pad_high = {1, 1}});
       }),
       {values(S({{"b", 1}, {"c", 2}, {"h", 4}, {"w", 3}}), DType::f32, -2, 2, 61),
        values(S({{"o", 3}, {"c", 2}, {"h", 2}, {"w", 2}}), DType::f32, -2, 2, 62)}});

  // Composites: the CPU runs them as one kernel and also decomposed.
  for (DType t : {DType::f32, DType::bf16}) {
    const std::string d = fmt::format("_{}", name(t));
    const double tol = tol_for(t, 2e-5);
    HostBuffer a = values(x, t, -2, 2, 71);
    out.push_back(
        {"softmax" + d, Op::softmax, fn1([](Tensor v) { return v.softmax("b"); }), {a}, tol});
    out.push_back({"log_softmax" + d,
                   Op::log_softmax,
                   fn1([](Tensor v) { return v.log_softmax("b"); }),
                   {a},
                   tol});
    out.push_back({"rms_norm" + d,
                   Op::rms_norm,
                   fn1([](Tensor v) { return v.rms_norm({"b"}, 1e-5); }),
                   {a},
                   tol});
    out.push_back({"layer_norm" + d,
                   Op::layer_norm,
                   fn1([](Tensor v) { return v.layer_norm({"b"}, 1e-5); }),
                   {a},
                   tol});
    const Shape qs = S({{"h", 2}, {"q", 3}, {"hd", 8}});
    out.push_back({"rope" + d,
                   Op::rope,
                   fn1([](Tensor v) {
                     auto [c, s] = nn::rope_tables(Tensor::iota(S({{"q", 3}}, DType::i32), "q"),
                                                   nn::rope_inv_freq(8, 10000.0));
                     return nn::rope(v, c, s);
                   }),
                   {values(qs, t, -2, 2, 72)},
                   tol});
    out.push_back(
        {"attention" + d,
         Op::attention,
         fn3([](Tensor q, Tensor k, Tensor v) { return nn::attention(q, k, v, {.causal = true}); }),
         {values(qs, t, -1, 1, 73), values(S({{"h", 1}, {"k", 5}, {"hd", 8}}), t, -1, 1, 74),
          values(S({{"h", 1}, {"k", 5}, {"hd", 8}}), t, -1, 1, 75)},
         tol});
  }
  {
    const Shape qk = S({{"h", 1}, {"s", 4}, {"dk", 4}}), vs = S({{"h", 2}, {"s", 4}, {"dv", 3}});
    const Shape gs = S({{"h", 2}, {"s", 4}}), st = S({{"h", 2}, {"dk", 4}, {"dv", 3}});
    out.push_back({"gated_delta_rule_f32",
                   Op::gated_delta_rule,
                   [](std::span<const Tensor> in) {
                     auto r = nn::gated_delta_rule(in[0], in[1], in[2], in[3], in[4], in[5],
                                                   {.chunk = 2});
                     return std::vector<Tensor>{r.out, r.state};
                   },
                   {values(qk, DType::f32, -1, 1, 81), values(qk, DType::f32, -0.5, 0.5, 82),
                    values(vs, DType::f32, -1, 1, 83), values(gs, DType::f32, -1, 0, 84),
                    values(gs, DType::f32, 0, 1, 85), values(st, DType::f32, -1, 1, 86)},
                   1e-4});
    out.push_back({"short_conv_f32",
                   Op::short_conv,
                   [](std::span<const Tensor> in) {
                     auto r = nn::short_conv(in[0], in[1], in[2]);
                     return std::vector<Tensor>{r.y, r.state};
                   },
                   {values(S({{"s", 5}, {"d", 3}}), DType::f32, -1, 1, 91),
                    values(S({{"s", 2}, {"d", 3}}), DType::f32, -1, 1, 92),
                    values(S({{"d", 3}, {"tap", 3}}), DType::f32, -1, 1, 93)}});
  }
  // Every block format, alone and under a product (which the CPU computes from the blocks).
  for (quant::GgmlType t : {quant::GgmlType::Q4_0, quant::GgmlType::Q4_1, quant::GgmlType::Q5_0,
                            quant::GgmlType::Q5_1, quant::GgmlType::Q8_0, quant::GgmlType::Q4_K,
                            quant::GgmlType::Q5_K, quant::GgmlType::Q6_K}) {
    const std::string f(quant::name(t));
    const int64_t blocks = quant::info(t).block_elements == 32 ? 2 : 1;
    out.push_back({"dequantize_" + f,
                   Op::dequantize,
                   fn1([t](Tensor w) { return w.dequantize(t, DType::f32); }),
                   {testing::random_blocks(t, 3, blocks, 101)}});
    const int64_t k = blocks * quant::info(t).block_elements;
    out.push_back({"dequantize_dot_" + f,
                   Op::dequantize,
                   fn2([t](Tensor x, Tensor w) { return x.dot(w.dequantize(t, DType::f32), "b"); }),
                   {values(S({{"s", 2}, {"b", k}}), DType::f32, -1, 1, 102),
                    testing::random_blocks(t, 3, blocks, 103)},
                   1e-4});
  }
  return out;
}

// Parameters and inputs are in every case. The collectives run between the devices of a mesh,
// which only the partitioner builds: sharding_test.cpp checks them on each platform that
// offers a mesh.
const std::set<Op> kInEveryCase{Op::parameter,  Op::input,          Op::all_reduce,
                                Op::all_gather, Op::reduce_scatter, Op::mesh_coordinate};

TEST(BackendOps, EveryOpHasACase) {
  std::set<Op> covered = kInEveryCase;
  for (const OpCase& c : cases()) covered.insert(c.op);
  std::string missing;
  for (int i = 0; i < ir::kOpCount; ++i) {
    if (!covered.contains(static_cast<Op>(i))) {
      missing +=
          std::string(missing.empty() ? "" : ", ") + std::string(ir::op_name(static_cast<Op>(i)));
    }
  }
  EXPECT_EQ(missing, "") << "ops of ops.def without a case in backend_ops_test.cpp";
}

class BackendOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(BackendOp, EveryPlatformComputesWhatTheCpuDoes) {
  const OpCase& c = GetParam();
  // The other platforms multiply dequantized weights in floats, as the CPU does with f32
  // activations (it may round them to 8 bits otherwise).
  const testing::QuantActivations f32_activations("f32");
  std::vector<Shape> shapes;
  for (const HostBuffer& h : c.inputs) shapes.push_back(h.shape());
  const ir::Graph traced = trace(c.fn, shapes);
  bool present = false;
  for (const ir::Node& n : traced.nodes()) present = present || n.op == c.op;
  ASSERT_TRUE(present) << c.name << " does not trace to " << ir::op_name(c.op);
  testing::check_platforms(c.fn, c.inputs, c.tol);
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOp, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace prism
