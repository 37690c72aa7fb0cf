// The kernel IR: what a code-generating backend (CUDA, OpenCL) runs for one step of an
// executable, said once here and rendered by each backend in its own dialect
// (prism/compiler/kernel_c.h for the C family).
//
// A kernel runs one work item per element of its `space`. Each work item evaluates a DAG of
// scalar expressions (`Expr`): the coordinates of its item, loads from the step's operands at
// computed indices (an index map per operand is just an integer expression), elementwise ops
// in one of three compute classes, and roundings through storage dtypes. It may run loops, in
// order: a reduction combines an expression over its nest into a result that later
// expressions read; a scan or a write loop stores on every iteration. With one accumulation
// rule for every backend (`Loop`). A work item stores `value` at its own element unless `at`
// says otherwise, and only where `mask` holds.
//
// A cooperative kernel gives each work item a group of threads: they share each loop's
// iterations and combine their partial results (softmax and the norms, one row per group).
//
// Attention and the matrix products a backend hands to a library (cuBLASLt, OpenCL's tiled
// kernels) stay in the backends; `lower` returns nothing for them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "prism/compiler/fusion.h"
#include "prism/ir/graph.h"

namespace prism::kernel {

// The class a scalar is computed in: doubles for f64, floats for f32, f16 and bf16 (rounded to
// their dtype after each op), 64-bit integers for integers and bool.
enum class Scalar : uint8_t { f64, f32, i64 };
Scalar scalar_of(DType t);
inline bool is_float(Scalar s) { return s != Scalar::i64; }

using ExprId = int32_t;
inline constexpr ExprId kNone = -1;

enum class ExprKind : uint8_t {
  constant,  // `number` (an integer when the class is i64)
  flat,      // the work item's flat index in the space (i64)
  coord,     // coordinate `axis` of the work item in the space (i64)
  loop,      // coordinate `axis` of loop `loop`'s nest (i64)
  result,    // the result of loop `loop` (in a scan: so far), in its accumulator's class
  load,      // element args[0] of operand `operand` (-1: the output), in scalar_of(its dtype);
             // with args[1], a mask: where it is false nothing is read and the value is 0.
             // A `view` load reads the operand's bytes as elements of `dtype` instead (the
             // f16 scales inside a quantized weight's u8 blocks)
  op,        // elementwise `op` on args in the class of args[0] (select: of args[1]), giving
             // `type`: arithmetic, compares, select, is_nan, logical ops
  round,     // args[0] stored as `dtype` and read back: convert's semantics (saturating)
};

struct Expr {
  ExprKind kind = ExprKind::constant;
  Scalar type = Scalar::i64;
  ir::Op op = ir::Op::add;
  DType dtype = DType::f32;
  int operand = -1;
  int axis = -1;
  int loop = -1;
  double number = 0;  // a constant (integers up to 2^53 exactly; larger ones in `integer`)
  int64_t integer = 0;
  bool view = false;
  std::vector<ExprId> args;
};

enum class Combine : uint8_t { none, sum, prod, max, min, argmax, argmin };

// A loop nest (outermost first) that each work item runs. Results accumulate in `accumulator`:
// sums of f32, f16 and bf16 in f32 with Kahan compensation, f64 in double, integers in i64;
// max and min propagate NaN; argmax and argmin give the flat position in the nest of the first
// extreme (a NaN counts as one, and the first NaN wins). `none` only iterates (a write loop).
struct Loop {
  std::vector<int64_t> extents;
  Combine combine = Combine::none;
  Scalar accumulator = Scalar::f32;
  ExprId operand = kNone;  // combined on each iteration
  bool writes = false;     // the kernel stores on each iteration of this loop (the last one)
  bool exclusive = false;  // a writing loop stores before combining (an exclusive scan)
};

// When a kernel of an in-place step runs (executables alias an update's output with its
// operand when the operand dies there or is donated).
enum class InPlace : uint8_t {
  always,
  when_not_in_place,  // copies the operand into the output: a backend may use a buffer copy
};

struct Kernel {
  std::string name;
  std::vector<int64_t> space;  // one work item per element, row-major
  DType out = DType::f32;
  std::vector<Expr> exprs;   // topological: args precede their users
  std::vector<Loop> loops;   // run in order
  ExprId value = kNone;      // stored
  ExprId at = kNone;         // the element stored; kNone: the work item's flat index
  ExprId mask = kNone;       // stores only where true; kNone: always
  bool cooperative = false;  // a group of threads per work item; loops have one extent each
  int threads = 0;           // cooperative: the group size suggested (0: the backend's choice)
  InPlace when = InPlace::always;

  int64_t items() const;
  // Where each expression is evaluated: 0 before the loops, 2j + 1 in loop j's body, 2j + 2
  // after it (a writing loop's result is read inside it).
  std::vector<int> region() const;
  // Whether each expression is needed by a stored value, index or mask, or a loop's operand.
  std::vector<bool> used() const;
  // Whether each expression reads the result of loop j (directly or through its args).
  std::vector<bool> reads_result(int j) const;
};

// The kernels of one step, run in order, and the values they read: every kernel of a step takes
// the same operands (`reads`, in order).
struct Step {
  std::vector<ir::ValueId> reads;
  std::vector<Kernel> kernels;
};

// The kernels of the step that computes `id` (the root of its fusion group for elementwise
// ops), named `name` (with suffixes where a step has several), or nullopt for an op the IR does
// not describe.
std::optional<Step> lower(const ir::Graph& graph, const compiler::FusionPlan& plan, ir::ValueId id,
                          const std::string& name);

// How the kernel IR runs an op: its own lowering (`lower`), a kernel each backend writes
// itself (attention), through the op's decomposition into primitives (the other composites),
// through the platform's communicator across devices (collectives), or not at all (leaves
// live in memory). Every op of ops.def has an answer: an op added there and not here fails
// to build.
enum class Lowering : uint8_t { kernel_ir, backend, decomposed, collective, leaf };
Lowering lowering_of(ir::Op op);

// Whether `lower` has a kernel of its own for composite `node` (softmax, log_softmax, rope, and
// the norms over one contiguous run of axes, in floating point); other composites run through
// their decompositions.
bool lowers(const ir::Node& node);

// The dequantize nodes that the products reading them read through (`FusionPlan::folded`,
// compiler::folded_dequantizes): those whose every reader multiplies floating-point activations
// of at most kFoldedRows rows by them. Such a product's kernel reads the blocks and
// dequantizes each weight as it loads it, so decoding reads the weights at their quantized
// size; larger products (prefill) read a dequantized copy, made by the dequantize's own kernel,
// through the backend's matrix product.
inline constexpr int64_t kFoldedRows = 16;
std::vector<bool> folded_dequantizes(const ir::Graph& graph);
// The plan a kernel IR backend runs by: fuse_elementwise's, with the folded dequantizes.
compiler::FusionPlan plan_steps(const ir::Graph& graph);
// Whether product `node` reads its weights through a folded dequantize: the kernel IR's own
// product then computes it, not a library's.
bool reads_folded(const compiler::FusionPlan& plan, const ir::Node& node);

// The values a step reads: a fused group's operands (looking through virtual broadcasts), or a
// node's inputs (looking through folded dequantizes to their bytes).
std::vector<ir::ValueId> step_reads(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                    ir::ValueId id);

// A readable listing of a kernel, for tests and PRISM_DEBUG.
std::string print(const Kernel& kernel);

}  // namespace prism::kernel
