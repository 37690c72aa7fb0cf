#include "prism/runtime/sharded.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism {
namespace {

// The devices of one mesh share one set of threads, for as long as the process runs (the
// platforms that own the devices live as long).
std::shared_ptr<DeviceThreads> threads_for(const std::vector<Platform*>& devices) {
  static std::mutex mutex;
  static auto& all = *new std::map<Platform*, std::shared_ptr<DeviceThreads>>;
  std::lock_guard lock(mutex);
  auto& t = all[devices.front()];
  if (!t) t = std::make_shared<DeviceThreads>(static_cast<int64_t>(devices.size()));
  return t;
}

std::vector<Dim> with_sizes(const Shape& s, const std::vector<int64_t>& sizes) {
  std::vector<Dim> dims(s.dims().begin(), s.dims().end());
  for (size_t d = 0; d < dims.size(); ++d) dims[d].size = sizes[d];
  return dims;
}

}  // namespace

ShardBox shard_box(const Shape& whole, const compiler::Split& split, const Mesh& mesh,
                   int64_t device) {
  ShardBox box{std::vector<int64_t>(whole.rank(), 0), whole.sizes()};
  for (int d = 0; d < whole.rank(); ++d) {
    if (d >= static_cast<int>(split.size()) || split[d] < 0) continue;
    box.size[d] = whole.size(d) / mesh.axes()[split[d]].size;
    box.start[d] = mesh.coordinate(device, split[d]) * box.size[d];
  }
  return box;
}

void copy_box(std::byte* whole, std::byte* box, const std::vector<int64_t>& dims,
              const ShardBox& where, size_t elem, bool to_box) {
  const std::vector<int64_t>& start = where.start;
  const std::vector<int64_t>& size = where.size;
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    to_box ? std::memcpy(box, whole, elem) : std::memcpy(whole, box, elem);
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  int64_t rows = 1;
  for (int d = 0; d + 1 < rank; ++d) rows *= size[d];
  const size_t run = size[rank - 1] * elem;
  std::vector<int64_t> at(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = start[rank - 1];
    for (int d = 0; d + 1 < rank; ++d) offset += (start[d] + at[d]) * stride[d];
    std::byte* w = whole + offset * elem;
    std::byte* b = box + r * run;
    to_box ? std::memcpy(b, w, run) : std::memcpy(w, b, run);
    for (int d = rank - 2; d >= 0 && ++at[d] == size[d]; --d) at[d] = 0;
  }
}

HostBuffer shard_of(const HostBuffer& whole, const compiler::Split& split, const Mesh& mesh,
                    int64_t device) {
  ShardBox box = shard_box(whole.shape(), split, mesh, device);
  HostBuffer out(Shape(whole.shape().dtype(), with_sizes(whole.shape(), box.size)));
  copy_box(const_cast<std::byte*>(whole.data()), out.data(), whole.shape().sizes(), box,
           size_of(whole.shape().dtype()), true);
  return out;
}

HostBuffer assemble(std::span<const HostBuffer> shards, const compiler::Split& split,
                    const Mesh& mesh) {
  PRISM_CHECK(static_cast<int64_t>(shards.size()) == mesh.devices(),
              "assemble: {} shards for a mesh of {} devices", shards.size(), mesh.devices());
  std::vector<int64_t> sizes = shards[0].shape().sizes();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d < split.size() && split[d] >= 0) sizes[d] *= mesh.axes()[split[d]].size;
  }
  HostBuffer whole(Shape(shards[0].shape().dtype(), with_sizes(shards[0].shape(), sizes)));
  for (int64_t k = 0; k < mesh.devices(); ++k) {
    copy_box(whole.data(), const_cast<std::byte*>(shards[k].data()), sizes,
             shard_box(whole.shape(), split, mesh, k), size_of(whole.shape().dtype()), false);
  }
  return whole;
}

DeviceThreads::DeviceThreads(int64_t devices) {
  for (int64_t k = 1; k < devices; ++k) threads_.emplace_back([this, k] { work(k); });
}

DeviceThreads::~DeviceThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void DeviceThreads::work(int64_t device) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t)>* fn;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(device);  // fn catches its own errors
    std::lock_guard lock(mutex_);
    if (--pending_ == 0) done_.notify_all();
  }
}

void DeviceThreads::run(const std::function<void(int64_t)>& fn,
                        const std::function<void()>& abort) {
  std::lock_guard call(call_mutex_);
  std::mutex error_mutex;
  std::exception_ptr first;
  std::function<void(int64_t)> guarded = [&](int64_t k) {
    try {
      fn(k);
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!first) first = std::current_exception();
      }
      abort();
    }
  };
  {
    std::lock_guard lock(mutex_);
    fn_ = &guarded;
    pending_ = static_cast<int64_t>(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  guarded(0);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }
  if (first) std::rethrow_exception(first);
}

ShardedExecutable compile_sharded(Platform& platform, const TraceFn& fn, std::vector<Shape> inputs,
                                  const ShardedCompileOptions& options) {
  ShardedExecutable exe;
  exe.mesh_ = options.mesh;
  exe.devices_ = platform.mesh_devices(options.mesh);
  PRISM_CHECK(Processes::asked() == 1 || options.mesh.devices() == 1 ||
                  static_cast<int64_t>(exe.devices_.size()) < options.mesh.devices(),
              "{}: a mesh across the processes of a run runs on the cpu and cuda platforms only "
              "(docs/cluster.md)",
              platform.name());
  exe.first_device_ = exe.devices_.front()->mesh_index();
  ir::Graph traced = trace(fn, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Sharding s = i < options.inputs.size() ? options.inputs[i] : Sharding();
    exe.input_splits_.push_back(s.resolve(inputs[i], options.mesh, fmt::format("input {}", i)));
  }
  compiler::Partitioned p;
  if (options.mesh.devices() == 1) {  // nothing to split: the graph as traced
    for (ir::ValueId id : traced.parameters()) {
      const ir::Node& n = traced.node(id);
      p.parameters[n.attr<ir::ParameterAttrs>().name] = compiler::Split(n.shape.rank(), -1);
    }
    for (ir::ValueId id : traced.outputs()) {
      p.outputs.push_back(compiler::Split(traced.node(id).shape.rank(), -1));
    }
    for (compiler::Split& s : exe.input_splits_) s.assign(s.size(), -1);
    p.graph = traced;
  } else {
    std::vector<compiler::Split> outputs(traced.outputs().size());
    for (size_t k = 0; k < outputs.size() && k < options.outputs.size(); ++k) {
      if (!options.outputs[k]) continue;
      const Shape& shape = traced.node(traced.outputs()[k]).shape;
      outputs[k] = options.outputs[k]->resolve(shape, options.mesh, fmt::format("output {}", k));
    }
    p = compiler::partition(traced, options.mesh, exe.input_splits_, outputs);
  }
  exe.output_splits_ = p.outputs;
  for (ir::ValueId id : traced.parameters()) {
    const auto& a = traced.node(id).attr<ir::ParameterAttrs>();
    exe.parameters_.push_back({a.name, traced.node(id).shape, p.parameters.at(a.name)});
  }
  if (options.mesh.devices() > 1) {
    // A platform whose compiler splits programs itself gets the whole graph and the splits.
    ir::Graph whole = optimize(traced, platform);
    MeshSpec spec{options.mesh, {}, exe.input_splits_, exe.output_splits_, options.donate};
    for (ir::ValueId id : whole.parameters()) {
      const std::string& name = whole.node(id).attr<ir::ParameterAttrs>().name;
      spec.parameters.push_back(p.parameters.at(name));
      exe.mesh_parameters_.push_back({name, whole.node(id).shape, p.parameters.at(name)});
    }
    if (auto program = platform.compile_for_mesh(whole, spec)) {
      exe.mesh_program_ = std::move(program);
      return exe;
    }
    exe.mesh_parameters_.clear();
  }
  CompileOptions device_options{.donate = options.donate, .cache = options.cache};
  for (Platform* device : exe.devices_) {
    exe.executables_.push_back(compile_graph(*device, p.graph, device_options));
  }
  exe.threads_ = threads_for(exe.devices_);
  return exe;
}

std::vector<std::vector<Buffer>> ShardedExecutable::call(
    std::span<const NamedBuffers> params, std::span<const std::vector<Buffer>> inputs) const {
  const size_t n = devices_.size();
  PRISM_CHECK(params.size() == n && inputs.size() == n,
              "call: weights for {} devices and inputs for {}, the mesh has {}", params.size(),
              inputs.size(), n);
  if (mesh_program_) {
    std::vector<std::vector<Buffer>> ordered(n);
    for (size_t k = 0; k < n; ++k) {
      for (const Parameter& p : mesh_parameters_) {
        auto it = params[k].find(p.name);
        PRISM_CHECK(it != params[k].end(), "call: no buffer for parameter \"{}\" on device {}",
                    p.name, k);
        ordered[k].push_back(it->second);
      }
    }
    return mesh_program_->call(ordered, inputs);
  }
  std::vector<std::vector<Buffer>> outputs(n);
  if (n == 1) {
    outputs[0] = executables_[0].call(params[0], inputs[0]);
    return outputs;
  }
  try {
    threads_->run([&](int64_t k) { outputs[k] = executables_[k].call(params[k], inputs[k]); },
                  [&] { devices_[0]->abort_collectives(); });
  } catch (...) {
    devices_[0]->reset_collectives();  // every device has returned: ready for the next call
    throw;
  }
  return outputs;
}

HostBuffer ShardedExecutable::output_to_host(const std::vector<std::vector<Buffer>>& outputs,
                                             size_t k) const {
  const compiler::Split& split = output_splits_.at(k);
  if (std::none_of(split.begin(), split.end(), [](int a) { return a >= 0; })) {
    return outputs.at(0).at(k).to_host();
  }
  std::vector<HostBuffer> shards;
  for (const std::vector<Buffer>& device : outputs) shards.push_back(device.at(k).to_host());
  if (spans_processes()) {
    // Every process's shards (each process holds as many devices, the same shape each), from
    // every process, in device order.
    ProcessGroup& world = Processes::get()->world();
    const size_t bytes = shards[0].shape().bytes();
    std::vector<std::byte> mine(bytes * shards.size());
    for (size_t d = 0; d < shards.size(); ++d) {
      std::memcpy(mine.data() + d * bytes, shards[d].data(), bytes);
    }
    std::vector<std::byte> all(mine.size() * world.size());
    world.all_gather(mine.data(), mine.size(), all.data());
    std::vector<HostBuffer> every;
    for (int64_t d = 0; d < mesh_.devices(); ++d) {
      HostBuffer shard(shards[0].shape());
      std::memcpy(shard.data(), all.data() + d * bytes, bytes);
      every.push_back(std::move(shard));
    }
    return assemble(every, split, mesh_);
  }
  return assemble(shards, split, mesh_);
}

std::vector<NamedBuffers> ShardedExecutable::prepare(std::vector<NamedBuffers> params) const {
  PRISM_CHECK(params.size() == devices_.size(), "prepare: weights for {} devices, the mesh has {}",
              params.size(), devices_.size());
  if (mesh_program_) return params;  // the plugin's own layouts
  for (size_t k = 0; k < params.size(); ++k) {
    params[k] = executables_[k].prepare(std::move(params[k]));
  }
  return params;
}

}  // namespace prism
