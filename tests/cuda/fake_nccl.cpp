// A stand-in for NCCL (libnccl.so.2), for the tests of prism's NCCL meshes
// (prism/backends/cuda/nccl.h) on machines without GPUs: the functions prism calls, with
// NCCL's header and signatures, computing on host memory. The buffers are host addresses and
// streams are ignored; each rank calls from its own thread, and a collective returns once
// every rank of its communicator has made it (NCCL's would enqueue and return). Sums are of
// f32 elements only. As NCCL does for a device that does not exist, ncclCommInitAll fails
// for a negative GPU ordinal, so tests can make an initialization fail; ncclCommAbort wakes
// the ranks waiting in a collective, which then return an error.
#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
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

struct ncclComm {
  std::shared_ptr<Group> group;
  int rank = 0;
};

namespace {

// Publishes this rank's buffers, meets the others, lets `work` read every rank's operand into
// this rank's result (kept aside), meets again so that no operand is overwritten while read,
// then writes the result.
template <typename Work>
ncclResult_t exchange(ncclComm_t comm, const void* in, void* out, size_t out_bytes, Work work) {
  const std::shared_ptr<Group> keep = comm->group;  // an abort may delete comm meanwhile
  Group& g = *keep;
  g.in[comm->rank] = static_cast<const std::byte*>(in);
  if (!g.meet()) return ncclSystemError;
  std::vector<std::byte> result(out_bytes);
  work(g, result.data());
  if (!g.meet()) return ncclSystemError;
  if (out_bytes) std::memcpy(out, result.data(), out_bytes);
  return ncclSuccess;
}

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

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
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
  return exchange(comm, in, out, count * 4, [&](Group& g, std::byte* result) {
    auto* sum = reinterpret_cast<float*>(result);
    for (int r = 0; r < g.size; ++r) {
      const auto* x = reinterpret_cast<const float*>(g.in[r]);
      for (size_t i = 0; i < count; ++i) sum[i] += x[i];
    }
  });
}

ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * size_of(type);
  return exchange(comm, in, out, bytes * comm->group->size, [&](Group& g, std::byte* result) {
    for (int r = 0; r < g.size; ++r) std::memcpy(result + r * bytes, g.in[r], bytes);
  });
}

ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  const int rank = comm->rank;
  return exchange(comm, in, out, count * 4, [&](Group& g, std::byte* result) {
    auto* sum = reinterpret_cast<float*>(result);
    for (int r = 0; r < g.size; ++r) {
      const auto* x = reinterpret_cast<const float*>(g.in[r]) + rank * count;
      for (size_t i = 0; i < count; ++i) sum[i] += x[i];
    }
  });
}

}  // extern "C"
