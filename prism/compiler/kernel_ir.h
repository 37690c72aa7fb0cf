// The kernel IR: what a code-generating backend (CUDA, OpenCL) runs for one step of an
// executable, said once here and rendered by each backend in its own dialect
// (prism/compiler/kernel_c.h for the C family).
//
// A kernel runs one work item per element of its `space`. Each work item evaluates a DAG of
// scalar expressions (`Expr`): the coordinates of its item, loads from the step's operands at
// computed indices (an index map per operand is just an integer expression), elementwise ops
// in one of three compute classes, and roundings through storage dtypes. A map kernel writes
// its `value`; a reduction kernel combines `value` over a loop nest first, with one
// accumulation rule for every backend (`accumulator`). The index a work item writes is its own
// element unless `at` says otherwise (the window of an in-place update).
//
// Ops the IR does not describe yet (scans, sorts, scatter, products, convolutions, the nn
// composites) keep kernels of their own in each backend; `lower` returns nothing for them.
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
  loop,      // coordinate `axis` of a reduction's loop nest (i64)
  load,      // element args[0] of operand `operand`, in scalar_of(its dtype); with args[1],
             // a mask: where it is false nothing is read and the value is 0
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
  double number = 0;  // a constant (integers up to 2^53 exactly; larger ones in `integer`)
  int64_t integer = 0;
  std::vector<ExprId> args;
};

enum class Combine : uint8_t { sum, prod, max, min, argmax, argmin };

// A reduction over a loop nest (outermost first) in `accumulator`: sums of f32, f16 and bf16
// accumulate in f32 with Kahan compensation, f64 in double, integers in i64; max and min
// propagate NaN; argmax and argmin give the flat position in the nest of the first extreme
// (a NaN counts as one, and the first NaN wins).
struct Reduction {
  std::vector<int64_t> loops;
  Combine combine = Combine::sum;
  Scalar accumulator = Scalar::f32;
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
  std::vector<Expr> exprs;  // topological: args precede their users
  ExprId value = kNone;     // written (map), or combined (reduction)
  ExprId at = kNone;        // the element written; kNone: the work item's flat index
  std::optional<Reduction> reduction;
  InPlace when = InPlace::always;

  int64_t items() const;
  // Whether expression e reads a loop coordinate (and so belongs inside the loop nest).
  std::vector<bool> in_loop() const;
  // Whether each expression is needed by the value, the index written or a mask.
  std::vector<bool> used() const;
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

// The values a step reads: a fused group's operands (looking through virtual broadcasts), or a
// node's inputs.
std::vector<ir::ValueId> step_reads(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                    ir::ValueId id);

// A readable listing of a kernel, for tests and PRISM_DEBUG.
std::string print(const Kernel& kernel);

}  // namespace prism::kernel
