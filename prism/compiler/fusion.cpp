#include "prism/compiler/fusion.h"

#include <algorithm>

namespace prism::compiler {

std::vector<bool> folded_dequantizes(const ir::Graph& graph,
                                     const std::function<bool(const ir::Node& dot)>& takes) {
  // Whether `dot` multiplies activations {..., k} by `weights` {n, k}, contracting k.
  auto product_by = [&](const ir::Node& dot, ir::ValueId weights) {
    if (dot.op != ir::Op::dot || dot.inputs[1] != weights || dot.inputs[0] == weights) return false;
    const int x_rank = graph.node(dot.inputs[0]).shape.rank();
    const auto& a = dot.attr<ir::DotAttrs>();
    return a.lhs_batch.empty() && a.rhs_batch.empty() && a.rhs_contract == std::vector{1} &&
           a.lhs_contract == std::vector{x_rank - 1} && takes(dot);
  };
  std::vector<bool> folded(graph.size(), false);
  std::vector<bool> output(graph.size(), false);
  for (ir::ValueId v : graph.outputs()) output[v] = true;
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& dq = graph.node(id);
    if (dq.op != ir::Op::dequantize || dq.shape.rank() != 2 || output[id]) continue;
    bool used = false, all = true;
    for (ir::ValueId v = id + 1; v < graph.size() && all; ++v) {
      const ir::Node& n = graph.node(v);
      if (std::find(n.inputs.begin(), n.inputs.end(), id) == n.inputs.end()) continue;
      used = true;
      all = product_by(n, id);
    }
    folded[id] = used && all;
  }
  return folded;
}

FusionPlan fuse_elementwise(const ir::Graph& g) {
  FusionPlan plan;
  int n = g.size();
  plan.group_of.assign(n, -1);
  plan.virtual_broadcast.assign(n, false);
  std::vector<int> users(n, 0);
  std::vector<bool> all_users_elementwise(n, true), is_output(n, false);
  for (ir::ValueId id = 0; id < n; ++id) {
    for (ir::ValueId in : g.node(id).inputs) {
      ++users[in];
      if (!ir::is_elementwise(g.node(id).op)) all_users_elementwise[in] = false;
    }
  }
  for (ir::ValueId out : g.outputs()) is_output[out] = true;

  for (ir::ValueId id = 0; id < n; ++id) {
    plan.virtual_broadcast[id] = g.node(id).op == ir::Op::broadcast && !is_output[id] &&
                                 users[id] > 0 && all_users_elementwise[id];
  }
  for (ir::ValueId id = n - 1; id >= 0; --id) {
    if (!ir::is_elementwise(g.node(id).op) || plan.group_of[id] >= 0) continue;
    int gi = static_cast<int>(plan.groups.size());
    FusionGroup group{id, {id}, {}};
    plan.group_of[id] = gi;
    for (size_t k = 0; k < group.nodes.size(); ++k) {
      for (ir::ValueId in : g.node(group.nodes[k]).inputs) {
        bool joins = ir::is_elementwise(g.node(in).op) && plan.group_of[in] < 0 && users[in] == 1 &&
                     !is_output[in];
        if (joins) {
          plan.group_of[in] = gi;
          group.nodes.push_back(in);
        }
      }
    }
    std::sort(group.nodes.begin(), group.nodes.end());
    for (ir::ValueId m : group.nodes) {
      for (ir::ValueId in : g.node(m).inputs) {
        if (plan.group_of[in] != gi &&
            std::find(group.operands.begin(), group.operands.end(), in) == group.operands.end()) {
          group.operands.push_back(in);
        }
      }
    }
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

OperandRead read_through(const ir::Graph& graph, const FusionPlan& plan, ir::ValueId operand,
                         const Shape& out) {
  // axis_map: output axis -> axis of the value reached so far, or -1 where broadcast.
  std::vector<int> axis_map(out.rank());
  for (int i = 0; i < out.rank(); ++i) axis_map[i] = i;
  ir::ValueId src = operand;
  while (plan.virtual_broadcast[src]) {
    const ir::Node& b = graph.node(src);
    const auto& dims = b.attr<ir::AxesAttrs>().axes;
    const Shape& from = graph.node(b.inputs[0]).shape;
    std::vector<int> inverse(b.shape.rank(), -1);
    for (int i = 0; i < from.rank(); ++i) {
      if (from.size(i) == b.shape.size(dims[i])) inverse[dims[i]] = i;
    }
    for (int& a : axis_map) a = a < 0 ? -1 : inverse[a];
    src = b.inputs[0];
  }
  OperandRead r{src};
  const Shape& s = graph.node(src).shape;
  auto strides = s.strides();
  r.contiguous = src == operand || s.numel() == out.numel();
  for (int i = 0; i < out.rank(); ++i) {
    r.strides[i] = axis_map[i] < 0 ? 0 : strides[axis_map[i]];
    if (src != operand && axis_map[i] != i) r.contiguous = r.contiguous && out.size(i) == 1;
  }
  return r;
}

std::vector<int64_t> plan_memory(const std::vector<Lifetime>& values, int64_t* arena_bytes,
                                 int64_t alignment) {
  struct Block {
    int64_t offset, bytes;
    int value;
  };
  std::vector<int64_t> offset(values.size(), -1);
  std::vector<Block> live;
  int64_t top = 0;
  int steps = 0;
  for (const Lifetime& v : values) steps = std::max(steps, std::max(v.first_step, v.last_step) + 1);
  std::vector<std::vector<int>> starting(steps);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].bytes > 0) starting[values[i].first_step].push_back(static_cast<int>(i));
  }
  for (int s = 0; s < steps; ++s) {
    // Values dead before this step free their space.
    std::erase_if(live, [&](const Block& b) { return values[b.value].last_step < s; });
    for (int v : starting[s]) {
      int64_t bytes = (values[v].bytes + alignment - 1) / alignment * alignment;
      int reuse = values[v].reuse_value;
      if (reuse >= 0 && offset[reuse] >= 0) {
        offset[v] = offset[reuse];
        live.push_back({offset[v], bytes, v});
        continue;
      }
      std::sort(live.begin(), live.end(),
                [](const Block& a, const Block& b) { return a.offset < b.offset; });
      int64_t at = 0;
      for (const Block& b : live) {
        if (b.offset - at >= bytes) break;
        at = std::max(at, b.offset + b.bytes);
      }
      offset[v] = at;
      top = std::max(top, at + bytes);
      live.push_back({at, bytes, v});
    }
  }
  *arena_bytes = top;
  return offset;
}

}  // namespace prism::compiler
