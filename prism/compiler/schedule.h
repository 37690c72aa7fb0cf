// The schedule every backend runs a graph by: one step per fusion group and per other op, in
// graph order, and where each value lives while the steps run (a parameter, an input, a
// constant, an offset in one arena, an output buffer, or another value's memory for a
// reshape). Backends differ in how a step is computed, not in this, so it is decided once here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "prism/compiler/fusion.h"
#include "prism/ir/graph.h"

namespace prism::compiler {

enum class Storage : uint8_t { none, parameter, input, constant, arena, output, alias };

struct Slot {
  Storage kind = Storage::none;
  int index = 0;           // parameter, input, constant or output position
  int64_t offset = 0;      // for arena values: the byte offset
  ir::ValueId alias = -1;  // for aliases: the value whose memory this is
};

class Schedule {
 public:
  // Orders the steps: each fusion group's root and each op that is not a leaf, a reshape (an
  // alias) or a broadcast that fused loops read through. Parameters are numbered in graph order
  // (Graph::parameters()), constants in the order they appear. The plan's `folded` values are
  // aliases of their first operand, with no step of their own.
  Schedule(const ir::Graph& graph, const FusionPlan& fusion);

  // Moves every dot product whose weights (second operand) are a parameter or a constant to
  // right after the first step that multiplies the same activations by such weights (a
  // layer's q, k and v projections, wherever the model computes them), so that a backend may
  // run them as one step. Only the order changes: such a product reads its activations,
  // computed before the first of them, and a leaf. Call before place().
  void cluster_products(const ir::Graph& graph);

  // Whether v is a dot product whose weights (second operand) are a parameter or a constant.
  bool product_by_weights(const ir::Graph& graph, ir::ValueId v) const;

  // The values computed by steps, in run order.
  const std::vector<ir::ValueId>& steps() const { return steps_; }
  int step_of(ir::ValueId v) const { return step_of_[v]; }
  int constants() const { return constants_; }

  // Places every value, given what each step reads (reads[s] for steps()[s]):
  // - outputs computed by a step are written straight into their output buffer;
  // - a donated input's memory becomes the buffer of an output of the same byte size that is
  //   written after the input's last read (a recurrent state rewritten every step), or at its
  //   last read by a step that may write over it: dynamic_update_slice of it (a KV cache), or
  //   a fused elementwise loop that reads it element for element; an output copied in after
  //   the last step takes a donated input of its shape that nothing reads by then;
  // - everything else lives in one arena whose space is reused once values are dead.
  // `alignment` is the arena offsets' alignment in bytes.
  void place(const ir::Graph& graph, const std::vector<std::vector<ir::ValueId>>& reads,
             std::span<const int> donated, int64_t alignment = 64);

  const Slot& slot(ir::ValueId v) const { return slots_[v]; }
  // Follows aliases to the value that owns the memory.
  ir::ValueId root(ir::ValueId v) const;
  // Per output: the donated input whose memory it is written into, or -1.
  const std::vector<int>& donated_outputs() const { return donated_output_; }
  // Outputs no step writes (a parameter, an input, a constant or an alias of one): copied into
  // their buffers after the steps, as (output position, value).
  const std::vector<std::pair<int, ir::ValueId>>& final_copies() const { return final_copies_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  // One call's address of every value: where(slot) for a value that owns its memory (or none),
  // the owner's address for an alias.
  template <typename Place, typename Where>
  std::vector<Place> addresses(Where where) const {
    std::vector<Place> at(slots_.size());
    for (size_t v = 0; v < slots_.size(); ++v) {
      const Slot& s = slots_[v];
      at[v] = s.kind == Storage::alias ? at[s.alias] : where(s, static_cast<ir::ValueId>(v));
    }
    return at;
  }

  // Where a value lives, for PRISM_DEBUG=2 listings: "arena+4096", "output 1", "input 3"...
  std::string where(ir::ValueId v) const;

 private:
  std::vector<ir::ValueId> steps_;
  std::vector<int> step_of_;
  std::vector<Slot> slots_;
  std::vector<int> donated_output_;
  std::vector<std::pair<int, ir::ValueId>> final_copies_;
  int constants_ = 0;
  int64_t arena_bytes_ = 0;
};

}  // namespace prism::compiler
