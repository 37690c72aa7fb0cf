// Elementwise fusion and memory planning: decisions every backend that generates or
// interprets fused loops needs, made once here.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "prism/ir/graph.h"

namespace prism::compiler {

// A chain (tree) of elementwise nodes that runs as one loop and writes only `root`.
struct FusionGroup {
  ir::ValueId root;
  std::vector<ir::ValueId> nodes;     // members in topological order, root last
  std::vector<ir::ValueId> operands;  // values read from memory (may be virtual broadcasts)
};

struct FusionPlan {
  std::vector<int> group_of;  // per value: its group, or -1
  std::vector<FusionGroup> groups;
  std::vector<bool> virtual_broadcast;  // read through by fused loops, never materialized
  // Values a backend computes inside the steps that read them, from their first operand's
  // memory (the dequantize of weights its products read as blocks): aliases of that operand,
  // with no step of their own. Empty: none. The backend fills it (fuse_elementwise does not).
  std::vector<bool> folded;
};

// Groups elementwise nodes: a node joins its single user's group. Broadcasts whose users are
// all elementwise become strided reads instead of copies.
FusionPlan fuse_elementwise(const ir::Graph& graph);

// The dequantize nodes a backend folds into the products that read them (FusionPlan::folded):
// a dequantize of weights {n, k}, not an output, read by at least one product and only by
// products of activations {..., k} by it contracting k, each of which `takes` (the backend's
// own condition: the dtypes it has kernels for, how many rows).
std::vector<bool> folded_dequantizes(const ir::Graph& graph,
                                     const std::function<bool(const ir::Node& dot)>& takes);

// How a fused loop reads one operand of its group: the value in memory behind the operand's
// chain of virtual broadcasts, that value's element stride along each output axis (0 where
// broadcast), and whether it holds the output's elements in the output's order (an operand
// that is no broadcast, or a broadcast that only adds axes of size 1).
struct OperandRead {
  ir::ValueId source;
  std::array<int64_t, kMaxRank> strides{};
  bool contiguous = true;
};
OperandRead read_through(const ir::Graph& graph, const FusionPlan& plan, ir::ValueId operand,
                         const Shape& out);

// One value's lifetime in a schedule of steps, for plan_memory.
struct Lifetime {
  int64_t bytes = 0;
  int first_step = 0;    // written by this step
  int last_step = 0;     // last read by this step
  int reuse_value = -1;  // in place: take the storage of this value, which dies at first_step
};

// Offsets into one arena, reusing the space of values that are dead (first fit).
std::vector<int64_t> plan_memory(const std::vector<Lifetime>& values, int64_t* arena_bytes,
                                 int64_t alignment = 64);

}  // namespace prism::compiler
