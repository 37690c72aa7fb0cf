#include "prism/compiler/schedule.h"

#include <fmt/format.h>

#include <algorithm>

namespace prism::compiler {

using ir::Op;
using ir::ValueId;

Schedule::Schedule(const ir::Graph& graph, const FusionPlan& fusion)
    : step_of_(graph.size(), -1), slots_(graph.size()) {
  int parameters = 0;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& n = graph.node(id);
    Slot& slot = slots_[id];
    switch (n.op) {
      case Op::parameter:
        slot = {Storage::parameter, parameters++};
        continue;
      case Op::input:
        slot = {Storage::input, n.attr<ir::InputAttrs>().index};
        continue;
      case Op::constant:
        slot = {Storage::constant, constants_++};
        continue;
      case Op::reshape:
        slot = {Storage::alias, 0, 0, n.inputs[0]};
        continue;
      default:
        break;
    }
    if (!fusion.folded.empty() && fusion.folded[id]) {
      slot = {Storage::alias, 0, 0, n.inputs[0]};
      continue;
    }
    if (fusion.virtual_broadcast[id]) continue;
    // An elementwise node is computed inside its group's loop, which its root's step runs.
    if (ir::is_elementwise(n.op) && fusion.groups[fusion.group_of[id]].root != id) continue;
    slot.kind = Storage::arena;  // until place() decides
    step_of_[id] = static_cast<int>(steps_.size());
    steps_.push_back(id);
  }
}

bool Schedule::product_by_weights(const ir::Graph& graph, ValueId v) const {
  const ir::Node& n = graph.node(v);
  if (n.op != Op::dot) return false;
  const Storage kind = slots_[root(n.inputs[1])].kind;
  return kind == Storage::parameter || kind == Storage::constant;
}

void Schedule::cluster_products(const ir::Graph& graph) {
  auto by_weights = [&](ValueId v) { return product_by_weights(graph, v); };
  std::vector<ValueId> order;
  order.reserve(steps_.size());
  std::vector<bool> taken(graph.size(), false);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const ValueId v = steps_[i];
    if (taken[v]) continue;
    order.push_back(v);
    taken[v] = true;
    if (!by_weights(v)) continue;
    const ValueId lhs = graph.node(v).inputs[0];
    for (size_t j = i + 1; j < steps_.size(); ++j) {
      const ValueId u = steps_[j];
      if (!taken[u] && by_weights(u) && graph.node(u).inputs[0] == lhs) {
        order.push_back(u);
        taken[u] = true;
      }
    }
  }
  steps_ = std::move(order);
  for (size_t s = 0; s < steps_.size(); ++s) step_of_[steps_[s]] = static_cast<int>(s);
}

std::string Schedule::where(ValueId v) const {
  const Slot& s = slots_[v];
  switch (s.kind) {
    case Storage::none:
      return "none";
    case Storage::parameter:
      return fmt::format("parameter {}", s.index);
    case Storage::input:
      return fmt::format("input {}", s.index);
    case Storage::constant:
      return fmt::format("constant {}", s.index);
    case Storage::arena:
      return fmt::format("arena+{}", s.offset);
    case Storage::output:
      return fmt::format("output {}", s.index);
    case Storage::alias:
      return fmt::format("alias of %{}", s.alias);
  }
  return "?";
}

ValueId Schedule::root(ValueId v) const {
  while (slots_[v].kind == Storage::alias) v = slots_[v].alias;
  return v;
}

void Schedule::place(const ir::Graph& graph, const std::vector<std::vector<ValueId>>& reads,
                     std::span<const int> donated, int64_t alignment) {
  const int end = static_cast<int>(steps_.size());
  // The last step that reads each value's memory; a fused loop that reads a broadcast
  // through reads the broadcast's operand.
  std::vector<int> last_use(graph.size(), -1);
  auto read = [&](ValueId v, int step) {
    for (;;) {
      v = root(v);
      last_use[v] = std::max(last_use[v], step);
      if (slots_[v].kind != Storage::none || graph.node(v).op != Op::broadcast) return;
      v = graph.node(v).inputs[0];
    }
  };
  for (int s = 0; s < end; ++s) {
    for (ValueId r : reads[s]) read(r, s);
  }
  const std::vector<ValueId>& outputs = graph.outputs();
  for (ValueId out : outputs) read(out, end);

  // An output computed by a step, or a reshape of one, is written straight into its buffer;
  // the others (leaves, a value that is already another output) are copied there.
  donated_output_.assign(outputs.size(), -1);
  final_copies_.clear();
  std::vector<ValueId> written(outputs.size(), -1);  // per output: the step value writing it
  for (size_t k = 0; k < outputs.size(); ++k) {
    ValueId v = root(outputs[k]);
    if (slots_[v].kind != Storage::arena) {
      final_copies_.emplace_back(static_cast<int>(k), outputs[k]);
      continue;
    }
    slots_[v] = {Storage::output, static_cast<int>(k)};
    written[k] = v;
  }

  // Donated inputs, each given to at most one output.
  std::vector<ValueId> free_inputs;
  for (ValueId v = 0; v < graph.size(); ++v) {
    if (slots_[v].kind == Storage::input &&
        std::find(donated.begin(), donated.end(), slots_[v].index) != donated.end()) {
      free_inputs.push_back(v);
    }
  }
  auto give = [&](size_t k, ValueId input) {
    slots_[written[k]] = {Storage::input, slots_[input].index};
    donated_output_[k] = slots_[input].index;
    written[k] = -1;
    std::erase(free_inputs, input);
  };
  // An input updated in place where it is last read (a KV cache).
  for (size_t k = 0; k < outputs.size(); ++k) {
    ValueId v = written[k];
    if (v < 0 || graph.node(v).op != Op::dynamic_update_slice) continue;
    ValueId operand = root(graph.node(v).inputs[0]);
    if (std::find(free_inputs.begin(), free_inputs.end(), operand) != free_inputs.end() &&
        last_use[operand] == step_of_[v] &&
        graph.node(operand).shape.bytes() == graph.node(v).shape.bytes()) {
      give(k, operand);
    }
  }
  // Whether the step writing `v` may write over `input` as it reads it: a fused elementwise
  // loop reads each operand of its own element count at the index it writes; one read through
  // a broadcast is not.
  auto in_place_loop = [&](ValueId v, ValueId input) {
    if (!ir::is_elementwise(graph.node(v).op) ||
        graph.node(input).shape.numel() != graph.node(v).shape.numel()) {
      return false;
    }
    // Fused loops read broadcasts through (strided); a broadcast of the input anywhere is
    // taken as one such read.
    for (ValueId b = 0; b < graph.size(); ++b) {
      if (slots_[b].kind == Storage::none && graph.node(b).op == Op::broadcast &&
          root(graph.node(b).inputs[0]) == input) {
        return false;
      }
    }
    return true;
  };
  // An input dead once an output of its size is written (a state computed anew each step):
  // inputs of the same shape first, so that a state keeps its own buffer.
  for (bool same_shape : {true, false}) {
    for (size_t k = 0; k < outputs.size(); ++k) {
      ValueId v = written[k];
      if (v < 0) continue;
      const Shape& shape = graph.node(outputs[k]).shape;
      for (ValueId input : free_inputs) {
        const Shape& in = graph.node(input).shape;
        bool fits = same_shape ? in == shape : in.bytes() == shape.bytes();
        bool dead = last_use[input] < step_of_[v] ||
                    (last_use[input] == step_of_[v] && in_place_loop(v, input));
        if (fits && shape.bytes() > 0 && dead) {
          give(k, input);
          break;
        }
      }
    }
  }

  // Outputs copied in after the last step (a constant, a value that is already another
  // output) take a donated input of their shape that no one reads by then, so that the caller's
  // buffer is where they land (a state reset to zeros keeps its buffer).
  for (auto [k, value] : final_copies_) {
    const Shape& shape = graph.node(outputs[k]).shape;
    for (ValueId input : free_inputs) {
      if (graph.node(input).shape == shape && shape.bytes() > 0 && last_use[input] < end) {
        donated_output_[k] = slots_[input].index;
        std::erase(free_inputs, input);
        break;
      }
    }
  }

  // Everything else lives in the arena, reusing dead values' space.
  std::vector<Lifetime> lifetimes(graph.size());
  for (ValueId v = 0; v < graph.size(); ++v) {
    if (slots_[v].kind != Storage::arena) continue;
    Lifetime& l = lifetimes[v];
    l.bytes = graph.node(v).shape.bytes();
    l.first_step = step_of_[v];
    l.last_step = std::max(last_use[v], l.first_step);
    const ir::Node& n = graph.node(v);
    if (n.op == Op::dynamic_update_slice || n.op == Op::scatter) {  // may run in place
      ValueId operand = root(n.inputs[0]);
      if (slots_[operand].kind == Storage::arena && last_use[operand] == step_of_[v]) {
        l.reuse_value = operand;
      }
    }
  }
  std::vector<int64_t> offsets = plan_memory(lifetimes, &arena_bytes_, alignment);
  for (ValueId v = 0; v < graph.size(); ++v) {
    if (slots_[v].kind == Storage::arena) slots_[v].offset = offsets[v];
  }
}

}  // namespace prism::compiler
