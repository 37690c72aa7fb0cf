// The CPU executable: a schedule of steps (fused elementwise loops and kernels) over one arena
// planned at compile time. Outputs are written straight into their own buffers; a donated
// input updated by dynamic_update_slice is updated in place and returned as the output.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/elementwise.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/compiler/fusion.h"
#include "prism/core/error.h"

namespace prism::cpu {

using ir::Op;
using ir::ValueId;

namespace {

enum class Storage : uint8_t { none, parameter, input, constant, arena, output, alias };

struct Slot {
  Storage kind = Storage::none;
  int index = 0;       // parameter, input or output position
  int64_t offset = 0;  // arena offset
  ValueId alias = -1;  // for aliases: the value whose memory this is
};

struct Step {
  ValueId value;
  std::vector<ValueId> reads;
  Kernel kernel;                       // or
  std::unique_ptr<FusedKernel> fused;  // a fused elementwise loop
};

class CpuExecutable : public ExecutableImpl {
 public:
  CpuExecutable(CpuPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : platform_(platform), graph_(graph) {
    plan_ = compiler::fuse_elementwise(graph_);
    schedule();
    assign_storage(spec);
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) print_schedule();
  }

  std::vector<Buffer> call(std::span<const Buffer> params,
                           std::span<const Buffer> inputs) override {
    std::lock_guard lock(mutex_);
    if (!arena_.valid() && arena_bytes_ > 0) {
      arena_ = platform_.allocate_uninitialized(Shape(DType::u8, {{"arena", arena_bytes_}}));
    }
    std::vector<Buffer> outputs(graph_.outputs().size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Shape& shape = graph_.node(graph_.outputs()[k]).shape;
      outputs[k] = donated_output_[k] >= 0
                       ? Buffer(shape, inputs[donated_output_[k]].shared_memory(), &platform_)
                       : platform_.allocate_uninitialized(shape);
    }
    std::vector<std::byte*> ptr(graph_.size(), nullptr);
    for (ValueId v = 0; v < graph_.size(); ++v) {
      const Slot& s = slots_[v];
      switch (s.kind) {
        case Storage::none:
          break;
        case Storage::parameter:
          ptr[v] = data_of(params[s.index]);
          break;
        case Storage::input:
          ptr[v] = data_of(inputs[s.index]);
          break;
        case Storage::constant:
          ptr[v] = const_cast<std::byte*>(graph_.node(v).attr<ir::ConstantAttrs>().data->data());
          break;
        case Storage::arena:
          // A graph whose intermediates are all empty has no arena.
          ptr[v] = arena_.valid() ? data_of(arena_) + s.offset : nullptr;
          break;
        case Storage::output:
          ptr[v] = data_of(outputs[s.index]);
          break;
        case Storage::alias:
          ptr[v] = ptr[s.alias];
          break;
      }
    }
    std::vector<const std::byte*> args;
    for (const Step& step : steps_) {
      args.clear();
      for (ValueId r : step.reads) args.push_back(ptr[r]);
      if (step.fused) {
        step.fused->run(args, ptr[step.value], platform_.pool());
      } else {
        step.kernel(args, ptr[step.value], platform_.pool());
      }
    }
    for (auto [k, v] : final_copies_) {
      std::memcpy(data_of(outputs[k]), ptr[v], graph_.node(v).shape.bytes());
    }
    return outputs;
  }

 private:
  ValueId root(ValueId v) const {
    while (slots_[v].kind == Storage::alias) v = slots_[v].alias;
    return v;
  }

  // PRISM_DEBUG=2: every step with its kernel or fused program, and the arena size.
  void print_schedule() const {
    std::fprintf(stderr, "--- cpu schedule (%zu steps, arena %ld bytes)\n", steps_.size(),
                 arena_bytes_);
    for (const Step& step : steps_) {
      std::string where = slots_[step.value].kind == Storage::output ? "output" : "arena";
      if (step.fused) {
        std::fprintf(stderr, "%%%d [%s] fused: %s\n", step.value, where.c_str(),
                     step.fused->describe().c_str());
      } else {
        std::fprintf(stderr, "%%%d [%s] %s\n", step.value, where.c_str(),
                     ir::print(graph_, step.value).c_str());
      }
    }
  }

  void schedule() {
    slots_.resize(graph_.size());
    step_of_.assign(graph_.size(), -1);
    int parameters = 0;  // in the order of Graph::parameters()
    for (ValueId id = 0; id < graph_.size(); ++id) {
      const ir::Node& n = graph_.node(id);
      Slot& slot = slots_[id];
      switch (n.op) {
        case Op::parameter:
          slot.kind = Storage::parameter;
          slot.index = parameters++;
          continue;
        case Op::input:
          slot.kind = Storage::input;
          slot.index = n.attr<ir::InputAttrs>().index;
          continue;
        case Op::constant:
          slot.kind = Storage::constant;
          continue;
        case Op::reshape:
          slot.kind = Storage::alias;
          slot.alias = n.inputs[0];
          continue;
        default:
          break;
      }
      if (plan_.virtual_broadcast[id]) continue;
      Step step{id, {}, nullptr, nullptr};
      if (ir::is_elementwise(n.op)) {
        int g = plan_.group_of[id];
        if (plan_.groups[g].root != id) continue;  // computed inside its group's loop
        step.fused = std::make_unique<FusedKernel>(graph_, plan_, plan_.groups[g]);
        step.reads = step.fused->sources();
      } else {
        step.kernel = make_kernel(graph_, id);
        step.reads = n.inputs;
      }
      slot.kind = Storage::arena;  // until assign_storage decides
      step_of_[id] = static_cast<int>(steps_.size());
      steps_.push_back(std::move(step));
    }
  }

  void assign_storage(const CompileSpec& spec) {
    int end = static_cast<int>(steps_.size());
    std::vector<int> last_use(graph_.size(), -1);
    for (int s = 0; s < end; ++s) {
      for (ValueId r : steps_[s].reads) last_use[root(r)] = std::max(last_use[root(r)], s);
    }
    for (ValueId out : graph_.outputs()) last_use[root(out)] = end;

    // Outputs computed by a step write into their output buffer.
    donated_output_.assign(graph_.outputs().size(), -1);
    for (size_t k = 0; k < graph_.outputs().size(); ++k) {
      ValueId v = graph_.outputs()[k];
      if (slots_[v].kind != Storage::arena) {
        final_copies_.emplace_back(static_cast<int>(k), v);
        continue;
      }
      slots_[v].kind = Storage::output;
      slots_[v].index = static_cast<int>(k);
      // A donated input updated in place: the output is the input's memory.
      const ir::Node& n = graph_.node(v);
      if (n.op != Op::dynamic_update_slice) continue;
      ValueId operand = root(n.inputs[0]);
      const Slot& os = slots_[operand];
      bool donated = os.kind == Storage::input &&
                     std::find(spec.donated_inputs.begin(), spec.donated_inputs.end(), os.index) !=
                         spec.donated_inputs.end();
      if (donated && last_use[operand] == step_of_[v] &&
          graph_.node(operand).shape.bytes() == n.shape.bytes() &&
          std::find(donated_output_.begin(), donated_output_.end(), os.index) ==
              donated_output_.end()) {
        slots_[v] = Slot{Storage::input, os.index};
        donated_output_[k] = os.index;
      }
    }

    // Everything else lives in the arena, reusing dead values' space.
    std::vector<compiler::Lifetime> lifetimes(graph_.size());
    for (ValueId v = 0; v < graph_.size(); ++v) {
      if (slots_[v].kind != Storage::arena) continue;
      compiler::Lifetime& l = lifetimes[v];
      l.bytes = graph_.node(v).shape.bytes();
      l.first_step = step_of_[v];
      l.last_step = std::max(last_use[v], l.first_step);
      const ir::Node& n = graph_.node(v);
      if (n.op == Op::dynamic_update_slice || n.op == Op::scatter) {  // may run in place
        ValueId operand = root(n.inputs[0]);
        if (slots_[operand].kind == Storage::arena && last_use[operand] == step_of_[v]) {
          l.reuse_value = operand;
        }
      }
    }
    std::vector<int64_t> offsets = compiler::plan_memory(lifetimes, &arena_bytes_);
    for (ValueId v = 0; v < graph_.size(); ++v) {
      if (slots_[v].kind == Storage::arena) slots_[v].offset = offsets[v];
    }
  }

  CpuPlatform& platform_;
  ir::Graph graph_;
  compiler::FusionPlan plan_;
  std::vector<Step> steps_;
  std::vector<Slot> slots_;
  std::vector<int> step_of_;
  std::vector<int> donated_output_;                    // per output: the donated input, or -1
  std::vector<std::pair<int, ValueId>> final_copies_;  // outputs that are leaves or aliases
  int64_t arena_bytes_ = 0;
  Buffer arena_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_cpu_executable(CpuPlatform& platform, const ir::Graph& graph,
                                                    const CompileSpec& spec) {
  return std::make_unique<CpuExecutable>(platform, graph, spec);
}

}  // namespace prism::cpu
