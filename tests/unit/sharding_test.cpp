// Meshes, shardings, the partitioner and the CPU's devices: each collective against a plain
// reference, tensor-parallel programs against the same program on one device, and the errors
// bad meshes and shardings give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "prism/compiler/partition.h"
#include "prism/core/mesh.h"
#include "prism/runtime/collectives.h"
#include "prism/runtime/sharded.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::error_of;
using testing::S;

HostBuffer random_f32(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(shape.numel());
  for (float& x : v) x = u(rng);
  return HostBuffer::from<float>(shape, v);
}

using testing::CpuDevices;

TEST(Mesh, ParsesAxesAndCoordinates) {
  Mesh m = Mesh::parse("data:2,model:3");
  EXPECT_EQ(m.devices(), 6);
  EXPECT_EQ(m.str(), "{data=2,model=3}");
  EXPECT_EQ(m.coordinate(4, 0), 1);  // device 4 = (1, 1)
  EXPECT_EQ(m.coordinate(4, 1), 1);
  EXPECT_EQ(m.coordinate(5, 1), 2);
  using Groups = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(m.groups(0), (Groups{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(m.groups(1), (Groups{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(*m.find("model"), 1);
  EXPECT_FALSE(m.find("pipe"));
  EXPECT_EQ(error_of([] { Mesh::parse("model"); }),
            "mesh: 'model' is not an axis and its size (as in model:2)");
  EXPECT_EQ(error_of([] { Mesh::parse("model:0"); }), "mesh: axis 'model' has size 0 (at least 1)");
  EXPECT_EQ(error_of([] { Mesh::parse("model:2,model:2"); }), "mesh: axis 'model' is named twice");
  EXPECT_EQ(error_of([] { Mesh::parse("mo\"del:2"); }),
            "mesh: axis name 'mo\"del' is not a word (letters, digits and _)");
}

TEST(Sharding, ResolvesTagsToMeshAxesAndNamesWhatDoesNotDivide) {
  Mesh m({{"model", 4}});
  Shape w = S({{"f", 12}, {"d", 6}});
  EXPECT_EQ(Sharding().split("f", "model").resolve(w, m, "w"), (std::vector<int>{0, -1}));
  // An axis the mesh lacks leaves the tag whole.
  EXPECT_EQ(Sharding().split("f", "data").resolve(w, m, "w"), (std::vector<int>{-1, -1}));
  EXPECT_EQ(error_of([&] { Sharding().split("d", "model").resolve(w, m, "parameter \"w\""); }),
            "parameter \"w\": tag 'd' of size 6 does not divide by mesh axis 'model' of 4 "
            "devices");
  EXPECT_EQ(error_of([&] { Sharding().split("x", "model").resolve(w, m, "w"); }),
            "w: split tag 'x' is not one of f32{f=12,d=6}");
  EXPECT_EQ(error_of([] { Sharding().split("f", "model").split("d", "model"); }),
            "sharding: tags 'f' and 'd' are both split over axis 'model'");
  Sharding s = Sharding().split("f", "model").split("d", "data");
  EXPECT_EQ(Sharding::parse(s.str()), s);
  EXPECT_EQ(error_of([] {
              Tensor::parameter("w", S({{"d", 4}}), Sharding().split("f", "model"));
            }),
            "parameter \"w\": split tag 'f' is not one of f32{d=4}");
}

// Each collective against the plain sum, concatenation and block of the devices' operands.
TEST(Collectives, HostCommunicatorMatchesThePlainReference) {
  for (int n : {2, 4}) {
    HostCommunicator comm(Mesh({{"model", n}}));
    const Shape shape = S({{"a", 3}, {"b", 4}});
    std::vector<HostBuffer> in;
    for (int k = 0; k < n; ++k) in.push_back(random_f32(shape, 7 + k));
    std::vector<HostBuffer> reduced, gathered, scattered;
    for (int k = 0; k < n; ++k) {
      reduced.emplace_back(shape);
      gathered.emplace_back(S({{"a", 3}, {"b", 4 * n}}));
      scattered.emplace_back(S({{"a", 3}, {"b", 4 / n}}));
    }
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        comm.all_reduce(k, 0, shape, in[k].data(), reduced[k].data());
        comm.all_gather(k, 0, 1, shape, in[k].data(), gathered[k].data());
        comm.reduce_scatter(k, 0, 1, shape, in[k].data(), scattered[k].data());
      });
    }
    for (auto& t : threads) t.join();
    // In place (the result in the operand's memory), in bf16: the same sums, rounded once.
    std::vector<HostBuffer> in_place;
    for (int k = 0; k < n; ++k) in_place.push_back(in[k].convert(DType::bf16));
    threads.clear();
    for (int k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        comm.all_reduce(k, 0, in_place[k].shape(), in_place[k].data(), in_place[k].data());
      });
    }
    for (auto& t : threads) t.join();
    for (int k = 0; k < n; ++k) {
      for (int i = 0; i < 12; ++i) {
        double sum = 0;
        for (int g = 0; g < n; ++g) sum += in[g].convert(DType::bf16).to_f64()[i];
        EXPECT_EQ(
            in_place[k].to_f64()[i],
            HostBuffer::from<float>(S({{"x", 1}}), {float(sum)}).convert(DType::bf16).to_f64()[0]);
      }
    }
    for (int k = 0; k < n; ++k) {
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 4; ++b) {
          double sum = 0;
          for (int g = 0; g < n; ++g) sum += in[g].as<float>()[a * 4 + b];
          EXPECT_FLOAT_EQ(reduced[k].as<float>()[a * 4 + b], static_cast<float>(sum));
          for (int g = 0; g < n; ++g) {
            EXPECT_EQ(gathered[k].as<float>()[a * 4 * n + g * 4 + b], in[g].as<float>()[a * 4 + b]);
          }
          const int block = 4 / n;
          if (b / block == k) {
            EXPECT_FLOAT_EQ(scattered[k].as<float>()[a * block + b % block],
                            static_cast<float>(sum));
          }
        }
      }
    }
  }
}

// An error on one device wakes the others waiting in a collective instead of leaving them.
TEST(Collectives, AnAbortWakesTheDevicesWaiting) {
  HostCommunicator comm(Mesh({{"model", 2}}));
  HostBuffer x(S({{"a", 2}})), y(S({{"a", 2}}));
  std::string error;
  std::thread waiting(
      [&] { error = error_of([&] { comm.all_reduce(0, 0, x.shape(), x.data(), y.data()); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  comm.abort();
  waiting.join();
  EXPECT_EQ(error, "collectives: another device of the mesh failed");
  comm.reset();
  std::thread a([&] { comm.all_reduce(0, 0, x.shape(), x.data(), y.data()); });
  comm.all_reduce(1, 0, x.shape(), x.data(), y.data());
  a.join();
}

// A Megatron MLP: up split by columns, down by rows; one all_reduce, the same result.
std::vector<Tensor> mlp(std::span<const Tensor> in) {
  Tensor up = Tensor::parameter("up", S({{"f", 8}, {"d", 4}}), Sharding().split("f", "model"));
  Tensor down = Tensor::parameter("down", S({{"o", 4}, {"f", 8}}), Sharding().split("f", "model"));
  Tensor h = in[0].dot(up, "d").silu();
  return {in[0] + h.dot(down, "f").rename({{"o", "d"}})};
}

TEST(Partition, MegatronMlpNeedsOneAllReduce) {
  ir::Graph g = trace(mlp, std::vector<Shape>{S({{"s", 3}, {"d", 4}})});
  compiler::Partitioned p = compiler::partition(g, Mesh({{"model", 2}}), {});
  int reduces = 0, gathers = 0;
  for (const ir::Node& n : p.graph.nodes()) {
    reduces += n.op == ir::Op::all_reduce;
    gathers += n.op == ir::Op::all_gather;
  }
  EXPECT_EQ(reduces, 1) << ir::print(p.graph);
  EXPECT_EQ(gathers, 0) << ir::print(p.graph);
  EXPECT_EQ(p.parameters.at("up"), (compiler::Split{0, -1}));
  EXPECT_EQ(p.parameters.at("down"), (compiler::Split{-1, 0}));
  EXPECT_EQ(p.outputs[0], (compiler::Split{-1, -1}));
}

// Runs `fn` whole on the CPU and over `n` CPU devices with the weights split as the
// executable says; returns the largest difference of the first output.
double sharded_difference(const TraceFn& fn, const std::vector<HostBuffer>& inputs,
                          const std::map<std::string, HostBuffer>& weights, int n,
                          std::vector<Sharding> input_shardings = {},
                          const std::string& platform = "cpu") {
  CpuDevices devices(n);
  setenv("PRISM_OPENCL_DEVICES", std::to_string(n).c_str(), 1);
  setenv("PRISM_CUDA_DEVICES", std::to_string(n).c_str(), 1);
  Platform& cpu = get_platform(platform);
  std::vector<Shape> shapes;
  for (const HostBuffer& h : inputs) shapes.push_back(h.shape());
  Executable one = compile(cpu, fn, shapes);
  NamedBuffers w1;
  for (const auto& [name, h] : weights) w1[name] = cpu.upload(h);
  std::vector<Buffer> in1;
  for (const HostBuffer& h : inputs) in1.push_back(cpu.upload(h));
  HostBuffer want = one.call(w1, in1)[0].to_host();

  Mesh mesh({{"model", n}});
  ShardedExecutable exe =
      compile_sharded(cpu, fn, shapes, {.mesh = mesh, .inputs = input_shardings});
  std::vector<NamedBuffers> w(n);
  std::vector<std::vector<Buffer>> in(n);
  for (int k = 0; k < n; ++k) {
    Platform& device = *exe.devices()[k];
    for (const auto& p : exe.parameters()) {
      w[k][p.name] = device.upload(shard_of(weights.at(p.name), p.split, mesh, k));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      in[k].push_back(device.upload(shard_of(inputs[i], exe.input_splits()[i], mesh, k)));
    }
  }
  std::vector<std::vector<Buffer>> out = exe.call(w, in);
  HostBuffer got = exe.output_to_host(out, 0);
  EXPECT_EQ(got.shape(), want.shape());
  unsetenv("PRISM_OPENCL_DEVICES");
  unsetenv("PRISM_CUDA_DEVICES");
  double worst = 0;
  std::vector<double> a = got.to_f64(), b = want.to_f64();
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// The platforms that run meshes here: prism's CPU (collectives through host memory), OpenCL
// and CUDA (one device presented as several, collectives through host memory) and the XLA
// CPU plugin (XLA's partitioner and collectives), each against the same program on one device.
std::vector<std::string> mesh_platforms() {
  std::vector<std::string> names;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.available &&
        (s.name == "cpu" || s.name == "opencl" || s.name == "cuda" || s.name == "xla-cpu")) {
      names.push_back(s.name);
    }
  }
  return names;
}

TEST(Partition, TensorParallelMlpMatchesOneDevice) {
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) {
      double d = sharded_difference(mlp, {random_f32(S({{"s", 3}, {"d", 4}}), 1)},
                                    {{"up", random_f32(S({{"f", 8}, {"d", 4}}), 2)},
                                     {"down", random_f32(S({{"o", 4}, {"f", 8}}), 3)}},
                                    n, {}, p);
      EXPECT_LT(d, 1e-5) << n << " devices of " << p;
    }
  }
}

// XLA's two partitioners, Shardy (the default) and GSPMD (PRISM_PJRT_PARTITIONER=gspmd), each
// split the program by the shardings its module carries; another value is one clear error.
TEST(Partition, BothOfXlasPartitionersMatchOneDevice) {
  const std::vector<std::string> platforms = mesh_platforms();
  if (std::find(platforms.begin(), platforms.end(), "xla-cpu") == platforms.end()) {
    GTEST_SKIP() << "the XLA CPU plugin is not installed";
  }
  auto difference = [](int n) {
    return sharded_difference(mlp, {random_f32(S({{"s", 3}, {"d", 4}}), 1)},
                              {{"up", random_f32(S({{"f", 8}, {"d", 4}}), 2)},
                               {"down", random_f32(S({{"o", 4}, {"f", 8}}), 3)}},
                              n, {}, "xla-cpu");
  };
  for (const char* partitioner : {"shardy", "gspmd"}) {
    testing::ScopedEnv chosen("PRISM_PJRT_PARTITIONER", partitioner);
    for (int n : {2, 4}) EXPECT_LT(difference(n), 1e-5) << n << " devices, " << partitioner;
  }
  testing::ScopedEnv bad("PRISM_PJRT_PARTITIONER", "alpa");
  EXPECT_EQ(error_of([&] { difference(2); }),
            "pjrt: PRISM_PJRT_PARTITIONER must be shardy or gspmd, not 'alpa'");
}

// Ops the partitioner has no rule for read their operands whole: a softmax along a split dim
// gathers it, a split input stays split through elementwise ops.
TEST(Partition, OpsWithoutARuleGatherTheirOperands) {
  TraceFn fn = [](std::span<const Tensor> in) {
    Tensor w = Tensor::parameter("w", S({{"f", 8}, {"d", 4}}), Sharding().split("f", "model"));
    Tensor h = in[0].dot(w, "d");
    return std::vector<Tensor>{h.softmax("f") * 2.0f + in[1].exp().sum({"f"})};
  };
  for (const std::string& p : mesh_platforms()) {
    double d = sharded_difference(
        fn, {random_f32(S({{"s", 3}, {"d", 4}}), 4), random_f32(S({{"s", 3}, {"f", 8}}), 5)},
        {{"w", random_f32(S({{"f", 8}, {"d", 4}}), 6)}}, 2,
        {Sharding(), Sharding().split("f", "model")}, p);
    EXPECT_LT(d, 1e-5) << p;
  }
}

// A whole operand meeting a split one is cut to this device's block (dynamic_slice at its
// mesh coordinate), not the split one gathered; an embedding split by vocabulary looks up
// each id on the device holding its row.
TEST(Partition, WholeOperandsAreCutToTheDevicesBlock) {
  TraceFn fn = [](std::span<const Tensor> in) {
    Tensor w = Tensor::parameter("w", S({{"f", 8}, {"d", 4}}), Sharding().split("f", "model"));
    Tensor table =
        Tensor::parameter("table", S({{"voc", 12}, {"d", 4}}), Sharding().split("voc", "model"));
    Tensor x = in[0] + table.gather("voc", in[2]);
    return std::vector<Tensor>{(x.dot(w, "d") + in[1]).silu()};
  };
  const std::vector<Shape> shapes{S({{"s", 3}, {"d", 4}}), S({{"s", 3}, {"f", 8}}),
                                  S({{"s", 3}}, DType::i32)};
  compiler::Partitioned p = compiler::partition(trace(fn, shapes), Mesh({{"model", 2}}), {});
  int slices = 0, gathers = 0;
  for (const ir::Node& n : p.graph.nodes()) {
    slices += n.op == ir::Op::dynamic_slice;
    gathers += n.op == ir::Op::all_gather;
  }
  EXPECT_EQ(slices, 1) << ir::print(p.graph);
  EXPECT_EQ(gathers, 0) << ir::print(p.graph);
  EXPECT_EQ(p.outputs[0], (compiler::Split{-1, 0}));
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) {
      double d = sharded_difference(fn,
                                    {random_f32(shapes[0], 8), random_f32(shapes[1], 9),
                                     HostBuffer::from<int32_t>(shapes[2], {11, 0, 6})},
                                    {{"w", random_f32(S({{"f", 8}, {"d", 4}}), 10)},
                                     {"table", random_f32(S({{"voc", 12}, {"d", 4}}), 11)}},
                                    n, {}, p);
      EXPECT_LT(d, 1e-5) << n << " devices of " << p;
    }
  }
}

TEST(Sharding, MeshesLargerThanThePlatformAreAnError) {
  CpuDevices devices(2);
  Platform& cpu = get_platform("cpu");
  EXPECT_EQ(error_of([&] {
              compile_sharded(cpu, mlp, {S({{"s", 3}, {"d", 4}})}, {.mesh = Mesh({{"model", 3}})});
            }),
            "cpu: the mesh {model=3} needs 3 devices, the CPU offers 2 (one per core; "
            "PRISM_CPU_DEVICES sets another count)");
  EXPECT_EQ(error_of([&] {
              compile_sharded(
                  cpu, mlp, {S({{"s", 3}, {"d", 4}})},
                  {.mesh = Mesh({{"model", 2}}), .inputs = {Sharding().split("s", "model")}});
            }),
            "input 0: tag 's' of size 3 does not divide by mesh axis 'model' of 2 devices");
}

}  // namespace
}  // namespace prism
