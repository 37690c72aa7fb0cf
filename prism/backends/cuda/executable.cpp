// The CUDA executable: the compiler's schedule (prism/compiler/schedule.h: fusion groups and
// one step per other op, outputs written in place into their buffers, one arena for
// intermediates, donated inputs reused), with every step's kernels generated as CUDA C and compiled
// in one NVRTC call, and matrix products run by cuBLASLt. A call enqueues every step on the
// platform's stream and waits for it once at the end.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "prism/backends/cuda/codegen.h"
#include "prism/backends/cuda/cuda_platform.h"
#include "prism/backends/cuda/matmul.h"
#include "prism/backends/cuda/nvrtc_compiler.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/compiler/schedule.h"
#include "prism/core/error.h"
#include "prism/runtime/outputs.h"

namespace prism::cuda {

using compiler::Storage;
using ir::Op;
using ir::ValueId;

namespace {

struct Step {
  ValueId value;
  std::vector<ValueId> reads;
  std::vector<KernelCode> kernels;
  std::vector<CUfunction> functions;
  std::unique_ptr<Matmul> matmul;  // a cuBLASLt product instead of kernels
};

class CudaExecutable : public ExecutableImpl {
 public:
  CudaExecutable(CudaPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : platform_(platform),
        graph_(graph),
        plan_(kernel::plan_steps(graph_)),
        schedule_(graph_, plan_) {
    for (ValueId id = 0; id < graph_.size(); ++id) {
      const ir::Node& n = graph_.node(id);
      if (n.op != Op::constant) continue;
      constants_.push_back(platform_.upload(
          HostBuffer(n.shape, std::span<const std::byte>(*n.attr<ir::ConstantAttrs>().data))));
    }
    std::vector<std::vector<ValueId>> reads;
    for (ValueId id : schedule_.steps()) {
      const ir::Node& n = graph_.node(id);
      Step& step = steps_.emplace_back(Step{id, step_reads(graph_, plan_, id), {}, {}, nullptr});
      std::optional<MatmulShape> mm;
      if (n.op == Op::dot && !kernel::reads_folded(plan_, n) && platform_.cublaslt_handle())
        mm = plan_matmul(graph_, n);
      if (mm) {
        step.matmul = std::make_unique<Matmul>(*mm, platform_.cublaslt_handle(),
                                               CudaPlatform::kWorkspaceBytes);
      } else {
        step.kernels = generate(graph_, plan_, id, fmt::format("k{}", id));
      }
      reads.push_back(step.reads);
    }
    // 256-byte alignment: what cuBLASLt's fastest kernels and vector loads assume.
    schedule_.place(graph_, reads, spec.donated_inputs, 256);
    build();
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) print_schedule();
  }

  ~CudaExecutable() override {
    graphs_.clear();  // before the module their kernels live in
    const auto& drv = driver_library();
    if (module_ && drv.ok) drv.api.cuModuleUnload(module_);
  }

  std::vector<Buffer> call(std::span<const Buffer> params,
                           std::span<const Buffer> inputs) override {
    std::lock_guard lock(mutex_);
    platform_.bind();
    const DriverApi& drv = driver();
    CUstream stream = platform_.stream();
    const int64_t arena_bytes = schedule_.arena_bytes();
    if (!arena_ && arena_bytes > 0) arena_ = platform_.raw_allocate(arena_bytes);
    std::vector<Buffer> outputs =
        output_buffers(schedule_, graph_, inputs, &platform_,
                       [&](const Shape& s) { return platform_.allocate_for_write(s); });
    std::vector<CUdeviceptr> ptr =
        schedule_.addresses<CUdeviceptr>([&](const compiler::Slot& s, ValueId) -> CUdeviceptr {
          switch (s.kind) {
            case Storage::parameter:
              return device_ptr(params[s.index]);
            case Storage::input:
              return device_ptr(inputs[s.index]);
            case Storage::constant:
              return device_ptr(constants_[s.index]);
            case Storage::arena:
              return arena_ && s.offset >= 0 ? arena_->ptr + s.offset : 0;
            case Storage::output:
              return device_ptr(outputs[s.index]);
            default:
              return 0;
          }
        });
    std::vector<CUdeviceptr> outs;
    for (const Buffer& b : outputs) outs.push_back(device_ptr(b));
    if (!run_graph(ptr, outs)) enqueue(ptr, outs);
    check(drv.cuStreamSynchronize(stream), "running the executable (cuStreamSynchronize)");
    return outputs;
  }

 private:
  // Enqueues every step on the stream: kernels, cuBLASLt products, copies of outputs that no
  // step computes.
  void enqueue(const std::vector<CUdeviceptr>& ptr, const std::vector<CUdeviceptr>& outs) const {
    const DriverApi& drv = driver();
    CUstream stream = platform_.stream();
    std::vector<CUdeviceptr> args;
    std::vector<void*> arg_ptrs;
    for (const Step& step : steps_) {
      CUdeviceptr out = ptr[step.value];
      args.assign(1, out);
      for (ValueId r : step.reads) args.push_back(ptr[r]);
      if (step.matmul) {
        const MatmulShape& m = step.matmul->shape();
        if (m.batch * m.m * m.n == 0) continue;
        if (m.k == 0) {
          check(drv.cuMemsetD8Async(out, 0, graph_.node(step.value).shape.bytes(), stream),
                "cuMemsetD8Async");
          continue;
        }
        step.matmul->run(args[1], args[2], out, platform_.workspace(), stream);
        continue;
      }
      bool in_place = !step.reads.empty() && out == ptr[step.reads[0]];
      for (size_t k = 0; k < step.kernels.size(); ++k) {
        const KernelCode& code = step.kernels[k];
        if (code.work == 0) continue;
        if (code.when == InPlace::when_not_in_place && in_place) continue;
        arg_ptrs.clear();
        for (CUdeviceptr& a : args) arg_ptrs.push_back(&a);
        Launch l = launch_for(code);
        check(drv.cuLaunchKernel(step.functions[k], static_cast<unsigned>(l.grid), 1, 1,
                                 static_cast<unsigned>(l.block), 1, 1, 0, stream, arg_ptrs.data(),
                                 nullptr),
              code.name.c_str());
      }
    }
    for (auto [k, v] : schedule_.final_copies()) {
      size_t bytes = static_cast<size_t>(graph_.node(v).shape.bytes());
      if (bytes) {
        check(drv.cuMemcpyDtoDAsync_v2(outs[k], ptr[v], bytes, stream), "cuMemcpyDtoDAsync");
      }
    }
  }

  // CUDA graphs: a program of many small steps (a decode step) costs more in launches than in
  // work. A graph bakes in the pointers its launches were captured with, so graphs are kept
  // per set of pointers, and a set is captured only when it comes back (a decode loop reuses
  // the same cached blocks): programs whose buffers change every call never pay for capture.
  // PRISM_CUDA_GRAPHS=0 turns them off. Returns false when the steps must be enqueued.
  bool run_graph(const std::vector<CUdeviceptr>& ptr, const std::vector<CUdeviceptr>& outs) {
    static const bool enabled = [] {
      const char* e = std::getenv("PRISM_CUDA_GRAPHS");
      return !(e && std::string(e) == "0");
    }();
    if (!enabled || graphs_failed_ || steps_.size() < kMinGraphSteps) return false;
    std::vector<CUdeviceptr> key = ptr;
    key.insert(key.end(), outs.begin(), outs.end());
    const DriverApi& drv = driver();
    CUstream stream = platform_.stream();
    for (GraphEntry& g : graphs_) {
      if (g.key != key) continue;
      g.last_use = ++clock_;
      if (!g.exec) {  // seen once before: capture it now
        CUgraph graph = nullptr;
        try {
          check(drv.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                "cuStreamBeginCapture");
          try {
            enqueue(ptr, outs);
          } catch (...) {
            drv.cuStreamEndCapture(stream, &graph);
            if (graph) drv.cuGraphDestroy(graph);
            throw;
          }
          check(drv.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
          CUresult r = drv.cuGraphInstantiateWithFlags(&g.exec, graph, 0);
          drv.cuGraphDestroy(graph);
          check(r, "cuGraphInstantiate");
        } catch (const Error& e) {
          // Run without graphs from now on; the steps themselves are still good.
          graphs_failed_ = true;
          const char* debug = std::getenv("PRISM_DEBUG");
          if (debug && std::atoi(debug) >= 1) {
            std::fprintf(stderr, "cuda: graphs disabled for this program: %s\n", e.what());
          }
          return false;
        }
      }
      check(drv.cuGraphLaunch(g.exec, stream), "cuGraphLaunch");
      return true;
    }
    // First sighting: remember it (evicting the least recently used) and run directly.
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.last_use < b.last_use;
      });
      graphs_.erase(lru);
    }
    graphs_.push_back(GraphEntry{std::move(key), nullptr, ++clock_});
    return false;
  }

  struct GraphEntry {
    std::vector<CUdeviceptr> key;
    CUgraphExec exec = nullptr;
    uint64_t last_use = 0;
    GraphEntry(std::vector<CUdeviceptr> k, CUgraphExec e, uint64_t t)
        : key(std::move(k)), exec(e), last_use(t) {}
    GraphEntry(GraphEntry&& o) noexcept
        : key(std::move(o.key)), exec(std::exchange(o.exec, nullptr)), last_use(o.last_use) {}
    GraphEntry& operator=(GraphEntry&& o) noexcept {
      std::swap(key, o.key);
      std::swap(exec, o.exec);
      last_use = o.last_use;
      return *this;
    }
    ~GraphEntry() {
      const auto& drv = driver_library();
      if (exec && drv.ok) drv.api.cuGraphExecDestroy(exec);
    }
  };
  static constexpr size_t kMinGraphSteps = 8;
  static constexpr size_t kMaxGraphs = 8;

  void print_schedule() const {
    std::fprintf(stderr, "--- cuda schedule (%zu steps, arena %ld bytes, %s)\n", steps_.size(),
                 static_cast<long>(schedule_.arena_bytes()), platform_.arch().c_str());
    for (const Step& step : steps_) {
      std::string what;
      if (step.matmul) {
        const MatmulShape& m = step.matmul->shape();
        what =
            fmt::format("cuBLASLt {} {}x{}x{} batch {}{}{}", name(m.dtype), m.m, m.n, m.k, m.batch,
                        m.lhs_transposed ? " lhsT" : "", m.rhs_transposed ? " rhsT" : "");
      } else {
        for (const KernelCode& k : step.kernels) what += k.name + " ";
      }
      std::fprintf(stderr, "%%%d %s <- %s\n", step.value, what.c_str(),
                   ir::print(graph_, step.value).c_str());
    }
  }

  // One NVRTC compile for every kernel of the executable (each distinct body once), then one
  // module.
  void build() {
    std::vector<const KernelCode*> kernels;
    for (const Step& step : steps_) {
      for (const KernelCode& k : step.kernels) kernels.push_back(&k);
    }
    if (kernels.empty()) return;
    std::vector<std::string> names;
    std::string cubin = compile_cuda(module_source(kernels, &names), platform_.arch());
    const DriverApi& drv = driver();
    check(drv.cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
    size_t next = 0;
    for (Step& step : steps_) {
      for (size_t k = 0; k < step.kernels.size(); ++k) {
        const std::string& name = names[next++];
        CUfunction f = nullptr;
        check(drv.cuModuleGetFunction(&f, module_, name.c_str()), name.c_str());
        step.functions.push_back(f);
      }
    }
  }

  CudaPlatform& platform_;
  ir::Graph graph_;
  compiler::FusionPlan plan_;
  compiler::Schedule schedule_;
  std::vector<Step> steps_;
  std::vector<Buffer> constants_;
  std::shared_ptr<CudaMemory> arena_;
  CUmodule module_ = nullptr;
  std::vector<GraphEntry> graphs_;
  uint64_t clock_ = 0;
  bool graphs_failed_ = false;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_cuda_executable(CudaPlatform& platform, const ir::Graph& graph,
                                                     const CompileSpec& spec) {
  return std::make_unique<CudaExecutable>(platform, graph, spec);
}

}  // namespace prism::cuda
