// The CUDA backend without a GPU: every kernel the generator emits, for every op kind and
// dtype, is compiled by NVRTC (which needs no device); the host-side planning (launch sizes,
// cuBLASLt views of dot) is checked directly; and on a machine without a GPU the platform
// reports itself unavailable with the reason. The kernels' results are checked against the
// CPU on a GPU machine by the op harness (tests/unit/platforms.h), which includes cuda there.
#if PRISM_WITH_CUDA

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "prism/backends/cuda/codegen.h"
#include "prism/backends/cuda/cuda_api.h"
#include "prism/backends/cuda/matmul.h"
#include "prism/backends/cuda/nvrtc_compiler.h"
#include "prism/backends/registry.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/core/error.h"
#include "prism/llm/engine.h"
#include "prism/models/llama.h"
#include "prism/models/mnist.h"
#include "prism/runtime/compile.h"
#include "prism/runtime/platform.h"
#include "tests/unit/test_util.h"

namespace prism::cuda {
namespace {

using ir::Op;
using ir::ValueId;

constexpr DType kAllDTypes[] = {DType::f64, DType::f32, DType::f16,    DType::bf16,
                                DType::i64, DType::i32, DType::i16,    DType::i8,
                                DType::u8,  DType::u32, DType::boolean};

Shape shape(DType t, std::initializer_list<Dim> dims) { return Shape(t, dims); }

// Builds a graph node by node; every node added with `out` becomes an output (a step).
struct Builder {
  ir::Graph g;
  int inputs = 0;
  ValueId input(const Shape& s) { return g.add({Op::input, s, {}, ir::InputAttrs{inputs++}}); }
  ValueId add(Op op, const Shape& s, std::vector<ValueId> in, ir::Attrs attrs = {}) {
    return g.add({op, s, std::move(in), std::move(attrs)});
  }
  ValueId out(Op op, const Shape& s, std::vector<ValueId> in, ir::Attrs attrs = {}) {
    ValueId v = add(op, s, std::move(in), std::move(attrs));
    g.outputs().push_back(v);
    return v;
  }
};

// Every step's kernels, as the executable would generate them, named after `label`.
std::vector<KernelCode> kernels_of(const ir::Graph& g, const std::string& label) {
  compiler::FusionPlan plan = kernel::plan_steps(g);
  std::vector<KernelCode> kernels;
  for (ValueId id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    bool stored = n.op == Op::parameter || n.op == Op::input || n.op == Op::constant;
    if (stored || plan.virtual_broadcast[id] || plan.folded[id]) continue;
    if (ir::is_elementwise(n.op) && plan.groups[plan.group_of[id]].root != id) continue;
    for (KernelCode& k : generate(g, plan, id, fmt::format("{}_{}", label, id))) {
      kernels.push_back(std::move(k));
    }
  }
  return kernels;
}

// The module source of `kernels`, as an executable compiles it.
std::string source_of(const std::vector<KernelCode>& kernels) {
  std::vector<const KernelCode*> all;
  for (const KernelCode& k : kernels) all.push_back(&k);
  std::vector<std::string> names;
  return module_source(all, &names);
}

// Float-only ops by ops.def's dtype rule, and atan2, which has no integer kernel.
bool float_only(Op op) { return ir::op_types(op) == ir::Types::floating || op == Op::atan2; }
bool int_only(Op op) {
  return op == Op::logical_not || op == Op::logical_and || op == Op::logical_or ||
         op == Op::logical_xor;
}

// One graph holding every op the generator emits for dtype t.
ir::Graph all_ops(DType t) {
  Builder b;
  Shape xy = shape(t, {{"a", 3}, {"b", 4}});
  ValueId x = b.input(xy), y = b.input(xy);
  ValueId c = b.input(xy.with_dtype(DType::boolean));
  ValueId s32 = b.input(Shape::scalar(DType::i32)), s64 = b.input(Shape::scalar(DType::i64));
  ValueId idx = b.input(shape(DType::i32, {{"n", 2}}));
  ValueId idx2 = b.input(shape(DType::i64, {{"a", 3}, {"b", 2}}));
  ValueId row = b.input(shape(t, {{"b", 4}}));
  bool fl = is_float(t);
  for (int k = 0; k < static_cast<int>(Op::select); ++k) {
    Op op = static_cast<Op>(k);
    ir::OpKind kind = ir::op_kind(op);
    if (kind != ir::OpKind::unary && kind != ir::OpKind::binary) continue;
    if (op == Op::convert) continue;
    if ((float_only(op) && !fl) || (int_only(op) && fl)) continue;
    bool compare = op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt ||
                   op == Op::ge || op == Op::is_nan;
    Shape s = compare ? xy.with_dtype(DType::boolean) : xy;
    if (kind == ir::OpKind::unary) {
      b.out(op, s, {x});
    } else {
      b.out(op, s, {x, y});
    }
  }
  b.out(Op::select, xy, {c, x, y});
  for (DType to : kAllDTypes) b.out(Op::convert, xy.with_dtype(to), {x});
  // A fused chain reading a broadcast row through zero strides.
  ValueId bc = b.add(Op::broadcast, xy, {row}, ir::AxesAttrs{{1}});
  ValueId sum = b.add(Op::add, xy, {x, bc});
  b.out(Op::mul, xy, {sum, y});
  // Data movement.
  b.out(Op::iota, xy, {}, ir::AxisAttrs{1});
  b.out(Op::broadcast, shape(t, {{"c", 2}, {"b", 4}}), {row}, ir::AxesAttrs{{1}});
  b.out(Op::reshape, shape(t, {{"ab", 12}}), {x});
  b.out(Op::transpose, shape(t, {{"b", 4}, {"a", 3}}), {x}, ir::AxesAttrs{{1, 0}});
  b.out(Op::slice, shape(t, {{"a", 2}, {"b", 2}}), {x}, ir::SliceAttrs{{1, 0}, {3, 4}, {1, 2}});
  b.out(Op::dynamic_slice, shape(t, {{"a", 2}, {"b", 4}}), {x, s32, s64});
  b.out(Op::dynamic_update_slice, xy,
        {x,
         b.add(Op::slice, shape(t, {{"a", 1}, {"b", 4}}), {y},
               ir::SliceAttrs{{0, 0}, {1, 4}, {1, 1}}),
         s64, s32});
  b.out(Op::concatenate, shape(t, {{"a", 6}, {"b", 4}}), {x, y}, ir::AxisAttrs{0});
  b.out(Op::gather, shape(t, {{"n", 2}, {"b", 4}}), {x, idx}, ir::AxisAttrs{0});
  b.out(Op::take_along, shape(t, {{"a", 3}, {"b", 2}}), {x, idx2}, ir::AxisAttrs{1});
  for (auto reduce : {ir::ScatterReduce::none, ir::ScatterReduce::add, ir::ScatterReduce::mul,
                      ir::ScatterReduce::max, ir::ScatterReduce::min}) {
    ValueId upd = b.add(Op::slice, shape(t, {{"a", 3}, {"b", 2}}), {y},
                        ir::SliceAttrs{{0, 0}, {3, 2}, {1, 1}});
    b.out(Op::scatter, xy, {x, idx2, upd}, ir::ScatterAttrs{1, reduce});
  }
  ValueId zero =
      b.add(Op::slice, Shape::scalar(t), {b.add(Op::reshape, shape(t, {{"ab", 12}}), {x})},
            ir::SliceAttrs{{0}, {1}, {1}});
  zero = b.add(Op::reshape, Shape::scalar(t), {zero});
  for (auto mode : {ir::PadMode::constant, ir::PadMode::edge, ir::PadMode::reflect}) {
    b.out(Op::pad, shape(t, {{"a", 5}, {"b", 3}}), {x, zero}, ir::PadAttrs{{1, 1}, {1, -2}, mode});
  }
  // Reductions, sorting, products.
  for (Op op : {Op::reduce_sum, Op::reduce_max, Op::reduce_min, Op::reduce_prod}) {
    b.out(op, shape(t, {{"a", 3}}), {x}, ir::AxesAttrs{{1}});
    b.out(op, Shape::scalar(t), {x}, ir::AxesAttrs{{0, 1}});
  }
  for (Op op : {Op::argmax, Op::argmin}) {
    b.out(op, shape(DType::i32, {{"a", 3}}), {x}, ir::AxisAttrs{1});
    b.out(op, shape(DType::i64, {{"b", 4}}), {x}, ir::AxisAttrs{0});
  }
  b.out(Op::cumsum, xy, {x}, ir::AxisAttrs{1, false, false});
  b.out(Op::cumsum, xy, {x}, ir::AxisAttrs{0, true, true});
  b.out(Op::argsort, shape(DType::i32, {{"a", 3}, {"b", 2}}), {x}, ir::ArgsortAttrs{1, 2, true});
  b.out(Op::argsort, shape(DType::i64, {{"a", 2}, {"b", 4}}), {x}, ir::ArgsortAttrs{0, 2, false});
  b.out(Op::dot, shape(t, {{"a", 3}, {"a2", 3}}), {x, y}, ir::DotAttrs{{}, {}, {1}, {1}});
  b.out(Op::dot, shape(t, {{"a", 3}}), {x, y}, ir::DotAttrs{{0}, {0}, {1}, {1}});
  // Contracting a leading axis (no warp per output), and a long contiguous one (a warp each).
  b.out(Op::dot, shape(t, {{"b", 4}, {"b2", 4}}), {x, y}, ir::DotAttrs{{}, {}, {0}, {0}});
  ValueId xl = b.input(shape(t, {{"s", 2}, {"d", 64}})),
          wl = b.input(shape(t, {{"o", 3}, {"d", 64}}));
  b.out(Op::dot, shape(t, {{"s", 2}, {"o", 3}}), {xl, wl}, ir::DotAttrs{{}, {}, {1}, {1}});
  ValueId img = b.input(shape(t, {{"n", 1}, {"c", 2}, {"w", 5}}));
  ValueId ker = b.input(shape(t, {{"o", 2}, {"c", 1}, {"k", 3}}));
  b.out(Op::convolution, shape(t, {{"n", 1}, {"o", 2}, {"w", 3}}), {img, ker},
        ir::ConvAttrs{{2}, {1}, {0}, {2}, 2});
  if (fl) {  // weights in ggml's blocks: dequantized, and read by a product from the blocks
    using quant::GgmlType;
    for (GgmlType f : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                       GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      const quant::GgmlTypeInfo& info = quant::info(f);
      ValueId w = b.input(shape(DType::u8, {{"o", 3}, {"blk", info.block_bytes}}));
      const Shape values = shape(t, {{"o", 3}, {"k", info.block_elements}});
      b.out(Op::dequantize, values, {w}, ir::DequantizeAttrs{f});
      ValueId dq = b.add(Op::dequantize, values, {w}, ir::DequantizeAttrs{f});
      ValueId xs = b.input(shape(t, {{"s", 2}, {"k", info.block_elements}}));
      b.out(Op::dot, shape(t, {{"s", 2}, {"o", 3}}), {xs, dq}, ir::DotAttrs{{}, {}, {1}, {1}});
    }
  }
  if (fl) {  // the composites
    b.out(Op::softmax, xy, {x}, ir::AxisAttrs{1});
    b.out(Op::log_softmax, xy, {x}, ir::AxisAttrs{0});
    b.out(Op::rms_norm, xy, {x}, ir::NormAttrs{{1}, 1e-6});
    b.out(Op::layer_norm, xy, {x}, ir::NormAttrs{{0, 1}, 1e-5});
    ValueId half = b.add(Op::slice, shape(t, {{"a", 3}, {"b", 2}}), {y},
                         ir::SliceAttrs{{0, 0}, {3, 2}, {1, 1}});
    b.out(Op::rope, xy, {x, half, half}, ir::RopeAttrs{false});
    b.out(Op::rope, xy, {x, half, half}, ir::RopeAttrs{true});
    Shape qs = shape(t, {{"b", 1}, {"h", 4}, {"s", 3}, {"d", 40}});
    Shape ks = shape(t, {{"b", 1}, {"h", 2}, {"k", 5}, {"d", 40}});
    Shape vs = shape(t, {{"b", 1}, {"h", 2}, {"k", 5}, {"e", 36}});
    ValueId q = b.input(qs), k = b.input(ks), v = b.input(vs);
    ValueId bmask = b.input(shape(DType::boolean, {{"b", 1}, {"h", 4}, {"s", 3}, {"k", 5}}));
    ValueId fmask = b.input(shape(t, {{"b", 1}, {"h", 4}, {"s", 3}, {"k", 5}}));
    Shape ys = shape(t, {{"b", 1}, {"h", 4}, {"s", 3}, {"e", 36}});
    b.out(Op::attention, ys, {q, k, v}, ir::AttentionAttrs{0.125, true, 0, false, false});
    b.out(Op::attention, ys, {q, k, v, bmask, s32}, ir::AttentionAttrs{0.5, true, 2, true, true});
    b.out(Op::attention, ys, {q, k, v, fmask}, ir::AttentionAttrs{1.0, false, 0, true, false});
    // Many query rows (prefill): fewer warps per row.
    ValueId q2 = b.input(shape(t, {{"b", 1}, {"h", 4}, {"s", 300}, {"d", 40}}));
    ValueId k2 = b.input(shape(t, {{"b", 1}, {"h", 2}, {"k", 300}, {"d", 40}}));
    ValueId v2 = b.input(shape(t, {{"b", 1}, {"h", 2}, {"k", 300}, {"e", 36}}));
    b.out(Op::attention, shape(t, {{"b", 1}, {"h", 4}, {"s", 300}, {"e", 36}}), {q2, k2, v2},
          ir::AttentionAttrs{0.125, true, 0, false, false});
  }
  return b.g;
}

class CudaKernelsCompile : public ::testing::TestWithParam<DType> {};

TEST_P(CudaKernelsCompile, EveryOpCompilesWithNvrtc) {
  if (!nvrtc_library().ok) GTEST_SKIP() << "NVRTC not found: " << nvrtc_library().error;
  DType t = GetParam();
  std::vector<KernelCode> kernels = kernels_of(all_ops(t), std::string(name(t)));
  EXPECT_GT(kernels.size(), 60u);
  std::string source = source_of(kernels);
  EXPECT_NO_THROW(compile_cuda(source, "sm_90")) << source;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, CudaKernelsCompile, ::testing::ValuesIn(kAllDTypes),
                         [](const auto& info) { return std::string(name(info.param)); });

// The graphs real models compile to (the CPU's supports() declines the same composites as
// cuda's, so the optimized graphs are the ones cuda gets): Llama prefill and decode steps in
// f32 and bf16, and both MNIST models.
TEST(CudaCodegen, ModelGraphsCompileWithNvrtc) {
  if (!nvrtc_library().ok) GTEST_SKIP() << "NVRTC not found: " << nvrtc_library().error;
  Platform& cpu = get_platform("cpu");
  models::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_positions = 64;
  c.tie_word_embeddings = true;
  std::vector<KernelCode> kernels;
  auto add = [&](const ir::Graph& g, const std::string& label) {
    for (KernelCode& k : kernels_of(g, label)) kernels.push_back(std::move(k));
  };
  for (DType t : {DType::f32, DType::bf16}) {
    models::Llama model(c, t);
    for (int64_t window : {1, 5}) {
      Executable step = llm::compile_step(cpu, model, window, 16);
      add(step.graph(), fmt::format("llama_{}_{}", name(t), window));
    }
  }
  for (auto kind : {models::Mnist::Kind::mlp, models::Mnist::Kind::cnn}) {
    models::Mnist model(kind);
    Executable exe = compile(cpu, [&](Tensor x) { return model.forward(x); },
                             {Shape(DType::u8, {{"b", 3}, {"h", 28}, {"w", 28}})});
    add(exe.graph(), kind == models::Mnist::Kind::mlp ? "mlp" : "cnn");
  }
  EXPECT_GT(kernels.size(), 20u);
  std::string source = source_of(kernels);
  EXPECT_NO_THROW(compile_cuda(source, "sm_90")) << source;
}

TEST(CudaCodegen, NvrtcErrorsCarryTheLog) {
  if (!nvrtc_library().ok) GTEST_SKIP() << "NVRTC not found";
  std::string message = testing::error_of(
      [] { compile_cuda("extern \"C\" __global__ void k() { nope; }", "sm_90"); });
  EXPECT_NE(message.find("NVRTC could not compile"), std::string::npos) << message;
  EXPECT_NE(message.find("nope"), std::string::npos) << message;
}

TEST(CudaCodegen, FloatOnlyOpsOnIntegersAreAClearError) {
  Builder b;
  ValueId x = b.input(shape(DType::i32, {{"a", 3}}));
  b.out(Op::exp, shape(DType::i32, {{"a", 3}}), {x});
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  std::string message = testing::error_of([&] { generate(b.g, plan, 1, "k"); });
  EXPECT_NE(message.find("exp is not defined for i32"), std::string::npos) << message;
}

TEST(CudaCodegen, FusedGroupReadsBroadcastsInPlace) {
  Builder b;
  Shape xy = shape(DType::f32, {{"a", 3}, {"b", 4}});
  ValueId x = b.input(xy), row = b.input(shape(DType::f32, {{"b", 4}}));
  ValueId bc = b.add(Op::broadcast, xy, {row}, ir::AxesAttrs{{1}});
  ValueId e = b.add(Op::exp, xy, {x});
  b.out(Op::add, xy, {e, bc});
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  EXPECT_EQ(step_reads(b.g, plan, 4), (std::vector<ValueId>{x, row}));
  std::vector<KernelCode> k = generate(b.g, plan, 4, "fused");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].work, 12);
  EXPECT_NE(k[0].source.find("expf("), std::string::npos) << k[0].source;
  EXPECT_NE(k[0].source.find("in1[c1]"), std::string::npos) << k[0].source;
}

TEST(CudaCodegen, IdenticalKernelsAreCompiledOnce) {
  Builder b;
  Shape xy = shape(DType::f32, {{"a", 3}, {"b", 4}});
  ValueId x = b.input(xy);
  ValueId e1 = b.out(Op::exp, xy, {x});
  ValueId e2 = b.out(Op::exp, xy, {x});  // the same kernel under another name
  ValueId t = b.out(Op::tanh, xy, {x});
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  std::vector<KernelCode> k1 = generate(b.g, plan, e1, "k1"), k2 = generate(b.g, plan, e2, "k2"),
                          k3 = generate(b.g, plan, t, "k3");
  std::vector<std::string> names;
  std::string source = module_source({&k1[0], &k2[0], &k3[0]}, &names);
  EXPECT_EQ(names, (std::vector<std::string>{"k1", "k1", "k3"}));
  EXPECT_NE(source.find(" k1("), std::string::npos);
  EXPECT_EQ(source.find(" k2("), std::string::npos);
  EXPECT_NE(source.find(" k3("), std::string::npos);
}

TEST(CudaCodegen, LinearLayerProductsTakeAWarpPerOutput) {
  Builder b;
  ValueId x = b.input(shape(DType::bf16, {{"s", 1}, {"d", 2048}}));
  ValueId w = b.input(shape(DType::bf16, {{"o", 512}, {"d", 2048}}));
  ValueId y = b.out(Op::dot, shape(DType::bf16, {{"s", 1}, {"o", 512}}), {x, w},
                    ir::DotAttrs{{}, {}, {1}, {1}});
  compiler::FusionPlan plan = compiler::fuse_elementwise(b.g);
  std::vector<KernelCode> k = generate(b.g, plan, y, "k");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_TRUE(k[0].block_per_item);
  EXPECT_EQ(k[0].work, 512);
  EXPECT_EQ(k[0].block, 32);
  EXPECT_NE(k[0].source.find("prism_block_combine"), std::string::npos) << k[0].source;
}

TEST(CudaCodegen, LaunchSizes) {
  KernelCode k;
  k.work = 1000;
  EXPECT_EQ(launch_for(k).grid, 4);
  EXPECT_EQ(launch_for(k).block, 256);
  k.work = 0;
  EXPECT_EQ(launch_for(k).grid, 1);
  k.work = int64_t{1} << 40;  // grid-stride: capped, each thread loops
  EXPECT_EQ(launch_for(k).grid, kMaxGridStrideBlocks);
  k.block_per_item = true;
  k.block = 128;
  k.work = 4096;
  EXPECT_EQ(launch_for(k).grid, 4096);
  EXPECT_EQ(launch_for(k).block, 128);
  k.work = int64_t{1} << 32;
  EXPECT_NE(testing::error_of([&] { launch_for(k); }).find("more than a grid holds"),
            std::string::npos);
}

TEST(CudaCodegen, MatmulViews) {
  Builder b;
  // x {s, d} . w {dout, d}: the weight stored transposed, as in every linear layer.
  ValueId x = b.input(shape(DType::bf16, {{"s", 7}, {"d", 64}}));
  ValueId w = b.input(shape(DType::bf16, {{"dout", 32}, {"d", 64}}));
  ValueId y = b.out(Op::dot, shape(DType::bf16, {{"s", 7}, {"dout", 32}}), {x, w},
                    ir::DotAttrs{{}, {}, {1}, {1}});
  auto m = plan_matmul(b.g, b.g.node(y));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->m, 7);
  EXPECT_EQ(m->n, 32);
  EXPECT_EQ(m->k, 64);
  EXPECT_FALSE(m->lhs_transposed);
  EXPECT_TRUE(m->rhs_transposed);
  // Batched, lhs transposed: a {h, d, s} . b {h, d, t} over d, batch h.
  ValueId a3 = b.input(shape(DType::f32, {{"h", 2}, {"d", 8}, {"s", 5}}));
  ValueId b3 = b.input(shape(DType::f32, {{"h", 2}, {"d", 8}, {"t", 6}}));
  ValueId z = b.out(Op::dot, shape(DType::f32, {{"h", 2}, {"s", 5}, {"t", 6}}), {a3, b3},
                    ir::DotAttrs{{0}, {0}, {1}, {1}});
  m = plan_matmul(b.g, b.g.node(z));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->batch, 2);
  EXPECT_TRUE(m->lhs_transposed);
  EXPECT_FALSE(m->rhs_transposed);
  // Integers and interleaved batch axes go to the generic kernel.
  ValueId i = b.input(shape(DType::i32, {{"s", 7}, {"d", 4}}));
  ValueId j = b.input(shape(DType::i32, {{"d", 4}, {"t", 3}}));
  ValueId ij = b.out(Op::dot, shape(DType::i32, {{"s", 7}, {"t", 3}}), {i, j},
                     ir::DotAttrs{{}, {}, {1}, {0}});
  EXPECT_FALSE(plan_matmul(b.g, b.g.node(ij)));
  ValueId p = b.input(shape(DType::f32, {{"s", 5}, {"h", 2}, {"d", 8}}));
  ValueId pq = b.out(Op::dot, shape(DType::f32, {{"h", 2}, {"s", 5}, {"t", 6}}), {p, b3},
                     ir::DotAttrs{{1}, {0}, {2}, {1}});
  EXPECT_FALSE(plan_matmul(b.g, b.g.node(pq)));
}

// Decoding's products (few rows by weights stored {N, K}) take few_rows_product's kernel in
// f32, f16 and bf16; more rows, other layouts and dtypes, and rows not a whole number of
// 16-byte loads stay with cuBLASLt or the generic kernel.
TEST(CudaCodegen, FewRowsProductsCompileWithNvrtc) {
  std::vector<KernelCode> kernels;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (MatmulShape m :
         {MatmulShape{t, 1, 1, 512, 2048, false, true}, MatmulShape{t, 2, 5, 24, 64, false, true},
          MatmulShape{t, 1, 8, 3, 0, false, true}}) {
      std::optional<KernelCode> k =
          few_rows_product(m, fmt::format("few_{}_{}_{}", name(t), m.m, m.k));
      ASSERT_TRUE(k) << name(t) << " " << m.m << "x" << m.n << "x" << m.k;
      EXPECT_EQ(launch_for(*k).grid, (m.batch * m.n + 3) / 4);
      kernels.push_back(std::move(*k));
    }
  }
  EXPECT_FALSE(few_rows_product(MatmulShape{DType::bf16, 1, 9, 64, 64, false, true}, "rows"));
  EXPECT_FALSE(few_rows_product(MatmulShape{DType::bf16, 1, 1, 64, 64, false, false}, "kn"));
  EXPECT_FALSE(few_rows_product(MatmulShape{DType::bf16, 1, 1, 64, 64, true, true}, "lhsT"));
  EXPECT_FALSE(few_rows_product(MatmulShape{DType::bf16, 1, 1, 64, 12, false, true}, "k12"));
  EXPECT_FALSE(few_rows_product(MatmulShape{DType::f64, 1, 1, 64, 64, false, true}, "f64"));
  if (!nvrtc_library().ok) GTEST_SKIP() << "NVRTC not found: " << nvrtc_library().error;
  const std::string source = source_of(kernels);
  EXPECT_NO_THROW(compile_cuda(source, "sm_90")) << source;
}

TEST(CudaPlatform, ErrorsNameTheCallAndTheCode) {
  EXPECT_EQ(testing::error_of([] { check(CUDA_SUCCESS, "cuInit"); }), "no error");
  std::string driver_error =
      testing::error_of([] { check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc of 64 bytes"); });
  EXPECT_EQ(driver_error.rfind("cuda: cuMemAlloc of 64 bytes: ", 0), 0u) << driver_error;
  if (nvrtc_library().ok) {
    EXPECT_EQ(testing::error_of([] { check(NVRTC_ERROR_COMPILATION, "nvrtcCompileProgram"); }),
              "cuda: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION");
  }
  if (cublaslt_library().ok) {
    std::string lt =
        testing::error_of([] { check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul"); });
    EXPECT_NE(lt.find("cuda: cublasLtMatmul: "), std::string::npos) << lt;
    EXPECT_NE(lt.find("not supported"), std::string::npos) << lt;
  }
}

TEST(CudaPlatform, SaysWhyItIsUnavailable) {
  std::string reason = unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is available here";
  bool listed = false;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name != "cuda") continue;
    listed = true;
    EXPECT_TRUE(s.compiled_in);
    EXPECT_FALSE(s.available);
    EXPECT_EQ(s.reason, reason);
  }
  EXPECT_TRUE(listed);
  if (!driver_library().ok) {
    EXPECT_EQ(reason, "no driver (libcuda.so.1 not found)");
    EXPECT_NE(testing::error_of([] { driver(); }).find("cuda: no driver (libcuda.so.1 not found)"),
              std::string::npos);
  }
  EXPECT_NE(testing::error_of([] {
              get_platform("cuda");
            }).find("platform cuda is not available: " + reason),
            std::string::npos);
  EXPECT_EQ(get_platform("auto").name(), "cpu");
}

}  // namespace
}  // namespace prism::cuda

#endif  // PRISM_WITH_CUDA
