// The CUDA executable: the compiler's schedule (prism/compiler/schedule.h: fusion groups and
// one step per other op, outputs written in place into their buffers, one arena for
// intermediates, donated inputs reused), with every step's kernels generated as CUDA C and compiled
// in one NVRTC call, and matrix products run by cuBLASLt (those of few rows, as in decoding, by
// a kernel of our own: codegen.h's few_rows_product). A call enqueues every step on the
// platform's stream and waits for it once at the end.
//
// On a device of a mesh, collectives run through NCCL on the stream (inside CUDA graphs too)
// where the platform has NCCL communicators, else through host memory: the stream waited
// for, the operand read back, exchanged in the host communicator, the result written (such a
// program runs without graphs).
//
// PRISM_CUDA_PROFILE=1 times every step on the device (events around each, recorded inside
// the CUDA graph when the call runs as one, so launch gaps are not counted) and prints, when
// the executable is destroyed, where a call's device time went (docs/platforms.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "prism/backends/cuda/codegen.h"
#include "prism/backends/cuda/cuda_platform.h"
#include "prism/backends/cuda/matmul.h"
#include "prism/backends/cuda/nccl.h"
#include "prism/backends/cuda/nvrtc_compiler.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/compiler/schedule.h"
#include "prism/core/error.h"
#include "prism/runtime/collectives.h"
#include "prism/runtime/outputs.h"

namespace prism::cuda {

using compiler::Storage;
using ir::Op;
using ir::ValueId;

namespace {

// How a collective step runs (none: the step is kernels or a product).
enum class Collective : uint8_t { none, coordinate, copy, nccl, host };

struct Step {
  ValueId value;
  std::vector<ValueId> reads;
  std::vector<KernelCode> kernels;
  std::vector<CUfunction> functions;
  std::unique_ptr<Matmul> matmul;  // a cuBLASLt product instead of kernels
  Collective collective = Collective::none;
  // NCCL's blocks where they must be rearranged (nccl.h's block_copies) and the copies.
  std::shared_ptr<CudaMemory> scratch;
  std::vector<RowCopy> copies;
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
      if (kernel::lowering_of(n.op) == kernel::Lowering::collective) {
        Step& step = steps_.emplace_back(Step{id, n.inputs, {}, {}, nullptr});
        plan_collective(step);
        reads.push_back(step.reads);
        continue;
      }
      Step& step = steps_.emplace_back(Step{id, step_reads(graph_, plan_, id), {}, {}, nullptr});
      // Products of few rows (decoding) run in our kernel, others in cuBLASLt where it is.
      std::optional<MatmulShape> mm;
      std::optional<KernelCode> few_rows;
      if (n.op == Op::dot && !kernel::reads_folded(plan_, n)) mm = plan_matmul(graph_, n);
      if (mm) few_rows = few_rows_product(*mm, fmt::format("k{}", id));
      if (few_rows || !platform_.cublaslt_handle()) mm.reset();
      if (few_rows) {
        step.kernels = {std::move(*few_rows)};
      } else if (mm) {
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
    if (profile_calls_ > 0 && !steps_.empty()) print_profile();
    graphs_.clear();  // before the module their kernels live in
    const auto& drv = driver_library();
    if (!drv.ok) return;
    for (CUevent e : events_) drv.api.cuEventDestroy_v2(e);
    if (module_) drv.api.cuModuleUnload(module_);
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
    if (profiling() && events_.empty()) {
      events_.resize(steps_.size() + 1);
      for (CUevent& e : events_) check(drv.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    }
    const bool as_graph = run_graph(ptr, outs);
    if (!as_graph) enqueue(ptr, outs);
    check(drv.cuStreamSynchronize(stream), "running the executable (cuStreamSynchronize)");
    // A call enqueued step by step counts only where this program runs no graphs: its times
    // would hold the gaps between launches.
    if (!events_.empty() && !profile_failed_ && (as_graph || !runs_graphs())) {
      collect_profile(as_graph);
    }
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
    // Inside a capture an event is recorded only when marked external.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    auto mark = [&](size_t i) {
      if (events_.empty()) return;
      unsigned flags = capturing == CU_STREAM_CAPTURE_STATUS_ACTIVE ? CU_EVENT_RECORD_EXTERNAL : 0;
      check(drv.cuEventRecordWithFlags(events_[i], stream, flags), "cuEventRecord");
    };
    if (!events_.empty()) check(drv.cuStreamIsCapturing(stream, &capturing), "cuStreamIsCapturing");
    for (size_t i = 0; i < steps_.size(); ++i) {
      mark(i);
      const Step& step = steps_[i];
      CUdeviceptr out = ptr[step.value];
      if (step.collective != Collective::none) {
        enqueue_collective(step, ptr);
        continue;
      }
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
    mark(steps_.size());
    for (auto [k, v] : schedule_.final_copies()) {
      size_t bytes = static_cast<size_t>(graph_.node(v).shape.bytes());
      if (bytes) {
        check(drv.cuMemcpyDtoDAsync_v2(outs[k], ptr[v], bytes, stream), "cuMemcpyDtoDAsync");
      }
    }
  }

  // How collective step `step` runs: a mesh coordinate is written by a memset, a group of
  // one copies its operand, NCCL takes the others where the platform has its communicators
  // and carries the element type, host memory the rest.
  void plan_collective(Step& step) {
    const ir::Node& n = graph_.node(step.value);
    check_collective("cuda", graph_, step.value, platform_.communicator());
    const auto& c = n.attr<ir::CollectiveAttrs>();
    if (n.op == Op::mesh_coordinate) {
      step.collective = Collective::coordinate;
      return;
    }
    if (c.group == 1) {
      step.collective = Collective::copy;
      return;
    }
    if (!platform_.nccl() || !NcclMesh::carries(n.shape.dtype())) {
      step.collective = Collective::host;
      host_collectives_ = true;
      return;
    }
    step.collective = Collective::nccl;
    // Blocks gathered or scattered along an inner dimension are rearranged through scratch.
    if (n.op != Op::all_reduce) {
      const bool gather = n.op == Op::all_gather;
      const Shape& whole = gather ? n.shape : graph_.node(n.inputs[0]).shape;
      step.copies = block_copies(whole, c.axis, c.group, gather);
      if (!step.copies.empty()) {
        step.scratch = platform_.raw_allocate(static_cast<size_t>(whole.bytes()));
      }
    }
  }

  void enqueue_collective(const Step& step, const std::vector<CUdeviceptr>& ptr) const {
    const DriverApi& drv = driver();
    CUstream stream = platform_.stream();
    const ir::Node& n = graph_.node(step.value);
    const auto& c = n.attr<ir::CollectiveAttrs>();
    const CUdeviceptr out = ptr[step.value];
    const int64_t device = platform_.mesh_device();
    if (step.collective == Collective::coordinate) {
      const Communicator* comm = platform_.communicator();
      const auto at =
          static_cast<unsigned>(comm ? comm->mesh().coordinate(device, c.mesh_axis) : 0);
      check(drv.cuMemsetD32Async(out, at, 1, stream), "cuMemsetD32Async (mesh coordinate)");
      return;
    }
    const CUdeviceptr in = ptr[n.inputs[0]];
    const Shape& operand = graph_.node(n.inputs[0]).shape;
    if (step.collective == Collective::copy) {
      if (in != out && operand.bytes() > 0) {
        check(drv.cuMemcpyDtoDAsync_v2(out, in, operand.bytes(), stream), "cuMemcpyDtoDAsync");
      }
      return;
    }
    if (step.collective == Collective::host) return run_host(n, operand, in, out);
    NcclMesh& nccl = *platform_.nccl();
    const DType dtype = n.shape.dtype();
    if (n.op == Op::all_reduce) {
      nccl.all_reduce(device, c.mesh_axis, dtype, operand.numel(), in, out, stream);
    } else if (n.op == Op::all_gather) {
      if (!step.scratch) {
        nccl.all_gather(device, c.mesh_axis, dtype, operand.numel(), in, out, stream);
        return;
      }
      nccl.all_gather(device, c.mesh_axis, dtype, operand.numel(), in, step.scratch->ptr, stream);
      for (const RowCopy& rc : step.copies) copy_rows(step.scratch->ptr, out, rc);
    } else {
      if (!step.scratch) {
        nccl.reduce_scatter(device, c.mesh_axis, dtype, n.shape.numel(), in, out, stream);
        return;
      }
      for (const RowCopy& rc : step.copies) copy_rows(in, step.scratch->ptr, rc);
      nccl.reduce_scatter(device, c.mesh_axis, dtype, n.shape.numel(), step.scratch->ptr, out,
                          stream);
    }
  }

  // One of block_copies' copies, from the blocks at `src` to those at `dst`.
  void copy_rows(CUdeviceptr src, CUdeviceptr dst, const RowCopy& rc) const {
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = src + rc.src;
    copy.srcPitch = rc.src_pitch;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = dst + rc.dst;
    copy.dstPitch = rc.dst_pitch;
    copy.WidthInBytes = rc.width;
    copy.Height = rc.height;
    check(driver().cuMemcpy2DAsync_v2(&copy, platform_.stream()), "cuMemcpy2DAsync");
  }

  // A collective through host memory: what came before on the stream finished, the operand
  // read back, exchanged with the mesh's other devices, the result written.
  void run_host(const ir::Node& n, const Shape& operand, CUdeviceptr in, CUdeviceptr out) const {
    const DriverApi& drv = driver();
    std::vector<std::byte> host_in(operand.bytes()), host_out(n.shape.bytes());
    check(drv.cuStreamSynchronize(platform_.stream()), "cuStreamSynchronize (a collective)");
    if (!host_in.empty()) {
      check(drv.cuMemcpyDtoH_v2(host_in.data(), in, host_in.size()),
            "cuMemcpyDtoH (a collective's operand)");
    }
    run_collective(n, operand, platform_.communicator(), platform_.mesh_device(), host_in.data(),
                   host_out.data());
    if (!host_out.empty()) {
      check(drv.cuMemcpyHtoD_v2(out, host_out.data(), host_out.size()),
            "cuMemcpyHtoD (a collective's result)");
    }
  }

  static bool profiling() {
    static const bool on = env_switch("PRISM_CUDA_PROFILE", false);
    return on;
  }

  // Whether calls may replay CUDA graphs: PRISM_CUDA_GRAPHS is not 0, no capture has failed,
  // the program has no collectives through host memory (the host takes part in those), and it
  // has steps enough for graphs to pay.
  bool runs_graphs() const {
    static const bool enabled = env_switch("PRISM_CUDA_GRAPHS", true);
    return enabled && !graphs_failed_ && !host_collectives_ && steps_.size() >= kMinGraphSteps;
  }

  // Adds the last call's time per step (the events around each) to the profile.
  void collect_profile(bool as_graph) {
    const DriverApi& drv = driver();
    if (step_ms_.empty()) step_ms_.assign(steps_.size(), 0);
    std::vector<float> ms(steps_.size());
    for (size_t i = 0; i < steps_.size(); ++i) {
      CUresult r = drv.cuEventElapsedTime_v2(&ms[i], events_[i], events_[i + 1]);
      if (r != CUDA_SUCCESS) {  // a profile is a diagnosis: say why and run on without it
        const char* what = nullptr;
        drv.cuGetErrorName(r, &what);
        std::fprintf(stderr, "cuda profile: cuEventElapsedTime failed (%s); not profiled\n",
                     what ? what : "?");
        profile_failed_ = true;
        return;
      }
    }
    for (size_t i = 0; i < steps_.size(); ++i) step_ms_[i] += ms[i];
    ++profile_calls_;
    profile_graphs_ = profile_graphs_ || as_graph;
  }

  // The profile on stderr: the device time of a call, then its steps grouped by what they do
  // (the same product or fused loop in every layer is one row), longest first, with the bytes
  // their operands and results hold per second of the step.
  void print_profile() const {
    struct Row {
      std::string what;
      int count = 0;
      double ms = 0, bytes = 0;
    };
    std::vector<Row> rows;
    std::map<std::string, size_t> index;
    double total = 0;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& step = steps_[i];
      const ir::Node& n = graph_.node(step.value);
      std::string what;
      double bytes = static_cast<double>(n.shape.bytes());
      for (ValueId r : step.reads) bytes += static_cast<double>(graph_.node(r).shape.bytes());
      if (step.matmul) {
        const MatmulShape& m = step.matmul->shape();
        what = fmt::format("cuBLASLt {} {}x{}x{}{}", name(m.dtype), m.m, m.n, m.k,
                           m.batch > 1 ? fmt::format(" batch {}", m.batch) : "");
      } else {
        what = fmt::format("{} {}", ir::op_name(n.op), n.shape.str());
        if (plan_.group_of[step.value] >= 0) what += " (fused)";
      }
      auto [it, added] = index.emplace(what, rows.size());
      if (added) rows.push_back(Row{what});
      Row& row = rows[it->second];
      row.count += 1;
      row.ms += step_ms_[i] / static_cast<double>(profile_calls_);
      row.bytes += bytes;
      total += step_ms_[i] / static_cast<double>(profile_calls_);
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
    std::fprintf(stderr,
                 "--- cuda profile: %zu steps, %lld calls%s, %.3f ms of device time a call\n"
                 "%7s %6s %10s %9s  %s\n",
                 steps_.size(), static_cast<long long>(profile_calls_),
                 profile_graphs_ ? " as CUDA graphs" : "", total, "share", "steps", "us each",
                 "GB/s", "step");
    for (const Row& r : rows) {
      std::fprintf(stderr, "%6.1f%% %6d %10.1f %9.0f  %s\n", 100 * r.ms / total, r.count,
                   1e3 * r.ms / r.count, r.ms > 0 ? r.bytes / (r.ms * 1e6) : 0.0, r.what.c_str());
    }
  }

  // CUDA graphs: a program of many small steps (a decode step) costs more in launches than in
  // work. A graph bakes in the pointers its launches were captured with, so graphs are kept
  // per set of pointers, and a set is captured only when it comes back (a decode loop reuses
  // the same cached blocks): programs whose buffers change every call never pay for capture.
  // PRISM_CUDA_GRAPHS=0 turns them off. Returns false when the steps must be enqueued.
  bool run_graph(const std::vector<CUdeviceptr>& ptr, const std::vector<CUdeviceptr>& outs) {
    if (!runs_graphs()) return false;
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
      } else if (step.collective != Collective::none) {
        constexpr const char* kHow[] = {"", "memset", "copy", "nccl", "host memory"};
        what = kHow[static_cast<int>(step.collective)];
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
  bool host_collectives_ = false;  // a collective step runs through host memory
  std::mutex mutex_;
  // PRISM_CUDA_PROFILE: an event before each step and one after the last; per step, the
  // milliseconds summed over the calls counted.
  std::vector<CUevent> events_;
  std::vector<double> step_ms_;
  int64_t profile_calls_ = 0;
  bool profile_graphs_ = false, profile_failed_ = false;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_cuda_executable(CudaPlatform& platform, const ir::Graph& graph,
                                                     const CompileSpec& spec) {
  return std::make_unique<CudaExecutable>(platform, graph, spec);
}

}  // namespace prism::cuda
