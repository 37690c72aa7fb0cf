#include "prism/backends/cuda/nccl.h"

#include <algorithm>
#include <cstring>

#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism::cuda {

std::vector<RowCopy> block_copies(const Shape& whole, int axis, int64_t group, bool to_whole) {
  PRISM_CHECK(axis >= 0 && axis < whole.rank() && group >= 1 && whole.size(axis) % group == 0,
              "cuda: {} does not split into {} blocks along dimension {}", whole.str(), group,
              axis);
  size_t outer = 1, block = static_cast<size_t>(size_of(whole.dtype()));
  for (int d = 0; d < axis; ++d) outer *= static_cast<size_t>(whole.size(d));
  for (int d = axis + 1; d < whole.rank(); ++d) block *= static_cast<size_t>(whole.size(d));
  block *= static_cast<size_t>(whole.size(axis) / group);
  std::vector<RowCopy> copies;
  if (outer == 1) return copies;
  const size_t g = static_cast<size_t>(group);
  for (size_t r = 0; r < g; ++r) {
    // Device r's block: `outer` rows one block apart in NCCL's order, a row of `whole` apart
    // in whole's.
    const size_t nccl_at = r * outer * block, whole_at = r * block;
    copies.push_back(to_whole ? RowCopy{nccl_at, block, whole_at, g * block, block, outer}
                              : RowCopy{whole_at, g * block, nccl_at, block, block, outer});
  }
  return copies;
}

#ifdef PRISM_CUDA_NCCL

namespace {

void check_nccl(const NcclApi& api, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fail("cuda: {}: {}", what, api.ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return ncclFloat64;
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
    case DType::u32:
      return ncclUint32;
    default:
      fail("cuda: NCCL does not carry {}", name(dtype));
  }
}

}  // namespace

bool NcclMesh::carries(DType dtype) { return dtype != DType::i16; }

std::unique_ptr<NcclMesh> NcclMesh::open(const Mesh& mesh, std::vector<int> ordinals,
                                         std::string* why) {
  const auto& lib = nccl_library();
  if (!lib.ok) {
    *why = fmt::format("no NCCL ({})", lib.error);
    return nullptr;
  }
  return open(lib.api, mesh, std::move(ordinals), why);
}

std::unique_ptr<NcclMesh> NcclMesh::open(const NcclApi& api, const Mesh& mesh,
                                         std::vector<int> ordinals, std::string* why) {
  for (size_t i = 0; i < ordinals.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (ordinals[i] == ordinals[j]) {
        *why = fmt::format("GPU {} holds devices {} and {} (NCCL wants distinct GPUs)", ordinals[i],
                           j, i);
        return nullptr;
      }
    }
  }
  std::unique_ptr<NcclMesh> m(new NcclMesh(api, mesh, std::move(ordinals)));
  m->version_ = m->say_version();
  try {
    m->init();
  } catch (const Error& e) {
    *why = e.what();
    return nullptr;
  }
  return m;
}

std::string NcclMesh::say_version() const {
  int version = 0;
  api_.ncclGetVersion(&version);
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
  return fmt::format("NCCL {}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

namespace {

// Why a process cannot join a mesh across processes (empty where it can).
struct Offer {
  char why[240];
};

// Whether every process can join (`declined` saying why this one cannot, where it cannot)
// with GPUs distinct on each host; the same answer in every process.
bool every_process_can_join(std::string_view declined, Processes& processes,
                            const std::vector<int>& ordinals, std::string* why) {
  Offer mine{};
  const size_t n = std::min(declined.size(), sizeof(mine.why) - 1);
  std::memcpy(mine.why, declined.data(), n);
  const int p = processes.size();
  const size_t local = ordinals.size();
  std::vector<Offer> offers(p);
  processes.world().all_gather(&mine, sizeof(Offer), offers.data());
  std::vector<int> gpus(p * local);
  processes.world().all_gather(ordinals.data(), local * sizeof(int), gpus.data());
  for (int r = 0; r < p; ++r) {
    if (offers[r].why[0]) {
      *why = fmt::format("rank {} on {}: {}", r, processes.host_of(r), offers[r].why);
      return false;
    }
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const std::string& host = processes.host_of(static_cast<int>(i / local));
      if (gpus[i] == gpus[j] && host == processes.host_of(static_cast<int>(j / local))) {
        *why = fmt::format("GPU {} of {} holds devices {} and {} (NCCL wants distinct GPUs)",
                           gpus[i], host, j, i);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

std::unique_ptr<NcclMesh> NcclMesh::open_across(const Mesh& mesh, Processes& processes,
                                                int64_t first, std::vector<int> ordinals,
                                                std::function<void(int)> bind,
                                                const std::string& declined, std::string* why) {
  const auto& lib = nccl_library();
  if (!declined.empty() || !lib.ok) {  // the others ask whether every process can join: no
    every_process_can_join(declined.empty() ? "no NCCL (" + lib.error + ")" : declined, processes,
                           ordinals, why);
    return nullptr;
  }
  return open_across(lib.api, mesh, processes, first, std::move(ordinals), std::move(bind), why);
}

std::unique_ptr<NcclMesh> NcclMesh::open_across(const NcclApi& api, const Mesh& mesh,
                                                Processes& processes, int64_t first,
                                                std::vector<int> ordinals,
                                                std::function<void(int)> bind, std::string* why) {
  if (!every_process_can_join("", processes, ordinals, why)) return nullptr;
  std::unique_ptr<NcclMesh> m(new NcclMesh(api, mesh, std::move(ordinals)));
  m->first_ = first;
  m->processes_ = &processes;
  m->bind_ = std::move(bind);
  m->version_ = m->say_version();
  m->init();
  return m;
}

void NcclMesh::init_across() {
  const auto local = static_cast<int64_t>(ordinals_.size());
  const int rank = processes_->rank();
  comms_.assign(mesh_.axes().size() * local, nullptr);
  // Every group, in the same order in every process, and each one's id from the process
  // holding its first device (as ProcessCommunicator shares the devices out: process r holds
  // devices r * local..).
  struct Group {
    int axis;
    std::vector<int64_t> members;
  };
  std::vector<Group> groups;
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    for (std::vector<int64_t>& members : mesh_.groups(static_cast<int>(a))) {
      groups.push_back({static_cast<int>(a), std::move(members)});
    }
  }
  struct Id {
    ncclUniqueId id;
    int32_t made;  // whether ncclGetUniqueId gave it
  };
  const size_t count = groups.size();
  std::vector<Id> mine(count), all(count * processes_->size());
  for (size_t g = 0; g < count; ++g) {
    std::memset(&mine[g], 0, sizeof(Id));
    if (groups[g].members[0] / local == rank) {
      mine[g].made = api_.ncclGetUniqueId(&mine[g].id) == ncclSuccess;
    }
  }
  processes_->world().all_gather(mine.data(), count * sizeof(Id), all.data());
  for (size_t g = 0; g < count; ++g) {  // the same check, and the same error, everywhere
    const int64_t owner = groups[g].members[0] / local;
    PRISM_CHECK(all[owner * count + g].made, "cuda: ncclGetUniqueId failed in rank {} of the run",
                owner);
  }
  check_nccl(api_, api_.ncclGroupStart(), "ncclGroupStart");
  try {
    for (size_t g = 0; g < count; ++g) {
      const std::vector<int64_t>& members = groups[g].members;
      const auto size = static_cast<int64_t>(members.size());
      const ncclUniqueId& id = all[(members[0] / local) * count + g].id;
      for (int64_t c = 0; c < size; ++c) {
        const int64_t device = members[c];
        if (device < first_ || device >= first_ + local) continue;
        if (bind_) bind_(ordinals_[device - first_]);
        ncclComm_t made = nullptr;
        check_nccl(api_,
                   api_.ncclCommInitRank(&made, static_cast<int>(size), id, static_cast<int>(c)),
                   "ncclCommInitRank");
        comms_[groups[g].axis * local + device - first_] = made;
      }
    }
  } catch (...) {
    api_.ncclGroupEnd();
    destroy(false);
    throw;
  }
  const ncclResult_t ended = api_.ncclGroupEnd();
  if (ended != ncclSuccess) destroy(false);
  check_nccl(api_, ended, "ncclGroupEnd");
}

void NcclMesh::init() {
  if (processes_) {
    init_across();
    return;
  }
  const int64_t n = mesh_.devices();
  comms_.assign(mesh_.axes().size() * n, nullptr);
  try {
    for (size_t a = 0; a < mesh_.axes().size(); ++a) {
      for (const std::vector<int64_t>& members : mesh_.groups(static_cast<int>(a))) {
        std::vector<int> gpus;
        for (int64_t device : members) gpus.push_back(ordinals_[device]);
        std::vector<ncclComm_t> made(members.size());
        check_nccl(api_,
                   api_.ncclCommInitAll(made.data(), static_cast<int>(members.size()), gpus.data()),
                   "ncclCommInitAll");
        for (size_t j = 0; j < members.size(); ++j) comms_[a * n + members[j]] = made[j];
      }
    }
  } catch (...) {
    destroy(false);
    throw;
  }
}

void NcclMesh::destroy(bool abort) {
  for (void*& c : comms_) {
    if (c) {
      auto comm = static_cast<ncclComm_t>(c);
      abort ? api_.ncclCommAbort(comm) : api_.ncclCommDestroy(comm);
    }
    c = nullptr;
  }
}

// Meshes live as long as the platform that made them, until the process exits, when NCCL and
// the driver may already be unloading: the communicators are left to the exit.
NcclMesh::~NcclMesh() = default;

void* NcclMesh::comm(int64_t device, int mesh_axis) {
  const auto local = static_cast<int64_t>(ordinals_.size());
  PRISM_CHECK(mesh_axis >= 0 && mesh_axis < static_cast<int>(mesh_.axes().size()) &&
                  device >= first_ && device < first_ + local,
              "cuda: device {} or mesh axis {} is not among the mesh {}'s devices here", device,
              mesh_axis, mesh_.str());
  PRISM_CHECK(!aborted_, "collectives: another device of the mesh failed");
  return comms_[mesh_axis * local + device - first_];
}

void NcclMesh::all_reduce(int64_t device, int mesh_axis, DType dtype, size_t count, CUdeviceptr in,
                          CUdeviceptr out, CUstream stream) {
  auto* c = static_cast<ncclComm_t>(comm(device, mesh_axis));
  check_nccl(api_,
             api_.ncclAllReduce(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                                count, nccl_type(dtype), ncclSum, c, stream),
             "ncclAllReduce");
}

void NcclMesh::all_gather(int64_t device, int mesh_axis, DType dtype, size_t count, CUdeviceptr in,
                          CUdeviceptr out, CUstream stream) {
  auto* c = static_cast<ncclComm_t>(comm(device, mesh_axis));
  check_nccl(api_,
             api_.ncclAllGather(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                                count, nccl_type(dtype), c, stream),
             "ncclAllGather");
}

void NcclMesh::reduce_scatter(int64_t device, int mesh_axis, DType dtype, size_t count,
                              CUdeviceptr in, CUdeviceptr out, CUstream stream) {
  auto* c = static_cast<ncclComm_t>(comm(device, mesh_axis));
  check_nccl(api_,
             api_.ncclReduceScatter(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                                    count, nccl_type(dtype), ncclSum, c, stream),
             "ncclReduceScatter");
}

// Another device may be waiting in a collective (in NCCL's kernel, or in its enqueue while
// the others connect): ncclCommAbort is made for that, and devices that come later see
// aborted_ first.
void NcclMesh::abort() {
  std::lock_guard lock(mutex_);
  if (aborted_.exchange(true)) return;
  destroy(true);
}

void NcclMesh::reset() {
  std::lock_guard lock(mutex_);
  if (!aborted_ || processes_) return;
  init();
  aborted_ = false;
}

#else  // no nccl.h: every mesh's collectives go through host memory

std::unique_ptr<NcclMesh> NcclMesh::open(const Mesh&, std::vector<int>, std::string* why) {
  *why = "built without NCCL's header";
  return nullptr;
}
std::unique_ptr<NcclMesh> NcclMesh::open_across(const Mesh&, Processes&, int64_t, std::vector<int>,
                                                std::function<void(int)>, const std::string&,
                                                std::string* why) {
  *why = "built without NCCL's header";
  return nullptr;
}
NcclMesh::~NcclMesh() = default;
bool NcclMesh::carries(DType) { return false; }
void NcclMesh::all_reduce(int64_t, int, DType, size_t, CUdeviceptr, CUdeviceptr, CUstream) {}
void NcclMesh::all_gather(int64_t, int, DType, size_t, CUdeviceptr, CUdeviceptr, CUstream) {}
void NcclMesh::reduce_scatter(int64_t, int, DType, size_t, CUdeviceptr, CUdeviceptr, CUstream) {}
void NcclMesh::abort() {}
void NcclMesh::reset() {}

#endif

}  // namespace prism::cuda
