// compiler::legalize writes prism's numerics out as primitives: after it, every integer
// division's divisor is guarded, every float max / min and float-to-integer convert is wrapped
// in NaN and range checks, and the graph computes the values prism defines.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "prism/compiler/passes.h"
#include "tests/unit/platforms.h"

namespace prism {
namespace {

using ir::Op;
using testing::S;

int count(const ir::Graph& g, Op op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(Legalize, GuardsEveryIntegerDivisorAndWrapsFloatMaxAndConverts) {
  const Shape i = S({{"n", 4}}, DType::i32), f = S({{"n", 4}});
  TraceFn fn = [](std::span<const Tensor> in) {
    return std::vector<Tensor>{in[0] / in[1], rem(in[0], in[1]), maximum(in[2], in[3]),
                               in[2].convert(DType::i32), in[2] / in[3]};
  };
  const ir::Graph traced = trace(fn, std::vector<Shape>{i, i, f, f});
  const ir::Graph legal = compiler::legalize(traced);
  compiler::verify(legal);
  // Each integer div / rem divides by select(b == 0, 1, b); the float div is left as it is.
  for (ir::ValueId v = 0; v < legal.size(); ++v) {
    const ir::Node& n = legal.node(v);
    if ((n.op == Op::div || n.op == Op::rem) && n.shape.dtype() == DType::i32) {
      EXPECT_EQ(legal.node(n.inputs[1]).op, Op::select) << ir::print(legal, v);
    }
  }
  EXPECT_EQ(count(legal, Op::div), 2);
  EXPECT_GE(count(legal, Op::is_nan), 3);  // both sides of max, the convert's operand
  // A graph with nothing to write out comes back as it was.
  TraceFn plain = [](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] * in[1]}; };
  const ir::Graph mul = trace(plain, std::vector<Shape>{f, f});
  EXPECT_TRUE(compiler::legalize(mul) == mul);
}

// The values prism defines, on every platform (each compiles the legalized graph).
TEST(Legalize, TheRulesGivePrismsValuesOnEveryPlatform) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  auto ints = [](std::vector<int32_t> v) {
    return HostBuffer::from<int32_t>(S({{"n", static_cast<int64_t>(v.size())}}, DType::i32), v);
  };
  auto a = ints({7, -7, std::numeric_limits<int32_t>::min(), 0, 1, -1, 2, 3});
  auto b = ints({0, 2, -1, 0, -3, -3, -1, 2});
  auto div = run(
      [](Tensor x, Tensor y) {
        return std::vector<Tensor>{x / y, rem(x, y), pow(x, y)};
      },
      {a, b});
  EXPECT_EQ(div[0].to_f64(), (std::vector<double>{0, -3, -2147483648.0, 0, 0, 0, -2, 1}));
  EXPECT_EQ(div[1].to_f64(), (std::vector<double>{0, -1, 0, 0, 1, -1, 0, 1}));
  EXPECT_EQ(div[2].to_f64(), (std::vector<double>{1, 49, 0, 1, 1, -1, 0, 9}));

  auto x = testing::f32(S({{"n", 8}}), {nan, 1, -inf, inf, 3e9f, -3e9f, 2.7f, -2.7f});
  auto y = testing::f32(S({{"n", 8}}), {1, nan, 0, 0, 0, 0, 0, 0});
  auto out = testing::check_platforms(
      [](Tensor p, Tensor q) {
        return std::vector<Tensor>{maximum(p, q), minimum(p, q), p.convert(DType::i32),
                                   p.convert(DType::u8)};
      },
      {x, y});
  std::vector<double> mx = out[0].to_f64(), mn = out[1].to_f64();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], 0);
  EXPECT_EQ(mn[3], 0);
  EXPECT_EQ(out[2].to_f64(), (std::vector<double>{0, 1, -2147483648.0, 2147483647.0, 2147483647.0,
                                                  -2147483648.0, 2, -2}));
  EXPECT_EQ(out[3].to_f64(), (std::vector<double>{0, 1, 0, 255, 255, 0, 2, 0}));
}

}  // namespace
}  // namespace prism
