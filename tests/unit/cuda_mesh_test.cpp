// The CUDA backend's meshes without a GPU: the copies that put NCCL's blocks where a mesh's
// shards lie, and prism's NCCL communicators (nccl.h) on a stand-in library that implements
// NCCL's functions on host memory (tests/cuda/fake_nccl.cpp): which devices meet along each
// mesh axis, in which order, and what a failed device does to the others. The collectives on
// GPUs are checked on a GPU machine (tensor_parallel_test.cpp, tools/gpu_check_prebuilt.sh).
#if PRISM_WITH_CUDA

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/backends/cuda/nccl.h"
#include "prism/runtime/sharded.h"
#include "tests/unit/test_util.h"

namespace prism::cuda {
namespace {

Shape shape(DType t, std::initializer_list<Dim> dims) { return Shape(t, dims); }

// The copies around NCCL's gathers and scatters along an inner dimension, done on the host:
// blocks in NCCL's order (one device's after another) go where the mesh's shards of the whole
// tensor lie (runtime/sharded.h's shard_of, the loader's own cut), and back.
TEST(CudaMesh, BlockCopiesPutNcclsBlocksWhereTheShardsLie) {
  auto apply = [](const std::vector<RowCopy>& copies, const std::byte* src, std::byte* dst) {
    for (const RowCopy& c : copies) {
      for (size_t h = 0; h < c.height; ++h) {
        std::memcpy(dst + c.dst + h * c.dst_pitch, src + c.src + h * c.src_pitch, c.width);
      }
    }
  };
  struct Case {
    Shape whole;
    int axis;
    int64_t group;
  };
  const std::vector<Case> cases = {
      {shape(DType::f32, {{"s", 3}, {"v", 8}}), 1, 2},
      {shape(DType::f32, {{"s", 3}, {"v", 8}}), 1, 4},
      {shape(DType::bf16, {{"a", 2}, {"b", 6}, {"c", 5}}), 1, 3},
      {shape(DType::f32, {{"a", 2}, {"b", 3}, {"c", 4}}), 2, 2},
      {shape(DType::f32, {{"a", 4}, {"b", 3}}), 0, 4},  // the outermost: NCCL's own order
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.whole.str() + " along " + std::to_string(c.axis));
    std::vector<std::byte> bytes(c.whole.bytes());  // every element's bytes differ
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i % 251);
    const HostBuffer whole(c.whole, bytes);
    const Mesh mesh({{"model", c.group}});
    compiler::Split split(c.whole.rank(), -1);
    split[c.axis] = 0;
    std::vector<std::byte> nccl_order;
    for (int64_t r = 0; r < c.group; ++r) {
      const HostBuffer shard = shard_of(whole, split, mesh, r);
      nccl_order.insert(nccl_order.end(), shard.data(), shard.data() + shard.size_bytes());
    }
    ASSERT_EQ(nccl_order.size(), whole.size_bytes());
    const std::vector<RowCopy> gather = block_copies(c.whole, c.axis, c.group, true);
    const std::vector<RowCopy> scatter = block_copies(c.whole, c.axis, c.group, false);
    EXPECT_EQ(gather.empty(), c.axis == 0);
    if (gather.empty()) {
      EXPECT_TRUE(scatter.empty());
      EXPECT_EQ(std::memcmp(nccl_order.data(), whole.data(), whole.size_bytes()), 0);
      continue;
    }
    std::vector<std::byte> gathered(whole.size_bytes()), scattered(whole.size_bytes());
    apply(gather, nccl_order.data(), gathered.data());
    EXPECT_EQ(std::memcmp(gathered.data(), whole.data(), whole.size_bytes()), 0);
    apply(scatter, whole.data(), scattered.data());
    EXPECT_EQ(scattered, nccl_order);
  }
  EXPECT_EQ(testing::error_of([] {
              block_copies(Shape(DType::f32, {{"s", 3}, {"v", 6}}), 1, 4, true);
            }),
            "cuda: f32{s=3,v=6} does not split into 4 blocks along dimension 1");
}

#if defined(PRISM_CUDA_NCCL) && defined(PRISM_FAKE_NCCL)

// The stand-in, or null where this binary runs away from its build tree (a GPU machine's
// bundle, tools/gpu_bundle.sh), which skips the tests that need it.
const NcclApi* fake_nccl() {
  static const Loaded<NcclApi> lib = load_nccl(PRISM_FAKE_NCCL);
  return lib.ok ? &lib.api : nullptr;
}

#define PRISM_NEEDS_FAKE_NCCL() \
  if (!fake_nccl()) GTEST_SKIP() << "no stand-in NCCL at " << PRISM_FAKE_NCCL

CUdeviceptr at(const float* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Runs fn(k) for every device k of `mesh` at once, each on its own thread, as a mesh's
// devices run.
void on_every_device(const Mesh& mesh, const std::function<void(int64_t)>& fn) {
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < mesh.devices(); ++k) threads.emplace_back(fn, k);
  for (std::thread& t : threads) t.join();
}

// On a 2 x 2 mesh, each device meets the one that differs from it along the axis asked:
// along "model" devices 0-1 and 2-3, along "data" 0-2 and 1-3, in the order of their
// coordinates.
TEST(CudaMesh, NcclCommunicatorsFollowTheMeshAxes) {
  PRISM_NEEDS_FAKE_NCCL();
  const Mesh mesh({{"data", 2}, {"model", 2}});
  std::string why;
  auto nccl = NcclMesh::open(*fake_nccl(), mesh, {0, 1, 2, 3}, &why);
  ASSERT_TRUE(nccl) << why;
  EXPECT_EQ(nccl->version(), "NCCL 2.28.9");
  std::vector<std::vector<float>> model_sum(4), data_sum(4), data_gather(4), model_scatter(4);
  on_every_device(mesh, [&](int64_t k) {
    const std::vector<float> in{float(k + 1), float(10 * (k + 1))};
    std::vector<float>& ms = model_sum[k] = std::vector<float>(2);
    nccl->all_reduce(k, 1, DType::f32, 2, at(in.data()), at(ms.data()), nullptr);
    std::vector<float>& ds = data_sum[k] = std::vector<float>(2);
    nccl->all_reduce(k, 0, DType::f32, 2, at(in.data()), at(ds.data()), nullptr);
    std::vector<float>& dg = data_gather[k] = std::vector<float>(4);
    nccl->all_gather(k, 0, DType::f32, 2, at(in.data()), at(dg.data()), nullptr);
    std::vector<float>& mr = model_scatter[k] = std::vector<float>(1);
    nccl->reduce_scatter(k, 1, DType::f32, 1, at(in.data()), at(mr.data()), nullptr);
  });
  EXPECT_EQ(model_sum[0], (std::vector<float>{3, 30}));
  EXPECT_EQ(model_sum[1], (std::vector<float>{3, 30}));
  EXPECT_EQ(model_sum[2], (std::vector<float>{7, 70}));
  EXPECT_EQ(model_sum[3], (std::vector<float>{7, 70}));
  EXPECT_EQ(data_sum[0], (std::vector<float>{4, 40}));
  EXPECT_EQ(data_sum[2], (std::vector<float>{4, 40}));
  EXPECT_EQ(data_sum[1], (std::vector<float>{6, 60}));
  EXPECT_EQ(data_sum[3], (std::vector<float>{6, 60}));
  EXPECT_EQ(data_gather[0], (std::vector<float>{1, 10, 3, 30}));
  EXPECT_EQ(data_gather[3], (std::vector<float>{2, 20, 4, 40}));
  // Along "model", device 2 (coordinate 0) keeps the first elements' sum, device 3 the second.
  EXPECT_EQ(model_scatter[2], (std::vector<float>{7}));
  EXPECT_EQ(model_scatter[3], (std::vector<float>{70}));
}

// A device waiting for the others in a collective returns with NCCL's error once another
// failed (abort); later calls fail at once, naming why; reset() makes new communicators.
TEST(CudaMesh, NcclAbortWakesWaitingDevicesAndResetMakesNewOnes) {
  PRISM_NEEDS_FAKE_NCCL();
  const Mesh mesh({{"model", 2}});
  std::string why;
  auto nccl = NcclMesh::open(*fake_nccl(), mesh, {0, 1}, &why);
  ASSERT_TRUE(nccl) << why;
  const std::vector<float> in{1, 2};
  std::vector<float> out(2);
  std::string waiting_error;
  std::thread alone([&] {
    waiting_error = testing::error_of(
        [&] { nccl->all_reduce(0, 0, DType::f32, 2, at(in.data()), at(out.data()), nullptr); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  nccl->abort();
  alone.join();
  // NCCL's error where the device was waiting by then (it always was but on a very busy
  // machine, where it came after the abort and failed at once).
  EXPECT_TRUE(waiting_error.rfind("cuda: ncclAllReduce: ", 0) == 0 ||
              waiting_error == "collectives: another device of the mesh failed")
      << waiting_error;
  EXPECT_EQ(testing::error_of([&] {
              nccl->all_reduce(1, 0, DType::f32, 2, at(in.data()), at(out.data()), nullptr);
            }),
            "collectives: another device of the mesh failed");
  nccl->reset();
  std::vector<std::vector<float>> sums(2, std::vector<float>(2));
  on_every_device(mesh, [&](int64_t k) {
    nccl->all_reduce(k, 0, DType::f32, 2, at(in.data()), at(sums[k].data()), nullptr);
  });
  EXPECT_EQ(sums[0], (std::vector<float>{2, 4}));
  EXPECT_EQ(sums[1], (std::vector<float>{2, 4}));
}

// Where NCCL cannot serve a mesh, open() says why and the mesh's collectives go through host
// memory: one GPU holding two devices, an initialization that fails.
TEST(CudaMesh, NcclSaysWhyItCannotServeAMesh) {
  PRISM_NEEDS_FAKE_NCCL();
  const Mesh mesh({{"model", 2}});
  std::string why;
  EXPECT_FALSE(NcclMesh::open(*fake_nccl(), mesh, {0, 0}, &why));
  EXPECT_EQ(why, "GPU 0 holds devices 0 and 1 (NCCL wants distinct GPUs)");
  EXPECT_FALSE(NcclMesh::open(*fake_nccl(), mesh, {0, -1}, &why));
  EXPECT_EQ(why.rfind("cuda: ncclCommInitAll: invalid usage", 0), 0u) << why;
  EXPECT_FALSE(NcclMesh::carries(DType::i16));
  EXPECT_TRUE(NcclMesh::carries(DType::bf16));
}

#endif  // PRISM_CUDA_NCCL && PRISM_FAKE_NCCL

}  // namespace
}  // namespace prism::cuda

#endif  // PRISM_WITH_CUDA
