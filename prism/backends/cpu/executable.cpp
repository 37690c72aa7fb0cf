// The CPU executable: the compiler's schedule (prism/compiler/schedule.h) run as fused
// elementwise loops and kernels over one arena planned at compile time. Outputs are written
// straight into their own buffers, or into the memory of the donated input they replace.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/elementwise.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/schedule.h"
#include "prism/core/error.h"

namespace prism::cpu {

using compiler::Storage;
using ir::Op;
using ir::ValueId;

namespace {

struct Step {
  ValueId value;
  std::vector<ValueId> reads;
  Kernel kernel;                       // or
  std::unique_ptr<FusedKernel> fused;  // a fused elementwise loop
};

class CpuExecutable : public ExecutableImpl {
 public:
  CpuExecutable(CpuPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : platform_(platform),
        graph_(graph),
        plan_(compiler::fuse_elementwise(graph_)),
        schedule_(graph_, plan_) {
    std::vector<std::vector<ValueId>> reads;
    for (ValueId v : schedule_.steps()) {
      Step& step = steps_.emplace_back(Step{v, {}, nullptr, nullptr});
      if (ir::is_elementwise(graph_.node(v).op)) {
        step.fused = std::make_unique<FusedKernel>(graph_, plan_, plan_.groups[plan_.group_of[v]]);
        step.reads = step.fused->sources();
      } else {
        step.kernel = make_kernel(graph_, v);
        step.reads = graph_.node(v).inputs;
      }
      reads.push_back(step.reads);
    }
    schedule_.place(graph_, reads, spec.donated_inputs);
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) print_schedule();
  }

  std::vector<Buffer> call(std::span<const Buffer> params,
                           std::span<const Buffer> inputs) override {
    std::lock_guard lock(mutex_);
    const int64_t arena_bytes = schedule_.arena_bytes();
    if (!arena_.valid() && arena_bytes > 0) {
      arena_ = platform_.allocate_uninitialized(Shape(DType::u8, {{"arena", arena_bytes}}));
    }
    std::vector<Buffer> outputs = schedule_.output_buffers(
        graph_, inputs, &platform_,
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
    for (const Step& step : steps_) {
      args.clear();
      for (ValueId r : step.reads) args.push_back(ptr[r]);
      if (step.fused) {
        step.fused->run(args, ptr[step.value], platform_.pool());
      } else {
        step.kernel(args, ptr[step.value], platform_.pool());
      }
    }
    for (auto [k, v] : schedule_.final_copies()) {
      std::memcpy(data_of(outputs[k]), ptr[v], graph_.node(v).shape.bytes());
    }
    return outputs;
  }

 private:
  // PRISM_DEBUG=2: every step with its kernel or fused program, and the arena size.
  void print_schedule() const {
    std::fprintf(stderr, "--- cpu schedule (%zu steps, arena %ld bytes)\n", steps_.size(),
                 static_cast<long>(schedule_.arena_bytes()));
    for (const Step& step : steps_) {
      std::string where = schedule_.where(step.value);
      if (step.fused) {
        std::fprintf(stderr, "%%%d [%s] fused: %s\n", step.value, where.c_str(),
                     step.fused->describe().c_str());
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
  Buffer arena_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_cpu_executable(CpuPlatform& platform, const ir::Graph& graph,
                                                    const CompileSpec& spec) {
  return std::make_unique<CpuExecutable>(platform, graph, spec);
}

}  // namespace prism::cpu
