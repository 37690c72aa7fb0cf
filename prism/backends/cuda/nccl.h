// The collectives of a CUDA mesh whose devices are distinct GPUs, of this process or of the
// processes of a run (docs/cluster.md), through NCCL (cuda_api.h loads it): run on the
// devices' streams, and so inside the CUDA graphs a decoding step replays. Where NCCL is
// missing or cannot serve a mesh, its collectives go through host memory instead
// (executable.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/core/dtype.h"
#include "prism/core/mesh.h"
#include "prism/core/shape.h"

namespace prism {
class Processes;
}

namespace prism::cuda {

struct NcclApi;  // cuda_api.h, where the toolkit has nccl.h

// NCCL gathers and scatters blocks that lie one device's after another. Along a dimension of
// a row-major tensor that is not the outermost, each row (of the dimensions before it) holds
// one block per device side by side instead; these copies move the blocks between the two
// orders, one 2-D copy a device (`height` rows of `width` bytes; offsets and pitches in bytes).
struct RowCopy {
  size_t src = 0, src_pitch = 0, dst = 0, dst_pitch = 0, width = 0, height = 0;
  bool operator==(const RowCopy&) const = default;
};
// For `group` devices' blocks along dimension `axis` of `whole`: with `to_whole`, from NCCL's
// order to `whole`'s (after an all-gather), else from `whole`'s to NCCL's (before a
// reduce-scatter). Empty where the orders are the same (no dimension before `axis` is above
// one). Throws where `whole` does not split into `group` blocks along `axis`.
std::vector<RowCopy> block_copies(const Shape& whole, int axis, int64_t group, bool to_whole);

// The NCCL communicators of one mesh: for each mesh axis, each device's communicator with
// the devices that differ from it only along that axis (its rank there is its coordinate).
// Every call enqueues on the calling device's stream and returns; each device calls from its
// own thread, as a mesh's devices run (runtime/sharded.h).
class NcclMesh {
 public:
  // The communicators of `mesh` over the GPUs `ordinals` (device k of the mesh on GPU
  // ordinals[k]); null where NCCL cannot serve it, with the reason in *why: the library is
  // missing, a GPU appears twice (NCCL wants distinct GPUs), or its initialization failed.
  static std::unique_ptr<NcclMesh> open(const Mesh& mesh, std::vector<int> ordinals,
                                        std::string* why);
  // The same on `api` (cuda_api.h's load_nccl: a stand-in library, in tests).
  static std::unique_ptr<NcclMesh> open(const NcclApi& api, const Mesh& mesh,
                                        std::vector<int> ordinals, std::string* why);

  // A mesh across the processes of a run: this process holds devices first.. (first +
  // ordinals.size()), device first + k on GPU ordinals[k] of its host. Each group's NCCL id is
  // made by the process holding its first device and handed to the others over MPI, and each
  // device joins its groups (ncclCommInitRank) with `bind(ordinal)` having made its GPU the
  // current one. Every process of the run calls this at the same point (it is collective):
  // null in every process, with *why, where NCCL cannot serve some process (the library
  // missing there, `declined` non-empty there saying why, a GPU of a host holding two
  // devices); an initialization that fails afterwards throws, in the processes where it fails.
  static std::unique_ptr<NcclMesh> open_across(const Mesh& mesh, Processes& processes,
                                               int64_t first, std::vector<int> ordinals,
                                               std::function<void(int)> bind,
                                               const std::string& declined, std::string* why);
  // The same on `api`, which every process loaded.
  static std::unique_ptr<NcclMesh> open_across(const NcclApi& api, const Mesh& mesh,
                                               Processes& processes, int64_t first,
                                               std::vector<int> ordinals,
                                               std::function<void(int)> bind, std::string* why);
  ~NcclMesh();
  NcclMesh(const NcclMesh&) = delete;
  NcclMesh& operator=(const NcclMesh&) = delete;

  // Whether NCCL carries elements of `dtype` (the others go through host memory).
  static bool carries(DType dtype);
  // "NCCL 2.28.9".
  const std::string& version() const { return version_; }

  // As Communicator's (runtime/collectives.h), on device memory: the sum of `count` elements
  // of the group's `in` into `out` (which may be `in`).
  void all_reduce(int64_t device, int mesh_axis, DType dtype, size_t count, CUdeviceptr in,
                  CUdeviceptr out, CUstream stream);
  // The group's `count` elements each, one device's after another into `out`.
  void all_gather(int64_t device, int mesh_axis, DType dtype, size_t count, CUdeviceptr in,
                  CUdeviceptr out, CUstream stream);
  // The sum of the group's `in` (one block of `count` elements per device, one after
  // another), of which `out` gets this device's block.
  void reduce_scatter(int64_t device, int mesh_axis, DType dtype, size_t count, CUdeviceptr in,
                      CUdeviceptr out, CUstream stream);

  // A device failed: aborts every communicator, so devices waiting on the others in NCCL's
  // kernels return with an error instead of waiting forever. reset() makes new ones once
  // every device has returned; across processes it does not (that would take every process,
  // and a failure there ends the run: docs/cluster.md), and later calls fail.
  void abort();
  void reset();

 private:
  NcclMesh(const NcclApi& api, Mesh mesh, std::vector<int> ordinals)
      : api_(api), mesh_(std::move(mesh)), ordinals_(std::move(ordinals)) {}
  void init();               // makes comms_, throwing on failure
  void init_across();        // the same across processes_
  void destroy(bool abort);  // every communicator, aborted or destroyed
  void* comm(int64_t device, int mesh_axis);
  std::string say_version() const;

  const NcclApi& api_;
  Mesh mesh_;
  std::vector<int> ordinals_;  // of this process's devices, first_ on
  int64_t first_ = 0;
  Processes* processes_ = nullptr;  // a mesh across them, or null
  std::function<void(int)> bind_;
  std::string version_;
  std::mutex mutex_;  // abort() and reset()
  std::atomic<bool> aborted_{false};
  std::vector<void*> comms_;  // [mesh axis * devices here + device - first_], ncclComm_t
};

}  // namespace prism::cuda
