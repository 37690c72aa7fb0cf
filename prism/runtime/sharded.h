// Programs over a mesh of devices (docs/sharding.md).
//
//   ShardedExecutable exe = compile_sharded(platform, fn, input_shapes,
//                                           {.mesh = Mesh({{"model", 2}}), .inputs = {...}});
//   std::vector<NamedBuffers> weights = ...;  // each device's shards (io::load_sharded)
//   auto outputs = exe.call(weights, per_device_inputs);
//
// The traced graph is partitioned (prism/compiler/partition.h) into the graph every device
// runs over its shards, with collectives where they meet, and compiled once per device of the
// platform's mesh. A call runs every device at once, each on its own thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "prism/compiler/partition.h"
#include "prism/core/mesh.h"
#include "prism/runtime/compile.h"

namespace prism {

using NamedBuffers = std::map<std::string, Buffer, std::less<>>;

struct ShardedCompileOptions {
  Mesh mesh;
  std::vector<Sharding> inputs;  // how each input is split (missing or empty: whole)
  // How each output must leave (missing: as the partitioner splits it): the states a program
  // returns for the next to take as inputs, split as those take them. An empty Sharding here
  // means whole.
  std::vector<std::optional<Sharding>> outputs;
  std::vector<int> donate;  // as CompileOptions::donate
  CompileCache* cache = nullptr;
};

class DeviceThreads;

class ShardedExecutable {
 public:
  struct Parameter {
    std::string name;
    Shape shape;            // the whole tensor
    compiler::Split split;  // per dim, the mesh axis it is split over, or -1
  };

  const Mesh& mesh() const { return mesh_; }
  // The devices this process holds (every device of the mesh, but in a run of several
  // processes: processes.h), from device first_device() of the mesh on.
  const std::vector<Platform*>& devices() const { return devices_; }
  int64_t first_device() const { return first_device_; }
  // Whether other processes hold some of the mesh's devices.
  bool spans_processes() const {
    return !mesh_program_ && static_cast<int64_t>(devices_.size()) < mesh_.devices();
  }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  const std::vector<compiler::Split>& input_splits() const { return input_splits_; }
  const std::vector<compiler::Split>& output_splits() const { return output_splits_; }
  // Device k's program (its parameters, inputs and outputs are its shards), where each device
  // runs its own (not on a platform whose compiler splits the program: mesh_program()).
  const Executable& device(size_t k) const { return executables_.at(k); }
  // The program compiled once for the whole mesh by a platform that splits programs itself
  // (PJRT), or null.
  const MeshExecutableImpl* mesh_program() const { return mesh_program_.get(); }

  // Every device at once: `params[k]` and `inputs[k]` are the shards of devices()[k];
  // returns each device's outputs. An error on one device is rethrown here after every device has
  // stopped.
  std::vector<std::vector<Buffer>> call(std::span<const NamedBuffers> params,
                                        std::span<const std::vector<Buffer>> inputs) const;
  // Output `k` of a call's `outputs`, whole in host memory: the first device's where it is
  // whole on every device, else assembled from every device's shard (in a run of several
  // processes, collective: every process calls it).
  HostBuffer output_to_host(const std::vector<std::vector<Buffer>>& outputs, size_t k) const;
  // Executable::prepare on each device.
  std::vector<NamedBuffers> prepare(std::vector<NamedBuffers> params) const;

 private:
  friend ShardedExecutable compile_sharded(Platform&, const TraceFn&, std::vector<Shape>,
                                           const ShardedCompileOptions&);
  Mesh mesh_;
  std::vector<Platform*> devices_;
  int64_t first_device_ = 0;
  std::vector<Executable> executables_;
  std::vector<Parameter> parameters_;
  std::vector<compiler::Split> input_splits_, output_splits_;
  std::shared_ptr<DeviceThreads> threads_;
  std::shared_ptr<MeshExecutableImpl> mesh_program_;
  std::vector<Parameter> mesh_parameters_;  // in the order mesh_program_ takes them
};

ShardedExecutable compile_sharded(Platform& platform, const TraceFn& fn, std::vector<Shape> inputs,
                                  const ShardedCompileOptions& options);

// Where device `device`'s shard lies in a tensor of `whole` split as `split`: its first index
// and its extent along each dim.
struct ShardBox {
  std::vector<int64_t> start, size;
};
ShardBox shard_box(const Shape& whole, const compiler::Split& split, const Mesh& mesh,
                   int64_t device);
// Copies the box (start, size) of a row-major tensor of `dims` at `whole` into the dense `box`
// (to_box), or back.
void copy_box(std::byte* whole, std::byte* box, const std::vector<int64_t>& dims,
              const ShardBox& where, size_t element_bytes, bool to_box);

// Device `device`'s shard of `whole`, split as `split`.
HostBuffer shard_of(const HostBuffer& whole, const compiler::Split& split, const Mesh& mesh,
                    int64_t device);
// The whole tensor from every device's shard (a replicated dim is read from the devices at
// coordinate 0 along its axis).
HostBuffer assemble(std::span<const HostBuffer> shards, const compiler::Split& split,
                    const Mesh& mesh);

// Runs fn(k) for every device k at once, device 0 on the calling thread, the others on
// threads kept for the mesh; rethrows the first error after all have returned, calling
// `abort` on the first one so the rest stop waiting in collectives.
class DeviceThreads {
 public:
  explicit DeviceThreads(int64_t devices);
  ~DeviceThreads();
  void run(const std::function<void(int64_t)>& fn, const std::function<void()>& abort);

 private:
  void work(int64_t device);
  std::vector<std::thread> threads_;
  std::mutex call_mutex_, mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int64_t pending_ = 0;
  bool stop_ = false;
};

}  // namespace prism
