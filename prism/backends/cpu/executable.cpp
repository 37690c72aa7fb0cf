// The CPU executable: the compiler's schedule (prism/compiler/schedule.h) run as fused
// elementwise loops and kernels over one arena planned at compile time. Outputs are written
// straight into their own buffers, or into the memory of the donated input they replace.
// PRISM_PROFILE=1 times every step and prints where the time went when the executable is freed
// or the program exits.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/elementwise.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/schedule.h"
#include "prism/core/error.h"
#include "prism/runtime/outputs.h"

namespace prism::cpu {

using compiler::Storage;
using ir::Op;
using ir::ValueId;

namespace {

struct Step {
  ValueId value;
  std::vector<ValueId> reads;
  Kernel kernel;                       // or
  std::unique_ptr<FusedKernel> fused;  // a fused elementwise loop, or
  GroupKernel group;                   // the nodes of `writes` at once (`value` is the last)
  std::vector<ValueId> writes;
  bool merged = false;  // run by a later step's group
};

// The elementwise fusion, and the dequantize nodes whose products read their blocks
// (kernels_quant.cpp).
compiler::FusionPlan plan_steps(const ir::Graph& graph) {
  compiler::FusionPlan plan = compiler::fuse_elementwise(graph);
  plan.folded = folded_dequantizes(graph);
  return plan;
}

class CpuExecutable : public ExecutableImpl {
 public:
  CpuExecutable(CpuPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : platform_(platform), graph_(graph), plan_(plan_steps(graph_)), schedule_(graph_, plan_) {
    schedule_.cluster_products(graph_);  // siblings next to each other: see group_products()
    std::vector<std::vector<ValueId>> reads;
    for (ValueId v : schedule_.steps()) {
      Step& step = steps_.emplace_back(Step{v, {}, nullptr, nullptr, nullptr, {}, false});
      if (ir::is_elementwise(graph_.node(v).op)) {
        step.fused = std::make_unique<FusedKernel>(graph_, plan_, plan_.groups[plan_.group_of[v]]);
        step.reads = step.fused->sources();
      } else {
        step.kernel =
            make_collective_kernel(graph_, v, platform_.communicator(), platform_.mesh_device());
        const ir::Node& n = graph_.node(v);
        if (!step.kernel && n.op == Op::dot && plan_.folded[n.inputs[1]]) {
          step.kernel = make_quant_dot_kernel(graph_, v);  // reads the weights' blocks
        }
        if (!step.kernel) step.kernel = make_kernel(graph_, v);
        step.reads = graph_.node(v).inputs;
      }
      reads.push_back(step.reads);
    }
    schedule_.place(graph_, reads, spec.donated_inputs);
    group_products();
    find_blockable_weights();
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) print_schedule();
    const char* profile = std::getenv("PRISM_PROFILE");
    if (profile && std::atoi(profile) >= 1) {
      profile_all_ = std::atoi(profile) >= 2;
      step_ns_.assign(steps_.size(), 0);
      profiled().add(this);
    }
  }

  ~CpuExecutable() override {
    if (!step_ns_.empty()) profiled().remove(this);
  }

  // The parameters only products read, in the layout they read fastest (weight_layout.h): in
  // place where `params` holds the only reference (nobody else can be reading it), else in a
  // copy. The others, and what is already in a layout of its own, as they are.
  std::vector<Buffer> prepare(std::vector<Buffer> params) override {
    for (size_t i = 0; i < params.size(); ++i) {
      auto* m = static_cast<CpuMemory*>(params[i].memory());
      const Shape shape = params[i].shape();
      const WeightLayout want = param_layouts_[i];
      // Memory not the buffer's own (a mapped file, --map-weights) stays where it is.
      if (want == WeightLayout::stored || !m->writable || m->layout != WeightLayout::stored) {
        continue;
      }
      if (params[i].shared_memory().use_count() > 1) {
        params[i] = platform_.allocate_uninitialized(shape);
      }
      auto* to = static_cast<CpuMemory*>(params[i].memory());
      copy_weights(want, m->data, to->data, shape.size(0), shape.size(1), true, platform_.pool());
      to->layout = want;
    }
    return params;
  }

  std::vector<Buffer> call(std::span<const Buffer> given_params,
                           std::span<const Buffer> given_inputs) override {
    std::lock_guard lock(mutex_);
    // Blocked weights this executable reads other than by products, as stored for this call.
    std::vector<Buffer> plain_params, plain_inputs;
    std::span<const Buffer> params = as_read(given_params, param_layouts_, plain_params);
    std::span<const Buffer> inputs = as_read(given_inputs, {}, plain_inputs);
    std::vector<const std::byte*> blocked;
    std::vector<WeightLayout> layouts;
    for (const Buffer& b : params) {
      if (!blocked_memory(b)) continue;
      blocked.push_back(data_of(b));
      layouts.push_back(layout_of(b));
    }
    BlockedWeights blocked_in_this_call(blocked, layouts);
    const int64_t arena_bytes = schedule_.arena_bytes();
    if (!arena_.valid() && arena_bytes > 0) {
      arena_ = platform_.allocate_uninitialized(Shape(DType::u8, {{"arena", arena_bytes}}));
    }
    std::vector<Buffer> outputs =
        output_buffers(schedule_, graph_, inputs, &platform_,
                       [&](const Shape& s) { return platform_.allocate_uninitialized(s); });
    std::vector<std::byte*> ptr =
        schedule_.addresses<std::byte*>([&](const compiler::Slot& s, ValueId v) -> std::byte* {
          switch (s.kind) {
            case Storage::parameter:
              return data_of(params[s.index]);
            case Storage::input:
              return data_of(inputs[s.index]);
            case Storage::constant:
              return const_cast<std::byte*>(graph_.node(v).attr<ir::ConstantAttrs>().data->data());
            case Storage::arena:  // a graph whose intermediates are all empty has no arena
              return arena_.valid() ? data_of(arena_) + s.offset : nullptr;
            case Storage::output:
              return data_of(outputs[s.index]);
            default:
              return nullptr;
          }
        });
    std::vector<const std::byte*> args;
    std::vector<std::byte*> outs;
    const bool profiling = !step_ns_.empty();
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& step = steps_[i];
      if (step.merged) continue;
      args.clear();
      for (ValueId r : step.reads) args.push_back(ptr[r]);
      const auto start = profiling ? Clock::now() : Clock::time_point{};
      if (step.fused) {
        step.fused->run(args, ptr[step.value], platform_.pool());
      } else if (step.group) {
        outs.clear();
        for (ValueId w : step.writes) outs.push_back(ptr[w]);
        step.group(args, outs, platform_.pool());
      } else {
        step.kernel(args, ptr[step.value], platform_.pool());
      }
      if (profiling) step_ns_[i] += (Clock::now() - start).count();
    }
    ++calls_;
    for (auto [k, v] : schedule_.final_copies()) {
      std::memcpy(data_of(outputs[k]), ptr[v], graph_.node(v).shape.bytes());
    }
    return outputs;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // The parameters that only products (and lookups of their rows) read, and the layout each
  // is read in (weight_layout.h): bf16 weights {n, k} blocked; weights in Q4_0, Q8_0 or K-quant
  // blocks (u8 {n, row_bytes}, read through dequantizes that the products fold) interleaved,
  // where those products multiply 8-bit activations (int8_activations). prepare() makes such
  // copies.
  void find_blockable_weights() {
    std::vector<WeightLayout> layout(graph_.size(), WeightLayout::stored);
    for (ValueId v = 0; v < static_cast<ValueId>(graph_.size()); ++v) {
      const ir::Node& n = graph_.node(v);
      if (n.op == Op::parameter && cpu::blockable(n.shape)) layout[v] = WeightLayout::bf16_blocks;
      if (n.op != Op::dequantize || graph_.node(n.inputs[0]).op != Op::parameter) continue;
      const quant::GgmlType format = n.attr<ir::DequantizeAttrs>().format;
      const ValueId w = n.inputs[0];
      if (interleavable(format, graph_.node(w).shape) && int8_activations(format)) {
        layout[w] = *interleaved_layout(format);
      }
    }
    for (ValueId v = 0; v < static_cast<ValueId>(graph_.size()); ++v) {
      const ir::Node& n = graph_.node(v);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const ValueId in = n.inputs[i];
        if (layout[in] == WeightLayout::stored) continue;
        bool reads = false;
        if (layout[in] == WeightLayout::bf16_blocks) {
          const bool product = n.op == Op::dot && i == 1 && n.inputs[0] != in &&
                               dot_reads_blockable_weights(graph_, v);
          // a lookup of rows (a tied embedding's) reads the blocked layout too
          reads = product || (i == 0 && gather_reads_blockable_weights(graph_, n));
        } else {
          // the products of a folded dequantize of the same format read the blocks in place;
          // a lookup of rows (of an embedding, before its dequantize) takes them from groups
          reads = (n.op == Op::dequantize && plan_.folded[v] &&
                   interleaved_layout(n.attr<ir::DequantizeAttrs>().format) == layout[in]) ||
                  (i == 0 && gather_reads_blockable_weights(graph_, n));
        }
        if (!reads) layout[in] = WeightLayout::stored;
      }
    }
    for (ValueId out : graph_.outputs()) layout[out] = WeightLayout::stored;
    param_layouts_.assign(graph_.parameters().size(), WeightLayout::stored);
    for (ValueId v = 0; v < static_cast<ValueId>(graph_.size()); ++v) {
      if (layout[v] != WeightLayout::stored) {
        param_layouts_[schedule_.slot(v).index] = layout[v];  // a parameter's slot
      }
    }
  }

  // `buffers` as this call reads them: one in a layout of its own that `readable` (by position)
  // does not name is replaced by a copy as stored, kept in `copies`.
  std::span<const Buffer> as_read(std::span<const Buffer> buffers,
                                  const std::vector<WeightLayout>& readable,
                                  std::vector<Buffer>& copies) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const WeightLayout layout = layout_of(buffers[i]);
      if (layout == WeightLayout::stored || (i < readable.size() && readable[i] == layout)) {
        continue;
      }
      if (copies.empty()) copies.assign(buffers.begin(), buffers.end());
      const Shape& shape = buffers[i].shape();
      copies[i] = platform_.allocate_uninitialized(shape);
      copy_weights(layout, data_of(buffers[i]), data_of(copies[i]), shape.size(0), shape.size(1),
                   false, platform_.pool());
    }
    return copies.empty() ? buffers : std::span<const Buffer>(copies);
  }

  // Dot products of the same activations by weights in consecutive steps (a layer's q, k
  // and v projections; its gate and up ones) run as one step, at the last of them. That
  // changes only when the earlier ones are computed: no step between reads what they write,
  // what they read is still there (the shared activations are read by the last one too, the
  // weights are parameters or constants), and what they write was placed from their own step on.
  void group_products() {
    auto product = [&](size_t i) { return schedule_.product_by_weights(graph_, steps_[i].value); };
    for (size_t i = 0; i < steps_.size();) {
      size_t j = i + 1;
      if (product(i)) {
        const ValueId lhs = graph_.node(steps_[i].value).inputs[0];
        while (j < steps_.size() && product(j) && graph_.node(steps_[j].value).inputs[0] == lhs) {
          ++j;
        }
      }
      if (j - i >= 2) {
        std::vector<ValueId> ids;
        for (size_t k = i; k < j; ++k) ids.push_back(steps_[k].value);
        GroupKernel group = make_dot_group_kernel(graph_, ids);
        bool folded = true;  // products that read their weights' blocks (kernels_quant.cpp)
        for (ValueId id : ids) folded = folded && plan_.folded[graph_.node(id).inputs[1]];
        if (!group && folded) group = make_quant_dot_group_kernel(graph_, ids);
        if (group) {
          Step& last = steps_[j - 1];
          last.group = std::move(group);
          last.kernel = nullptr;
          last.writes = ids;
          last.reads = {graph_.node(ids[0]).inputs[0]};
          for (ValueId id : ids) last.reads.push_back(graph_.node(id).inputs[1]);
          for (size_t k = i; k + 1 < j; ++k) {
            steps_[k].merged = true;
            steps_[k].kernel = nullptr;  // the group has its own
          }
        }
      }
      i = j;
    }
  }

  // The executables being profiled. Platforms (and the executables they cache) live until the
  // program ends, so profiles are printed at exit, or when an executable is freed before.
  class Profiled {
   public:
    void add(CpuExecutable* e) {
      std::lock_guard lock(mutex_);
      if (live_.empty() && !registered_) {
        registered_ = true;
        std::atexit([] { profiled().print_all(); });
      }
      live_.push_back(e);
    }
    void remove(CpuExecutable* e) {
      std::lock_guard lock(mutex_);
      std::erase(live_, e);
      e->print_profile();
    }
    void print_all() {
      std::lock_guard lock(mutex_);
      for (CpuExecutable* e : live_) e->print_profile();
      live_.clear();
    }

   private:
    std::mutex mutex_;
    std::vector<CpuExecutable*> live_;
    bool registered_ = false;
  };
  static Profiled& profiled() {
    static Profiled& p = *new Profiled;  // outlives every executable
    return p;
  }

  // PRISM_PROFILE=1: the time per call, by kind of step (the op, or the fused loop, with the
  // shapes it reads and writes), largest first, down to 99 % of the total (PRISM_PROFILE=2: all).
  void print_profile() const {
    if (calls_ == 0) return;
    std::map<std::string, std::pair<int64_t, int>> by_kind;  // label -> (ns, steps)
    int64_t total = 0;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& step = steps_[i];
      const ir::Node& node = graph_.node(step.value);
      if (step.merged) continue;
      std::string label;
      if (step.group) {
        label = fmt::format("{} {}s", step.writes.size(), ir::op_name(node.op));
        for (ValueId w : step.writes) label += fmt::format(" {}", graph_.node(w).shape.str());
      } else {
        label = fmt::format("{} {}", step.fused ? "fused" : ir::op_name(node.op), node.shape.str());
      }
      label += " <-";
      for (ValueId r : step.reads) label += fmt::format(" {}", graph_.node(r).shape.str());
      auto& [ns, count] = by_kind[label];
      ns += step_ns_[i];
      count += 1;
      total += step_ns_[i];
    }
    std::vector<std::pair<int64_t, std::pair<std::string, int>>> rows;
    for (auto& [label, v] : by_kind) rows.push_back({v.first, {label, v.second}});
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::string first_input = "no inputs";
    if (auto in = graph_.inputs(); !in.empty()) first_input = graph_.node(in[0]).shape.str();
    std::fprintf(stderr, "--- cpu profile (first input %s): %ld calls, %.3f ms a call, %zu steps\n",
                 first_input.c_str(), static_cast<long>(calls_), total / 1e6 / calls_,
                 steps_.size());
    int64_t shown = 0;
    for (auto& [ns, rest] : rows) {
      if (shown >= total * 0.99 && !profile_all_) break;
      shown += ns;
      std::fprintf(stderr, "%9.3f ms %5.1f %% %4dx %s\n", ns / 1e6 / calls_, 100.0 * ns / total,
                   rest.second, rest.first.c_str());
    }
  }

  // PRISM_DEBUG=2: every step with its kernel or fused program, and the arena size.
  void print_schedule() const {
    std::fprintf(stderr, "--- cpu schedule (%zu steps, arena %ld bytes)\n", steps_.size(),
                 static_cast<long>(schedule_.arena_bytes()));
    for (const Step& step : steps_) {
      std::string where = schedule_.where(step.value);
      if (step.fused) {
        std::fprintf(stderr, "%%%d [%s] fused: %s\n", step.value, where.c_str(),
                     step.fused->describe().c_str());
      } else if (step.merged) {
        std::fprintf(stderr, "%%%d [%s] %s (run with a later step)\n", step.value, where.c_str(),
                     ir::print(graph_, step.value).c_str());
      } else if (step.group) {
        std::fprintf(stderr, "%%%d [%s] %s (and the products before it, in one loop)\n", step.value,
                     where.c_str(), ir::print(graph_, step.value).c_str());
      } else {
        std::fprintf(stderr, "%%%d [%s] %s\n", step.value, where.c_str(),
                     ir::print(graph_, step.value).c_str());
      }
    }
  }

  CpuPlatform& platform_;
  ir::Graph graph_;
  compiler::FusionPlan plan_;
  compiler::Schedule schedule_;
  std::vector<Step> steps_;
  std::vector<WeightLayout> param_layouts_;  // by parameter index (weight_layout.h)
  Buffer arena_;
  std::mutex mutex_;
  std::vector<int64_t> step_ns_;  // per step, summed over calls; empty unless PRISM_PROFILE
  bool profile_all_ = false;      // PRISM_PROFILE=2: every kind of step, not the top 99 %
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_cpu_executable(CpuPlatform& platform, const ir::Graph& graph,
                                                    const CompileSpec& spec) {
  return std::make_unique<CpuExecutable>(platform, graph, spec);
}

}  // namespace prism::cpu
