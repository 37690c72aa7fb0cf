// Collectives between the processes of a run (prism/runtime/processes.h), against the same
// collectives between threads of one process (HostCommunicator): the same bits. These tests
// run under `mpirun -n 3` and `mpirun -n 4` (tests/CMakeLists.txt); in a run of one process
// they skip.
#include "prism/runtime/processes.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "prism/core/mesh.h"
#include "prism/runtime/collectives.h"
#include "tests/unit/test_util.h"

#if PRISM_WITH_CUDA
#include "prism/backends/cuda/cuda_api.h"
#include "prism/backends/cuda/nccl.h"
#endif

namespace prism {
namespace {

using testing::S;

HostBuffer random_values(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(shape.numel());
  for (float& x : v) x = u(rng);
  return HostBuffer::from<float>(S({{"n", shape.numel()}}), v)
      .convert(shape.dtype())
      .reshaped(shape);
}

enum class Kind { all_reduce, all_gather, reduce_scatter };

// A buffer for the result of `kind` along `axis` of `shape` over a group of `group` devices.
HostBuffer result_shape_of(Kind kind, const Shape& shape, int axis, int64_t group) {
  std::vector<Dim> dims(shape.dims().begin(), shape.dims().end());
  if (kind == Kind::all_gather) dims[axis].size *= group;
  if (kind == Kind::reduce_scatter) dims[axis].size /= group;
  return HostBuffer(Shape(shape.dtype(), dims));
}

void run(Communicator& comm, Kind kind, int64_t device, int mesh_axis, int axis,
         const HostBuffer& in, HostBuffer& out) {
  switch (kind) {
    case Kind::all_reduce:
      return comm.all_reduce(device, mesh_axis, in.shape(), in.data(), out.data());
    case Kind::all_gather:
      return comm.all_gather(device, mesh_axis, axis, in.shape(), in.data(), out.data());
    case Kind::reduce_scatter:
      return comm.reduce_scatter(device, mesh_axis, axis, in.shape(), in.data(), out.data());
  }
}

// This process's devices' results, and the ones threads of one process give those devices,
// for each case: the same bits.
void expect_same_bits(const Mesh& mesh) {
  SCOPED_TRACE(mesh.str());
  Processes* processes = Processes::get();
  ProcessCommunicator across(mesh, *processes);
  HostCommunicator within(mesh);
  const int64_t first = across.first_device(), local = across.local_devices();
  ASSERT_EQ(local * processes->size(), mesh.devices());
  ASSERT_EQ(first, processes->rank() * local);
  struct Case {
    Kind kind;
    Shape shape;
    int mesh_axis, axis;
  };
  std::vector<Case> cases;
  for (int a = 0; a < static_cast<int>(mesh.axes().size()); ++a) {
    const int64_t g = mesh.axes()[a].size;
    for (DType t : {DType::f32, DType::bf16, DType::i32}) {
      // An element count the group does not divide: chunks of unequal sizes.
      cases.push_back({Kind::all_reduce, Shape(t, {{"a", 7}, {"b", 5}}), a, 0});
      cases.push_back({Kind::all_gather, Shape(t, {{"a", 3}, {"b", 5}}), a, 1});
      cases.push_back({Kind::all_gather, Shape(t, {{"a", 3}, {"b", 5}}), a, 0});
      cases.push_back({Kind::reduce_scatter, Shape(t, {{"a", 3}, {"b", 2 * g}}), a, 1});
      cases.push_back({Kind::reduce_scatter, Shape(t, {{"a", 2 * g}, {"b", 3}}), a, 0});
    }
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    SCOPED_TRACE(::testing::Message()
                 << "case " << c << " " << k.shape.str() << " mesh axis " << k.mesh_axis);
    const int64_t group = mesh.axes()[k.mesh_axis].size;
    auto operand = [&](int64_t device) {
      return random_values(k.shape, static_cast<uint32_t>(100 * c + device));
    };
    // Every device at once on threads: this process's through MPI and shared memory, and the
    // whole mesh's in one process.
    auto run_all = [&](Communicator& comm, int64_t from, int64_t count, bool in_place) {
      std::vector<HostBuffer> operands, results;
      for (int64_t d = from; d < from + count; ++d) {
        operands.push_back(operand(d));
        results.push_back(result_shape_of(k.kind, k.shape, k.axis, group));
      }
      std::vector<std::thread> threads;
      for (int64_t i = 0; i < count; ++i) {
        threads.emplace_back([&, i] {
          HostBuffer& out = in_place ? operands[i] : results[i];
          run(comm, k.kind, from + i, k.mesh_axis, k.axis, operands[i], out);
        });
      }
      for (auto& t : threads) t.join();
      return in_place ? operands : results;
    };
    const std::vector<HostBuffer> want = run_all(within, 0, mesh.devices(), false);
    const std::vector<HostBuffer> got = run_all(across, first, local, false);
    for (int64_t i = 0; i < local; ++i) {
      ASSERT_EQ(got[i].shape(), want[first + i].shape());
      EXPECT_EQ(0, std::memcmp(got[i].data(), want[first + i].data(), got[i].shape().bytes()))
          << "device " << first + i;
    }
    if (k.kind == Kind::all_reduce) {  // in place: the result in the operand's memory
      const std::vector<HostBuffer> in_place = run_all(across, first, local, true);
      for (int64_t i = 0; i < local; ++i) {
        EXPECT_EQ(
            0, std::memcmp(in_place[i].data(), want[first + i].data(), in_place[i].shape().bytes()))
            << "device " << first + i << " in place";
      }
    }
  }
}

TEST(Processes, CollectivesGiveTheBitsOfOneProcess) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  const int n = processes->size();
  expect_same_bits(Mesh({{"model", n}}));
  if (n % 2 == 0) expect_same_bits(Mesh({{"data", 2}, {"model", n / 2}}));
  if (n % 2 == 0) expect_same_bits(Mesh({{"model", n / 2}, {"data", 2}}));
}

// Several devices in each process: groups within a process, groups across processes with
// one member or several in each.
TEST(Processes, CollectivesOfSeveralDevicesInEachProcess) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  const int n = processes->size();
  expect_same_bits(Mesh({{"model", 2 * n}}));
  expect_same_bits(Mesh({{"data", n}, {"model", 2}}));
  expect_same_bits(Mesh({{"data", 2}, {"model", n}}));
  expect_same_bits(Mesh({{"model", 3 * n}}));
}

TEST(Processes, EachKnowsItsPlace) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  EXPECT_EQ(processes->size(), Processes::asked());
  EXPECT_FALSE(processes->host().empty());
  // Every rank once, in order.
  std::vector<int> ranks(processes->size());
  const int mine = processes->rank();
  processes->world().all_gather(&mine, sizeof mine, ranks.data());
  for (int r = 0; r < processes->size(); ++r) EXPECT_EQ(ranks[r], r);
  // Rank 0's bytes to all.
  std::vector<char> text(5, 0);
  if (mine == 0) text = {'h', 'e', 'l', 'l', 'o'};
  processes->world().broadcast(text.data(), text.size(), 0);
  EXPECT_EQ(std::string(text.begin(), text.end()), "hello");
}

// A mesh whose devices do not share out evenly over the processes is refused, on every
// process alike.
TEST(Processes, AMeshThatDoesNotShareOutIsRefused) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  const int n = processes->size();
  EXPECT_EQ(testing::error_of([&] {
              ProcessCommunicator(Mesh({{"model", n + 1}}), *processes);
            }),
            fmt::format("collectives: the mesh {{model={}}} has {} devices, which do not share "
                        "out evenly over the run's {} processes",
                        n + 1, n + 1, n));
}

#if PRISM_WITH_CUDA && defined(PRISM_CUDA_NCCL) && defined(PRISM_FAKE_NCCL)

// NCCL's communicators of a CUDA mesh across the processes (cuda/nccl.h, open_across), on the
// stand-in library (tests/cuda/fake_nccl.cpp: its ranks in several processes meet in shared
// memory, host buffers for device memory): each group's id from the process holding its first
// device, handed out over MPI, and every device in the groups of its coordinates.
const cuda::NcclApi* fake_nccl() {
  static const cuda::Loaded<cuda::NcclApi> lib = cuda::load_nccl(PRISM_FAKE_NCCL);
  return lib.ok ? &lib.api : nullptr;
}

CUdeviceptr at(const float* p) { return reinterpret_cast<CUdeviceptr>(p); }

// This process's devices of `mesh` (`local` from `first`) on GPUs of their own, device d's
// operand {d + 1, 10 (d + 1), 100 (d + 1), ...}: along each axis, the sum of the group's first
// two values, the gather of them, and the scatter of the sums of all `size` of them, computed
// by hand from the members' indices.
void expect_nccl_groups(const Mesh& mesh, Processes& processes) {
  SCOPED_TRACE(mesh.str());
  const int64_t local = mesh.devices() / processes.size(), first = processes.rank() * local;
  std::vector<int> ordinals;
  for (int64_t k = 0; k < local; ++k) ordinals.push_back(static_cast<int>(first + k));
  std::string why;
  auto nccl =
      cuda::NcclMesh::open_across(*fake_nccl(), mesh, processes, first, ordinals, nullptr, &why);
  ASSERT_TRUE(nccl) << why;
  for (int a = 0; a < static_cast<int>(mesh.axes().size()); ++a) {
    SCOPED_TRACE("mesh axis " + std::to_string(a));
    const int64_t size = mesh.axes()[a].size, stride = mesh.stride(a);
    auto operand = [&](int64_t d) {
      std::vector<float> x;
      for (int64_t i = 0, scale = 1; i < std::max<int64_t>(size, 2); ++i, scale *= 10) {
        x.push_back(float((d + 1) * scale));
      }
      return x;
    };
    std::vector<std::vector<float>> sums(local), gathers(local), scatters(local);
    std::vector<std::thread> threads;  // each device from its own thread, as a mesh's run
    for (int64_t k = 0; k < local; ++k) {
      threads.emplace_back([&, k] {
        const int64_t d = first + k;
        const std::vector<float> in = operand(d);
        sums[k].assign(2, 0);
        gathers[k].assign(2 * size, 0);
        scatters[k].assign(1, 0);
        nccl->all_reduce(d, a, DType::f32, 2, at(in.data()), at(sums[k].data()), nullptr);
        nccl->all_gather(d, a, DType::f32, 2, at(in.data()), at(gathers[k].data()), nullptr);
        nccl->reduce_scatter(d, a, DType::f32, 1, at(in.data()), at(scatters[k].data()), nullptr);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int64_t k = 0; k < local; ++k) {
      const int64_t d = first + k, c = mesh.coordinate(d, a), base = d - c * stride;
      std::vector<float> sum(std::max<int64_t>(size, 2), 0), gather;
      for (int64_t j = 0; j < size; ++j) {
        const std::vector<float> x = operand(base + j * stride);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
        gather.insert(gather.end(), x.begin(), x.begin() + 2);
      }
      EXPECT_EQ(sums[k], std::vector<float>(sum.begin(), sum.begin() + 2)) << "device " << d;
      EXPECT_EQ(gathers[k], gather) << "device " << d;
      EXPECT_EQ(scatters[k], std::vector<float>{sum[c]}) << "device " << d;
    }
  }
}

TEST(Processes, NcclGroupsAcrossProcesses) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  if (!fake_nccl()) GTEST_SKIP() << "no stand-in NCCL at " << PRISM_FAKE_NCCL;
  const int n = processes->size();
  expect_nccl_groups(Mesh({{"model", n}}), *processes);               // a device in each
  expect_nccl_groups(Mesh({{"data", 2}, {"model", n}}), *processes);  // groups within and across
  expect_nccl_groups(Mesh({{"model", 2}, {"data", n}}), *processes);
}

// Where NCCL cannot serve some process, every process hears why and takes none: here two
// processes of one host name the same GPU.
TEST(Processes, NcclAcrossProcessesSaysWhyItCannotServe) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  if (!fake_nccl()) GTEST_SKIP() << "no stand-in NCCL at " << PRISM_FAKE_NCCL;
  const int n = processes->size();
  std::string why;
  // Process r holds device r on GPU r, but the last process also names GPU 0.
  const int gpu = processes->rank() == n - 1 ? 0 : processes->rank();
  EXPECT_FALSE(cuda::NcclMesh::open_across(*fake_nccl(), Mesh({{"model", n}}), *processes,
                                           processes->rank(), {gpu}, nullptr, &why));
  bool one_host = true;
  for (int r = 0; r < n; ++r) one_host = one_host && processes->host_of(r) == processes->host();
  if (one_host) {
    EXPECT_EQ(why, fmt::format("GPU 0 of {} holds devices 0 and {} (NCCL wants distinct GPUs)",
                               processes->host(), n - 1));
  }
}

// A process whose device fails aborts its communicators: the devices of the other processes
// waiting for it in a collective return with NCCL's error instead of waiting forever.
TEST(Processes, NcclAbortInOneProcessWakesTheOthers) {
  Processes* processes = Processes::get();
  if (!processes) GTEST_SKIP() << "a run of one process (tests run this under mpirun)";
  if (!fake_nccl()) GTEST_SKIP() << "no stand-in NCCL at " << PRISM_FAKE_NCCL;
  const int rank = processes->rank();
  std::string why;
  auto nccl = cuda::NcclMesh::open_across(*fake_nccl(), Mesh({{"model", processes->size()}}),
                                          *processes, rank, {rank}, nullptr, &why);
  ASSERT_TRUE(nccl) << why;
  const std::vector<float> in{1, 2};
  std::vector<float> out(2);
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    nccl->abort();
    EXPECT_EQ(testing::error_of([&] {
                nccl->all_reduce(0, 0, DType::f32, 2, at(in.data()), at(out.data()), nullptr);
              }),
              "collectives: another device of the mesh failed");
  } else {
    EXPECT_EQ(testing::error_of([&] {
                nccl->all_reduce(rank, 0, DType::f32, 2, at(in.data()), at(out.data()), nullptr);
              }).rfind("cuda: ncclAllReduce: ", 0),
              0u);
  }
  nccl->reset();  // across processes, a failed mesh stays failed
  EXPECT_NE(testing::error_of([&] {
              nccl->all_reduce(rank, 0, DType::f32, 2, at(in.data()), at(out.data()), nullptr);
            }),
            "");
  processes->world().all_gather(&rank, sizeof rank, std::vector<int>(processes->size()).data());
}

#endif  // PRISM_WITH_CUDA && PRISM_CUDA_NCCL && PRISM_FAKE_NCCL

// The run leaves MPI once every test is done (an MPI process must, before it exits).
class LeaveMpi : public ::testing::Environment {
 public:
  void TearDown() override {
    if (Processes* processes = Processes::running()) processes->finish(0);
  }
};
const auto* leave_mpi = ::testing::AddGlobalTestEnvironment(new LeaveMpi);

}  // namespace
}  // namespace prism
