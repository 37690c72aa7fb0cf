// The kernel IR's lowering, independent of any dialect. What the kernels compute is checked on
// every platform by the op harness (backend_ops_test.cpp); these tests pin the structure that
// the renderers rely on.
#include "prism/compiler/kernel_ir.h"

#include <gtest/gtest.h>

#include "prism/compiler/kernel_c.h"
#include "tests/unit/test_util.h"

namespace prism::kernel {
namespace {

using ir::Op;
using ir::ValueId;

struct Builder {
  ir::Graph g;
  int inputs = 0;
  ValueId input(const Shape& s) { return g.add({Op::input, s, {}, ir::InputAttrs{inputs++}}); }
  ValueId add(Op op, const Shape& s, std::vector<ValueId> in, ir::Attrs attrs = {}) {
    ValueId v = g.add({op, s, std::move(in), std::move(attrs)});
    return v;
  }
  Step lower(ValueId id) {
    g.outputs() = {id};
    compiler::FusionPlan plan = compiler::fuse_elementwise(g);
    std::optional<Step> step = kernel::lower(g, plan, id, "k");
    EXPECT_TRUE(step.has_value());
    return step ? *step : Step{};
  }
};

Shape f32(std::initializer_list<Dim> dims) { return Shape(DType::f32, dims); }

std::vector<const Expr*> loads(const Kernel& k) {
  std::vector<const Expr*> out;
  std::vector<bool> used = k.used();
  for (size_t e = 0; e < k.exprs.size(); ++e) {
    if (used[e] && k.exprs[e].kind == ExprKind::load) out.push_back(&k.exprs[e]);
  }
  return out;
}

TEST(KernelIr, ExpressionsComeAfterTheirArguments) {
  Builder b;
  ValueId x = b.input(f32({{"a", 2}, {"b", 3}}));
  ValueId row = b.input(f32({{"b", 3}}));
  ValueId bc = b.add(Op::broadcast, f32({{"a", 2}, {"b", 3}}), {row}, ir::AxesAttrs{{1}});
  ValueId e = b.add(Op::exp, f32({{"a", 2}, {"b", 3}}), {x});
  Step step = b.lower(b.add(Op::add, f32({{"a", 2}, {"b", 3}}), {e, bc}));
  ASSERT_EQ(step.kernels.size(), 1u);
  EXPECT_EQ(step.reads, (std::vector<ValueId>{x, row}));
  const Kernel& k = step.kernels[0];
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    for (ExprId a : k.exprs[i].args) EXPECT_LT(a, static_cast<ExprId>(i)) << print(k);
  }
  // The broadcast row is read through the column coordinate, x at the work item's own index.
  ASSERT_EQ(loads(k).size(), 2u);
  EXPECT_EQ(k.exprs[loads(k)[0]->args[0]].kind, ExprKind::flat) << print(k);
  EXPECT_EQ(k.exprs[loads(k)[1]->args[0]].kind, ExprKind::coord) << print(k);
}

TEST(KernelIr, EveryPartOfAConcatenationIsReadOnlyInItsRange) {
  Builder b;
  ValueId x = b.input(f32({{"a", 2}, {"b", 3}}));
  ValueId y = b.input(f32({{"a", 4}, {"b", 3}}));
  Step step = b.lower(b.add(Op::concatenate, f32({{"a", 6}, {"b", 3}}), {x, y}, ir::AxisAttrs{0}));
  const Kernel& k = step.kernels.at(0);
  ASSERT_EQ(loads(k).size(), 2u);
  for (const Expr* load : loads(k)) EXPECT_EQ(load->args.size(), 2u) << print(k);  // masked
}

TEST(KernelIr, AnUpdateCopiesItsOperandOnlyWhenNotInPlace) {
  Builder b;
  ValueId x = b.input(f32({{"a", 4}, {"b", 3}}));
  ValueId u = b.input(f32({{"a", 2}, {"b", 3}}));
  ValueId i = b.input(Shape::scalar(DType::i32));
  ValueId j = b.input(Shape::scalar(DType::i32));
  Step step = b.lower(b.add(Op::dynamic_update_slice, f32({{"a", 4}, {"b", 3}}), {x, u, i, j}));
  ASSERT_EQ(step.kernels.size(), 2u);
  EXPECT_EQ(step.kernels[0].when, InPlace::when_not_in_place);
  EXPECT_EQ(step.kernels[0].items(), 12);
  const Kernel& window = step.kernels[1];
  EXPECT_EQ(window.when, InPlace::always);
  EXPECT_EQ(window.items(), 6);  // one work item per element of the update
  EXPECT_NE(window.at, kNone) << print(window);
}

TEST(KernelIr, AReductionReadsInItsLoopAndAccumulatesByOneRule) {
  Builder b;
  ValueId x = b.input(Shape(DType::bf16, {{"a", 2}, {"b", 5}}));
  Step step =
      b.lower(b.add(Op::reduce_sum, Shape(DType::bf16, {{"a", 2}}), {x}, ir::AxesAttrs{{1}}));
  const Kernel& k = step.kernels.at(0);
  ASSERT_EQ(k.loops.size(), 1u);
  EXPECT_EQ(k.loops[0].extents, (std::vector<int64_t>{5}));
  EXPECT_EQ(k.loops[0].combine, Combine::sum);
  EXPECT_EQ(k.loops[0].accumulator, Scalar::f32);  // halves sum in f32, compensated
  EXPECT_EQ(k.items(), 2);
  EXPECT_EQ(k.region()[k.loops[0].operand], 1) << print(k);  // read in the loop
  EXPECT_EQ(k.exprs[k.value].kind, ExprKind::result) << print(k);
  EXPECT_EQ(k.region()[k.value], 2) << print(k);  // stored after it
}

TEST(KernelIr, FloatOnlyOpsOnIntegersNameTheDtype) {
  Builder b;
  ValueId x = b.input(Shape(DType::i16, {{"a", 3}}));
  ValueId e = b.add(Op::exp, Shape(DType::i16, {{"a", 3}}), {x});
  b.g.outputs() = {e};
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  std::string message = testing::error_of([&] { kernel::lower(b.g, plan, e, "k"); });
  EXPECT_NE(message.find("exp is not defined for i16"), std::string::npos) << message;
}

TEST(KernelIr, ACumulativeSumStoresOnEveryStep) {
  Builder b;
  ValueId x = b.input(f32({{"a", 2}, {"b", 7}}));
  Step step =
      b.lower(b.add(Op::cumsum, f32({{"a", 2}, {"b", 7}}), {x}, ir::AxisAttrs{1, true, true}));
  const Kernel& k = step.kernels.at(0);
  ASSERT_EQ(k.loops.size(), 1u);
  EXPECT_TRUE(k.loops[0].writes);
  EXPECT_TRUE(k.loops[0].exclusive);
  EXPECT_EQ(k.items(), 2);  // one work item per lane
  EXPECT_EQ(k.region()[k.at], 1) << print(k);
}

TEST(KernelIr, ASortRanksEachElementAndStoresTheFirstK) {
  Builder b;
  ValueId x = b.input(f32({{"a", 3}, {"b", 6}}));
  Step step = b.lower(
      b.add(Op::argsort, Shape(DType::i32, {{"a", 3}, {"b", 2}}), {x}, ir::ArgsortAttrs{1, 2}));
  const Kernel& k = step.kernels.at(0);
  EXPECT_EQ(k.items(), 18);
  ASSERT_NE(k.mask, kNone);
  EXPECT_EQ(k.region()[k.mask], 2) << print(k);  // the rank, after the count
  EXPECT_EQ(k.region()[k.at], 2) << print(k);
}

TEST(KernelIr, SoftmaxIsOneGroupOfThreadsPerLane) {
  Builder b;
  ValueId x = b.input(f32({{"a", 3}, {"b", 100}}));
  Step step = b.lower(b.add(Op::softmax, f32({{"a", 3}, {"b", 100}}), {x}, ir::AxisAttrs{1}));
  const Kernel& k = step.kernels.at(0);
  EXPECT_TRUE(k.cooperative);
  EXPECT_EQ(k.items(), 3);
  ASSERT_EQ(k.loops.size(), 3u);  // max, sum of exponentials, write
  EXPECT_EQ(k.loops[0].combine, Combine::max);
  EXPECT_EQ(k.loops[1].combine, Combine::sum);
  EXPECT_TRUE(k.loops[2].writes);
}

TEST(KernelIr, AttentionIsLeftToTheBackends) {
  Builder b;
  Shape s = f32({{"b", 1}, {"h", 2}, {"s", 3}, {"d", 4}});
  ValueId q = b.input(s), k = b.input(s), v = b.input(s);
  ValueId o = b.add(Op::attention, s, {q, k, v}, ir::AttentionAttrs{});
  b.g.outputs() = {o};
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  EXPECT_FALSE(kernel::lower(b.g, plan, o, "k").has_value());
  EXPECT_FALSE(kernel::lowers(b.g.node(o)));
}

TEST(KernelIr, EveryOpSaysHowItRuns) {
  // lowering_of has no default case, so an op added to ops.def alone does not build; here the
  // answers agree with the op's kind.
  for (int i = 0; i < ir::kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const ir::OpKind kind = ir::op_kind(op);
    switch (lowering_of(op)) {
      case Lowering::leaf:
        EXPECT_EQ(kind, ir::OpKind::leaf) << ir::op_name(op);
        break;
      case Lowering::backend:
      case Lowering::decomposed:
        EXPECT_EQ(kind, ir::OpKind::composite) << ir::op_name(op);
        break;
      case Lowering::collective:
        EXPECT_EQ(ir::attrs_name(ir::op_attrs_index(op)), "CollectiveAttrs") << ir::op_name(op);
        break;
      case Lowering::kernel_ir:  // iota is the one leaf computed, not stored
        if (kind == ir::OpKind::leaf) {
          EXPECT_EQ(op, Op::iota) << ir::op_name(op);
        }
        break;
    }
  }
}

// A dequantize reads its block's bytes and its f16 scale through a view of the same operand.
TEST(KernelIr, DequantizeReadsBytesAndAnF16ViewOfThem) {
  Builder b;
  ValueId w = b.input(Shape(DType::u8, {{"n", 3}, {"b", 68}}));
  Step step = b.lower(b.add(Op::dequantize, f32({{"n", 3}, {"k", 64}}), {w},
                            ir::DequantizeAttrs{quant::GgmlType::Q8_0}));
  EXPECT_EQ(step.reads, std::vector<ValueId>{w});
  const Kernel& k = step.kernels.at(0);
  EXPECT_EQ(k.items(), 3 * 64);
  std::vector<const Expr*> in = loads(k);
  ASSERT_EQ(in.size(), 2u) << print(k);
  int views = 0;
  for (const Expr* l : in) views += l->view && l->dtype == DType::f16;
  EXPECT_EQ(views, 1) << print(k);
  EXPECT_NE(print(k).find("load in0 as f16"), std::string::npos) << print(k);
}

// Products of a few rows by a dequantize read the blocks themselves (the dequantize is folded:
// no step, no memory); a product of more rows reads a dequantized copy, made by its own step.
TEST(KernelIr, FewRowProductsReadTheirWeightsFromTheBlocks) {
  for (int64_t rows : {1, 16, 17}) {
    Builder b;
    ValueId x = b.input(f32({{"s", rows}, {"k", 64}}));
    ValueId w = b.input(Shape(DType::u8, {{"n", 3}, {"b", 36}}));
    ValueId dq = b.add(Op::dequantize, f32({{"n", 3}, {"k", 64}}), {w},
                       ir::DequantizeAttrs{quant::GgmlType::Q4_0});
    ValueId y =
        b.add(Op::dot, f32({{"s", rows}, {"n", 3}}), {x, dq}, ir::DotAttrs{{}, {}, {1}, {1}});
    b.g.outputs() = {y};
    compiler::FusionPlan plan = plan_steps(b.g);
    const bool folded = rows <= kFoldedRows;
    EXPECT_EQ(plan.folded[dq], folded) << rows;
    EXPECT_EQ(reads_folded(plan, b.g.node(y)), folded);
    std::optional<Step> step = kernel::lower(b.g, plan, y, "k");
    ASSERT_TRUE(step);
    EXPECT_EQ(step->reads, (std::vector<ValueId>{x, folded ? w : dq})) << rows;
    const Kernel& k = step->kernels.at(0);
    EXPECT_TRUE(k.cooperative);
    int views = 0;
    for (const Expr* l : loads(k)) views += l->view;
    EXPECT_EQ(views, folded ? 1 : 0) << print(k);
  }
}

TEST(KernelC, LiteralsReadBackExactly) {
  struct Plain final : CDialect {
    std::string type(Scalar s) const override { return s == Scalar::f64 ? "double" : "float"; }
    std::string u32() const override { return "unsigned"; }
    std::string integer(int64_t v) const override { return std::to_string(v); }
    std::string infinity(Scalar) const override { return "INF"; }
    std::string nan(Scalar) const override { return "NAN"; }
    std::string view(DType, int) const override { return ""; }
    std::string load(DType, const std::string&, const std::string&) const override { return ""; }
    std::string store(DType, Scalar, const std::string&) const override { return ""; }
    std::string round(DType, Scalar, const std::string&) const override { return ""; }
    std::string math(const std::string& fn, Scalar) const override { return fn; }
    std::string is_nan(const std::string&) const override { return ""; }
    std::string is_finite(const std::string&) const override { return ""; }
    std::string ipow() const override { return ""; }
    std::string signature(const std::string&, DType, const std::vector<DType>&) const override {
      return "";
    }
    std::string items(int64_t, const std::string&) const override { return ""; }
    std::string group_items(int64_t, const std::vector<Scalar>&,
                            const std::string&) const override {
      return "";
    }
    std::string group_combine(const std::string&, Scalar, const std::string&,
                              const std::string&) const override {
      return "";
    }
  } d;
  EXPECT_EQ(literal(1, Scalar::f32, d), "1.0f");
  EXPECT_EQ(literal(0.1, Scalar::f64, d), "0.1");
  EXPECT_EQ(literal(1e20, Scalar::f64, d), "1e+20");
  EXPECT_EQ(literal(-INFINITY, Scalar::f32, d), "(-INF)");
  EXPECT_EQ(literal(NAN, Scalar::f64, d), "NAN");
  EXPECT_EQ(literal(-3, Scalar::i64, d), "-3");
}

}  // namespace
}  // namespace prism::kernel
