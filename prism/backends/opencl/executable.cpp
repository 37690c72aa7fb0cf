// The OpenCL executable: the compiler's fusion groups and memory plan, as on the CPU, turned
// into one generated program whose kernels run in order on the platform's in-order queue.
// Intermediates live in one arena buffer (kernels take a byte offset beside each buffer);
// storage follows the compiler's schedule (prism/compiler/schedule.h), donation included.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/opencl_platform.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/compiler/schedule.h"
#include "prism/core/error.h"
#include "prism/runtime/outputs.h"

namespace prism::opencl {

using compiler::Storage;
using ir::Op;
using ir::ValueId;

namespace {

struct Step {
  ValueId value;
  KernelSource source;
  cl_kernel kernel = nullptr;
  bool host = false;  // a collective: through host memory, between the devices of a mesh
};

class OpenClExecutable : public ExecutableImpl {
 public:
  OpenClExecutable(OpenClPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : platform_(platform),
        api_(platform.api()),
        graph_(graph),
        plan_(kernel::plan_steps(graph_)),
        schedule_(graph_, plan_) {
    std::vector<std::vector<ValueId>> reads;
    for (ValueId id = 0; id < graph_.size(); ++id) {
      const ir::Node& n = graph_.node(id);
      if (n.op != Op::constant) continue;
      const auto& bytes = *n.attr<ir::ConstantAttrs>().data;
      constants_.push_back(platform_.upload(
          HostBuffer(n.shape, std::span<const std::byte>(bytes.data(), bytes.size()))));
    }
    for (ValueId id : schedule_.steps()) {
      std::string name = fmt::format("k{}", id);
      Step& step = steps_.emplace_back(Step{id, {}});
      if (kernel::lowering_of(graph_.node(id).op) == kernel::Lowering::collective) {
        step.host = true;
        step.source.reads = graph_.node(id).inputs;
        check_collective("opencl", graph_, id, platform_.communicator());
      } else {
        step.source = step_kernel(graph_, plan_, id, name, platform_.traits());
      }
      reads.push_back(step.source.reads);
    }
    schedule_.place(graph_, reads, spec.donated_inputs);
    build();
  }

  ~OpenClExecutable() override {
    for (Step& s : steps_) {
      if (s.kernel) api_.clReleaseKernel(s.kernel);
    }
  }

  std::vector<Buffer> call(std::span<const Buffer> params,
                           std::span<const Buffer> inputs) override {
    std::lock_guard lock(mutex_);
    if (!arena_.valid()) {
      arena_ = platform_.allocate_for_write(Shape(DType::u8, {{"arena", schedule_.arena_bytes()}}));
    }
    std::vector<Buffer> outputs =
        output_buffers(schedule_, graph_, inputs, &platform_,
                       [&](const Shape& s) { return platform_.allocate_for_write(s); });
    // Values without memory of their own get the arena, so that every kernel argument is valid.
    std::vector<Place> at = schedule_.addresses<Place>([&](const compiler::Slot& s, ValueId) {
      switch (s.kind) {
        case Storage::parameter:
          return Place{mem_of(params[s.index]), 0};
        case Storage::input:
          return Place{mem_of(inputs[s.index]), 0};
        case Storage::constant:
          return Place{mem_of(constants_[s.index]), 0};
        case Storage::arena:
          return Place{mem_of(arena_), static_cast<cl_ulong>(s.offset)};
        case Storage::output:
          return Place{mem_of(outputs[s.index]), 0};
        default:
          return Place{mem_of(arena_), 0};
      }
    });
    for (Step& step : steps_) run(step, at);
    for (auto [k, v] : schedule_.final_copies()) {
      copy(at[v], {mem_of(outputs[k]), 0}, graph_.node(v).shape.bytes());
    }
    return outputs;
  }

 private:
  struct Place {
    cl_mem mem;
    cl_ulong offset;
    bool operator==(const Place&) const = default;
  };

  void copy(Place from, Place to, int64_t bytes) {
    if (bytes <= 0 || from == to) return;
    check_cl(api_.clEnqueueCopyBuffer(platform_.queue(), from.mem, to.mem, from.offset, to.offset,
                                      static_cast<size_t>(bytes), 0, nullptr, nullptr),
             "copying a buffer");
  }

  // A collective: the operand read back to the host (the in-order queue has finished what
  // came before), exchanged with the mesh's other devices, the result written back.
  void run_host(const Step& step, const std::vector<Place>& at) {
    const ir::Node& n = graph_.node(step.value);
    std::vector<std::byte> in, out(n.shape.bytes());
    Shape operand;
    if (!n.inputs.empty()) {
      operand = graph_.node(n.inputs[0]).shape;
      in.resize(operand.bytes());
      const Place from = at[n.inputs[0]];
      check_cl(api_.clEnqueueReadBuffer(platform_.queue(), from.mem, CL_TRUE, from.offset,
                                        in.size(), in.data(), 0, nullptr, nullptr),
               "reading a collective's operand");
    }
    run_collective(n, operand, platform_.communicator(), platform_.mesh_device(), in.data(),
                   out.data());
    const Place to = at[step.value];
    check_cl(api_.clEnqueueWriteBuffer(platform_.queue(), to.mem, CL_TRUE, to.offset, out.size(),
                                       out.data(), 0, nullptr, nullptr),
             "writing a collective's result");
  }

  void run(Step& step, const std::vector<Place>& at) {
    if (step.host) return run_host(step, at);
    const KernelSource& ks = step.source;
    if (ks.starts_as_operand) {
      copy(at[ks.reads[0]], at[step.value], graph_.node(step.value).shape.bytes());
    }
    if (ks.global[0] == 0 || ks.global[1] == 0 || ks.global[2] == 0) return;
    cl_uint arg = 0;
    auto set = [&](Place p) {
      check_cl(api_.clSetKernelArg(step.kernel, arg++, sizeof(cl_mem), &p.mem), "kernel argument");
      check_cl(api_.clSetKernelArg(step.kernel, arg++, sizeof(cl_ulong), &p.offset),
               "kernel argument");
    };
    for (ValueId r : ks.reads) set(at[r]);
    set(at[step.value]);
    size_t global[3], local[3];
    bool fixed_local = ks.local[0] > 0;
    for (int d = 0; d < ks.dims; ++d) {
      size_t l = fixed_local ? static_cast<size_t>(ks.local[d]) : (d == 0 ? work_group_ : 1);
      local[d] = l;
      global[d] = (static_cast<size_t>(ks.global[d]) + l - 1) / l * l;
    }
    check_cl(api_.clEnqueueNDRangeKernel(platform_.queue(), step.kernel, ks.dims, nullptr, global,
                                         local, 0, nullptr, nullptr),
             "launching a kernel");
  }

  // One program holds every kernel of the executable; it is built once per distinct source.
  void build() {
    if (steps_.empty()) return;
    std::string source = preamble(platform_.traits());
    for (const Step& s : steps_) {
      if (!s.host) source += "\n" + s.source.code;
    }
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) {
      std::fprintf(stderr, "--- opencl program (%zu kernels, arena %ld bytes)\n%s", steps_.size(),
                   static_cast<long>(schedule_.arena_bytes()), source.c_str());
    }
    cl_program program = platform_.program(source);
    for (Step& s : steps_) {
      if (s.host) continue;
      cl_int err = CL_SUCCESS;
      s.kernel = api_.clCreateKernel(program, s.source.name.c_str(), &err);
      check_cl(err, "creating a kernel");
    }
    // A work group of 64 where the device allows it: every vendor's GPUs schedule it well.
    size_t limit = 64;
    for (Step& s : steps_) {
      if (s.host) continue;
      size_t max = 0;
      api_.clGetKernelWorkGroupInfo(s.kernel, nullptr, CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max,
                                    nullptr);
      if (max > 0) limit = std::min(limit, max);
    }
    work_group_ = limit;
  }

  OpenClPlatform& platform_;
  const ClApi& api_;
  ir::Graph graph_;
  compiler::FusionPlan plan_;
  compiler::Schedule schedule_;
  std::vector<Step> steps_;
  std::vector<Buffer> constants_;
  size_t work_group_ = 64;
  Buffer arena_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<ExecutableImpl> make_executable(OpenClPlatform& platform, const ir::Graph& graph,
                                                const CompileSpec& spec) {
  return std::make_unique<OpenClExecutable>(platform, graph, spec);
}

}  // namespace prism::opencl
