// Collectives between the devices of a mesh whose results land in host memory: each device
// calls with its index, and a call returns once every device of its group has made it. Sums
// run in one fixed order (the group's devices in turn, each element summed in double and
// rounded once), so every device gets the same bits, whether the devices share a process
// (HostCommunicator) or not (ProcessCommunicator).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/mesh.h"
#include "prism/core/shape.h"
#include "prism/ir/graph.h"
#include "prism/runtime/platform.h"

namespace prism {

class Processes;
class ProcessGroup;

// Where the devices of one group in one process wait for each other: meet() returns once
// `members` calls have come, or throws once `aborted` is set and wake() called. A device
// spins briefly before it sleeps: the others of a step come within microseconds.
class Meeting {
 public:
  void meet(int64_t members, const std::atomic<bool>& aborted);
  void wake();   // wakes those waiting, to see `aborted`
  void clear();  // forgets who came (after an abort, once every device has returned)

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t arrived_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mutex_, read by spinning devices
};

class Communicator {
 public:
  explicit Communicator(Mesh mesh) : mesh_(std::move(mesh)) {}
  virtual ~Communicator() = default;
  const Mesh& mesh() const { return mesh_; }

  // The sum over the devices that differ from `device` only along `mesh_axis`, of `in` into
  // `out` (both `shape`; they may be the same memory).
  virtual void all_reduce(int64_t device, int mesh_axis, const Shape& shape, const std::byte* in,
                          std::byte* out) = 0;
  // The group's operands (each `shape`) side by side along `axis`, in device order.
  virtual void all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape,
                          const std::byte* in, std::byte* out) = 0;
  // The sum as all_reduce, of which `out` keeps this device's block along `axis`.
  virtual void reduce_scatter(int64_t device, int mesh_axis, int axis, const Shape& shape,
                              const std::byte* in, std::byte* out) = 0;

  // Every device waiting (or later calling) throws instead of waiting; reset() ends that.
  void abort();
  void reset();

  // The time the devices have spent in collectives through this communicator (waiting for
  // the others included), summed over the devices that call it: what run_collective counts,
  // for benchmarks.
  double seconds() const { return static_cast<double>(nanoseconds_.load()) * 1e-9; }
  void count(int64_t nanoseconds) { nanoseconds_ += nanoseconds; }

 protected:
  // Each group's meeting, made with the communicator: abort() wakes it, reset() clears it.
  void add_meeting(Meeting& meeting) { meetings_.push_back(&meeting); }
  // Waits at `meeting` for `members` devices, or throws once aborted.
  void meet(Meeting& meeting, int64_t members) { meeting.meet(members, aborted_); }

  Mesh mesh_;

 private:
  std::vector<Meeting*> meetings_;
  std::atomic<bool> aborted_{false};
  std::atomic<int64_t> nanoseconds_{0};
};

// The devices of a mesh in one process, meeting in shared memory.
class HostCommunicator : public Communicator {
 public:
  explicit HostCommunicator(Mesh mesh);
  void all_reduce(int64_t device, int mesh_axis, const Shape& shape, const std::byte* in,
                  std::byte* out) override;
  void all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape, const std::byte* in,
                  std::byte* out) override;
  void reduce_scatter(int64_t device, int mesh_axis, int axis, const Shape& shape,
                      const std::byte* in, std::byte* out) override;

 private:
  struct Group {
    Meeting meeting;
    std::vector<const std::byte*> slots;
    std::vector<std::byte*> results;  // all_reduce: where each device's result goes
  };
  // The group of `device` along `mesh_axis`, and the device's place in it.
  Group& group(int64_t device, int mesh_axis, int64_t* place);
  void barrier(Group& g);
  // Publishes `in`, waits for the group, runs `work` over the group's operands, waits again
  // (so no operand is overwritten while another device reads it).
  template <typename F>
  void exchange(int64_t device, int mesh_axis, const std::byte* in, F&& work);

  std::vector<std::unique_ptr<Group>> groups_;  // [mesh axis][device with that coordinate 0]
};

// A mesh whose devices are shared out over the processes of a run (processes.h), as many in
// each: process r holds devices r * L to r * L + L - 1. The devices of one process meet in its
// memory; those of several through MPI (shared memory within a host, the network between
// hosts, as Open MPI chooses), each process's first device of a group exchanging for all of
// its devices there. Made by every process at once (it forms an MPI group for each group of
// devices that spans processes); throws when the devices do not share out evenly.
class ProcessCommunicator : public Communicator {
 public:
  ProcessCommunicator(Mesh mesh, Processes& processes);
  ~ProcessCommunicator() override;
  // The devices this process holds: local_devices() of them, from first_device() on.
  int64_t first_device() const { return first_; }
  int64_t local_devices() const { return local_; }
  void all_reduce(int64_t device, int mesh_axis, const Shape& shape, const std::byte* in,
                  std::byte* out) override;
  void all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape, const std::byte* in,
                  std::byte* out) override;
  void reduce_scatter(int64_t device, int mesh_axis, int axis, const Shape& shape,
                      const std::byte* in, std::byte* out) override;

 private:
  struct Group;
  Group& group(int64_t device, int mesh_axis, int64_t* place);
  void barrier(Group& g);
  template <typename Bytes, typename Piece>
  void exchange(Group& g, bool one, Bytes bytes, Piece piece);
  int64_t first_ = 0, local_ = 1;
  std::vector<std::unique_ptr<Group>> groups_;  // those with devices here
  std::vector<Group*> index_;                   // [mesh axis][device here]: its group
};

// The collective node `id` of `graph` (all_reduce, all_gather, reduce_scatter, mesh_coordinate)
// for a backend whose devices share host memory: checks at compile time that it can run on
// `comm`'s mesh (with no communicator, that it needs no other device), naming `platform`.
void check_collective(std::string_view platform, const ir::Graph& graph, ir::ValueId id,
                      const Communicator* comm);
// Runs it as device `device`: `in` is its operand (unused for mesh_coordinate), `out` its
// result, both host memory, possibly the same.
void run_collective(const ir::Node& node, const Shape& operand, Communicator* comm, int64_t device,
                    const std::byte* in, std::byte* out);

// How many devices environment variable `variable` asks a platform to present (virtual
// devices, to try a mesh on a machine with fewer), or 0 where it is unset. Throws naming it
// when it is not a positive number.
int64_t devices_asked(const char* variable);

// The devices of the meshes a platform whose devices share host memory made, kept for the
// platform's life: each mesh's are made once, by `make(communicator, k)` for device k.
class MeshDevices {
 public:
  using Make = std::function<std::unique_ptr<Platform>(std::shared_ptr<Communicator>, int64_t)>;
  std::vector<Platform*> get(const Mesh& mesh, const Make& make);
  // The same for a mesh across the processes of a run (docs/cluster.md): this process's block
  // of its devices, made by `make` for each device k of the block in order, their collectives
  // through one ProcessCommunicator. A mesh whose devices do not share out evenly over the
  // processes is refused, naming `platform`.
  std::vector<Platform*> get_across(std::string_view platform, const Mesh& mesh,
                                    Processes& processes, const Make& make);

 private:
  std::mutex mutex_;
  std::map<std::string, std::vector<std::unique_ptr<Platform>>> meshes_;  // by Mesh::str()
};

}  // namespace prism
