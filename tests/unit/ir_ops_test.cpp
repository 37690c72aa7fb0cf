// The op table (prism/ir/ops.def) is what verify, printing and hashing read: every op's arity
// and attributes come from it, and a node that departs from them is one clear error.
#include <gtest/gtest.h>

#include "prism/compiler/passes.h"
#include "prism/ir/graph.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;
using testing::error_of;
using testing::S;

// A graph with one input {d=4} and the node `n` on it (as an output).
std::string verify_error(Node n) {
  Graph g;
  g.add(Node{Op::input, S({{"d", 4}}), {}, ir::InputAttrs{0}});
  g.outputs().push_back(g.add(std::move(n)));
  return error_of([&] { compiler::verify(g); });
}

TEST(IrOps, EveryOpHasANameAnArityAndAttributesInTheTable) {
  for (int i = 0; i < ir::kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    EXPECT_FALSE(ir::op_name(op).empty()) << i;
    EXPECT_NE(ir::attrs_name(ir::op_attrs_index(op)), "?") << ir::op_name(op);
    if (ir::is_elementwise(op) || ir::op_kind(op) == ir::OpKind::leaf) {
      const int operands = ir::op_kind(op) == ir::OpKind::leaf     ? 0
                           : ir::op_kind(op) == ir::OpKind::unary  ? 1
                           : ir::op_kind(op) == ir::OpKind::binary ? 2
                                                                   : 3;
      const ir::Arity want[] = {ir::Arity::n0, ir::Arity::n1, ir::Arity::n2, ir::Arity::n3};
      EXPECT_EQ(ir::op_arity(op), want[operands]) << ir::op_name(op);
    }
  }
  EXPECT_EQ(ir::attrs_name(ir::op_attrs_index(Op::softmax)), "AxisAttrs");
  EXPECT_EQ(ir::attrs_name(ir::op_attrs_index(Op::exp)), "NoAttrs");
}

TEST(IrOps, VerifyNamesWrongAttributesAndOperandCounts) {
  EXPECT_EQ(verify_error(Node{Op::softmax, S({{"d", 4}}), {0}, ir::NormAttrs{{0}, 1e-6}}),
            "verify: %1 = f32{d=4} softmax(%0) axes=[0] eps=1e-06 carries NormAttrs, softmax "
            "takes AxisAttrs");
  EXPECT_EQ(verify_error(Node{Op::reduce_sum, S({}), {0}, {}}),
            "verify: %1 = f32{} reduce_sum(%0) carries NoAttrs, reduce_sum takes AxesAttrs");
  EXPECT_EQ(verify_error(Node{Op::add, S({{"d", 4}}), {0}, {}}),
            "verify: %1 = f32{d=4} add(%0) has 1 operands, expected 2");
  EXPECT_EQ(verify_error(Node{Op::concatenate, S({{"d", 4}}), {}, ir::AxisAttrs{0}}),
            "verify: %1 = f32{d=4} concatenate() axis=0 has 0 operands, expected one or more");
  // dynamic_slice: the operand, then one start per axis of the result.
  EXPECT_EQ(verify_error(Node{Op::dynamic_slice, S({{"d", 2}}), {0}, {}}),
            "verify: %1 = f32{d=2} dynamic_slice(%0) has 1 operands, expected 2");
}

TEST(IrOps, VerifyNamesDtypesThatBreakTheOpsRule) {
  Shape i32 = S({{"d", 4}}).with_dtype(DType::i32);
  // The input is f32{d=4}.
  EXPECT_EQ(verify_error(Node{Op::exp, i32, {0}, {}}),
            "verify: %1 = i32{d=4} exp(%0) takes floating-point operands and result of one dtype "
            "(ops.def), not (f32) -> i32");
  EXPECT_EQ(verify_error(Node{Op::lt, S({{"d", 4}}), {0, 0}, {}}),
            "verify: %1 = f32{d=4} lt(%0, %0) takes operands of one dtype, a bool result "
            "(ops.def), not (f32, f32) -> f32");
  EXPECT_EQ(verify_error(Node{Op::logical_not, S({{"d", 4}}).with_dtype(DType::boolean), {0}, {}}),
            "verify: %1 = bool{d=4} logical_not(%0) takes bool operands and result (ops.def), "
            "not (f32) -> bool");
  EXPECT_EQ(verify_error(Node{Op::argmax, S({}), {0}, ir::AxisAttrs{0}}),
            "verify: %1 = f32{} argmax(%0) axis=0 takes an integer result (ops.def), not (f32) -> "
            "f32");
}

TEST(IrOps, HashAndEqualityReadEveryAttributeField) {
  auto graph = [](ir::AxisAttrs a) {
    Graph g;
    g.add(Node{Op::input, S({{"d", 4}}), {}, ir::InputAttrs{0}});
    g.outputs().push_back(g.add(Node{Op::cumsum, S({{"d", 4}}), {0}, a}));
    return g;
  };
  const Graph plain = graph({0, false, false});
  for (const ir::AxisAttrs& other :
       {ir::AxisAttrs{0, true, false}, ir::AxisAttrs{0, false, true}}) {
    const Graph g = graph(other);
    EXPECT_NE(g.hash(), plain.hash());
    EXPECT_FALSE(g == plain);
  }
  EXPECT_EQ(graph({0, false, false}).hash(), plain.hash());
  EXPECT_TRUE(graph({0, false, false}) == plain);
  EXPECT_EQ(ir::print(graph({0, true, true}), 1),
            "%1 = f32{d=4} cumsum(%0) axis=0 exclusive reverse");
}

}  // namespace
}  // namespace prism
