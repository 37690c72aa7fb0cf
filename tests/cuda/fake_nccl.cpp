// A stand-in for NCCL (libnccl.so.2), for the tests of prism's NCCL meshes
// (prism/backends/cuda/nccl.h) on machines without GPUs: the functions prism calls, with
// NCCL's header and signatures, computing on host memory. The buffers are host addresses and
// streams are ignored; each rank calls from its own thread, and a collective returns once
// every rank of its communicator has made it (NCCL's would enqueue and return). Sums are of
// f32 elements only. As NCCL does for a device that does not exist, ncclCommInitAll fails
// for a negative GPU ordinal, so tests can make an initialization fail; ncclCommAbort wakes
// the ranks waiting in a collective, which then return an error.
//
// Communicators of ranks in several processes (ncclGetUniqueId, ncclCommInitRank) meet in a
// POSIX shared memory object the unique id names: each rank's operand goes to a slot of its
// own there (up to kSharedRanks ranks of kSlotBytes), and the ranks wait for each other on
// counters there, so an abort in one process wakes the ranks waiting in the others.
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct Group {
  explicit Group(int n) : size(n), in(n) {}
  int size;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const std::byte*> in;

  // Returns once every rank has come, or false once the group is aborted.
  bool meet() {
    std::unique_lock lock(mutex);
    if (aborted) return false;
    const uint64_t seen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      changed.notify_all();
      return true;
    }
    changed.wait(lock, [&] { return aborted || generation != seen; });
    return !aborted;
  }
};

size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace

namespace {

// The shared memory of a communicator across processes: counters, then one slot per rank.
constexpr int kSharedRanks = 16;
constexpr size_t kSlotBytes = size_t{1} << 20;
struct SharedHeader {
  std::atomic<int> ranks;   // set by the first rank to join
  std::atomic<int> joined;  // the last to join removes the object's name
  std::atomic<int> arrived;
  std::atomic<uint64_t> generation;
  std::atomic<int> aborted;
};
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kSharedBytes = kHeaderBytes + kSharedRanks * kSlotBytes;

struct Shared {
  SharedHeader* header = nullptr;
  std::byte* base = nullptr;  // the mapping
  std::byte* slot(int rank) const { return base + kHeaderBytes + rank * kSlotBytes; }

  // Returns once every rank has come, or false once one aborted.
  bool meet() const {
    SharedHeader& h = *header;
    if (h.aborted.load()) return false;
    const uint64_t seen = h.generation.load();
    if (h.arrived.fetch_add(1) + 1 == h.ranks.load()) {
      h.arrived.store(0);
      h.generation.fetch_add(1);
      return true;
    }
    for (int spins = 0; h.generation.load() == seen; ++spins) {
      if (h.aborted.load()) return false;
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Group> group;  // ranks of this process (ncclCommInitAll)
  int rank = 0;
  Shared shared;  // or ranks of several processes (ncclCommInitRank)
  int ranks = 0;
};

namespace {

// Publishes this rank's buffers, meets the others, lets `work` read every rank's operand into
// this rank's result (kept aside), meets again so that no operand is overwritten while read,
// then writes the result.
// Where a rank's operands lie for `work`: Group's `in`, or the shared slots.
struct Operands {
  const Group* group = nullptr;
  const Shared* shared = nullptr;
  int size = 0;
  const std::byte* operator[](int rank) const {
    return group ? group->in[rank] : shared->slot(rank);
  }
};

// The same across processes: the operand (in_bytes of it) is copied into this rank's slot.
template <typename Work>
ncclResult_t exchange_shared(ncclComm_t comm, const void* in, size_t in_bytes, void* out,
                             size_t out_bytes, Work work) {
  if (in_bytes > kSlotBytes) return ncclInvalidArgument;
  const Shared shared = comm->shared;  // an abort unmaps comm's view meanwhile: keep this one
  std::memcpy(shared.slot(comm->rank), in, in_bytes);
  if (!shared.meet()) return ncclSystemError;
  std::vector<std::byte> result(out_bytes);
  work(Operands{nullptr, &shared, comm->ranks}, result.data());
  if (!shared.meet()) return ncclSystemError;
  if (out_bytes) std::memcpy(out, result.data(), out_bytes);
  return ncclSuccess;
}

template <typename Work>
ncclResult_t exchange(ncclComm_t comm, const void* in, size_t in_bytes, void* out, size_t out_bytes,
                      Work work) {
  if (comm->shared.base) return exchange_shared(comm, in, in_bytes, out, out_bytes, work);
  const std::shared_ptr<Group> keep = comm->group;  // an abort may delete comm meanwhile
  Group& g = *keep;
  g.in[comm->rank] = static_cast<const std::byte*>(in);
  if (!g.meet()) return ncclSystemError;
  std::vector<std::byte> result(out_bytes);
  work(Operands{&g, nullptr, g.size}, result.data());
  if (!g.meet()) return ncclSystemError;
  if (out_bytes) std::memcpy(out, result.data(), out_bytes);
  return ncclSuccess;
}

int ranks_of(ncclComm_t comm) { return comm->shared.base ? comm->ranks : comm->group->size; }

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    default:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  }
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  for (int i = 0; i < ndev; ++i) {
    if (devlist[i] < 0) return ncclInvalidUsage;
  }
  auto group = std::make_shared<Group>(ndev);
  for (int i = 0; i < ndev; ++i) comms[i] = new ncclComm{group, i};
  return ncclSuccess;
}

// The id names a shared memory object, made here, sparse until the ranks write their slots.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> made{0};
  std::memset(id, 0, sizeof(*id));
  std::snprintf(id->internal, sizeof(id->internal), "/prism-fake-nccl-%d-%d",
                static_cast<int>(getpid()), made.fetch_add(1));
  const int fd = shm_open(id->internal, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  const bool sized = ftruncate(fd, static_cast<off_t>(kSharedBytes)) == 0;
  close(fd);
  if (!sized) shm_unlink(id->internal);
  return sized ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || nranks > kSharedRanks || rank < 0 || rank >= nranks) {
    return ncclInvalidArgument;
  }
  const int fd = shm_open(id.internal, O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  void* base = mmap(nullptr, kSharedBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return ncclSystemError;
  auto* header = static_cast<SharedHeader*>(base);
  int expected = 0;
  if (!header->ranks.compare_exchange_strong(expected, nranks) && expected != nranks) {
    munmap(base, kSharedBytes);
    return ncclInvalidUsage;
  }
  if (header->joined.fetch_add(1) + 1 == nranks) shm_unlink(id.internal);
  *comm = new ncclComm{nullptr, rank, Shared{header, static_cast<std::byte*>(base)}, nranks};
  return ncclSuccess;
}

// Each rank of a process's group is initialized without waiting for the others here.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm->shared.base) munmap(comm->shared.base, kSharedBytes);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm->shared.base) {
    // The mapping stays (a rank of this process may be waiting in it): the process's exit
    // unmaps it.
    comm->shared.header->aborted.store(1);
    delete comm;
    return ncclSuccess;
  }
  {
    std::lock_guard lock(comm->group->mutex);
    comm->group->aborted = true;
  }
  comm->group->changed.notify_all();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  return exchange(comm, in, count * 4, out, count * 4, [&](Operands x, std::byte* result) {
    auto* sum = reinterpret_cast<float*>(result);
    for (int r = 0; r < x.size; ++r) {
      const auto* v = reinterpret_cast<const float*>(x[r]);
      for (size_t i = 0; i < count; ++i) sum[i] += v[i];
    }
  });
}

ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * size_of(type);
  return exchange(comm, in, bytes, out, bytes * ranks_of(comm), [&](Operands x, std::byte* result) {
    for (int r = 0; r < x.size; ++r) std::memcpy(result + r * bytes, x[r], bytes);
  });
}

ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  const int rank = comm->rank;
  const size_t in_bytes = count * 4 * ranks_of(comm);
  return exchange(comm, in, in_bytes, out, count * 4, [&](Operands x, std::byte* result) {
    auto* sum = reinterpret_cast<float*>(result);
    for (int r = 0; r < x.size; ++r) {
      const auto* v = reinterpret_cast<const float*>(x[r]) + rank * count;
      for (size_t i = 0; i < count; ++i) sum[i] += v[i];
    }
  });
}

}  // extern "C"
