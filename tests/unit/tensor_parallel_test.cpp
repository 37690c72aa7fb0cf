// The tiny checkpoints split across CPU devices (docs/sharding.md): the same greedy ids and
// f32 logits as on one device, each device holding only its shard of each split weight and
// cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "prism/backends/registry.h"
#include "prism/llm/engine.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::greedy;

using testing::CpuDevices;

llm::EngineOptions options(int devices) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = DType::f32;
  o.load.report = false;
  if (devices > 1) o.mesh = Mesh({{"model", devices}});
  return o;
}

const std::vector<int32_t> kPrompt{128000, 9906, 11, 1268, 527, 499, 30};

// On `platform`'s devices: prism's own CPU backend as N devices, or the XLA CPU plugin's
// virtual devices, where XLA's SPMD partitioner splits the program.
void expect_same_as_one_device(const std::string& dir, int n, const std::string& platform) {
  SCOPED_TRACE(dir + " on " + std::to_string(n) + " devices of " + platform);
  CpuDevices devices(4);
  llm::Engine one(dir, get_platform(platform), options(1));
  llm::Engine split(dir, get_platform(platform), options(n));
  ASSERT_EQ(split.devices().size(), static_cast<size_t>(n));
  std::vector<int32_t> prompt = kPrompt;
  for (int32_t& t : prompt) t %= static_cast<int32_t>(one.info().vocab_size);
  std::vector<float> want = one.feed(prompt), got = split.feed(prompt);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LT(worst, 1e-4);
  EXPECT_EQ(greedy(split, got, 24), greedy(one, want, 24));
}

std::string fixture(const std::string& family, const std::string& name) {
  return std::string(PRISM_TEST_DATA) + "/" + family + "/" + name;
}

// cpu, and the XLA CPU plugin where it is installed (scripts/setup.sh installs it).
std::vector<std::string> mesh_platforms() {
  std::vector<std::string> names{"cpu"};
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name == "xla-cpu" && s.available) names.push_back(s.name);
  }
  return names;
}

// OpenCL's devices of a mesh (here one device presented as two, each with its own context
// and queue), collectives through host memory: the tiny Llama as on one device.
TEST(TensorParallel, OpenClDevicesMatchOneDevice) {
  bool available = false;
  for (const PlatformStatus& s : platform_statuses())
    available |= s.name == "opencl" && s.available;
  if (!available) GTEST_SKIP() << "no OpenCL device";
  setenv("PRISM_OPENCL_DEVICES", "2", 1);
  expect_same_as_one_device(fixture("llama", "tiny-f32"), 2, "opencl");
  unsetenv("PRISM_OPENCL_DEVICES");
}

// CUDA's devices of a mesh (one GPU presented as two and four, each with its own stream),
// collectives through host memory: the tiny checkpoints as on one device. A mesh of distinct
// GPUs (collectives through NCCL) is checked by tools/gpu_check_prebuilt.sh where a machine
// has several.
TEST(TensorParallel, CudaDevicesMatchOneDevice) {
  bool available = false;
  for (const PlatformStatus& s : platform_statuses()) available |= s.name == "cuda" && s.available;
  if (!available) GTEST_SKIP() << "no CUDA device";
  for (int n : {2, 4}) {
    testing::ScopedEnv presented("PRISM_CUDA_DEVICES", std::to_string(n));
    expect_same_as_one_device(fixture("llama", "tiny-f32"), n, "cuda");
    expect_same_as_one_device(fixture("qwen3_5", "tiny-bf16-untied"), n, "cuda");
    expect_same_as_one_device(fixture("lfm2", "tiny-bf16-untied"), n, "cuda");
  }
}

TEST(TensorParallel, LlamaMatchesOneDevice) {
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) expect_same_as_one_device(fixture("llama", "tiny-f32"), n, p);
  }
}

TEST(TensorParallel, Qwen35MatchesOneDevice) {
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) expect_same_as_one_device(fixture("qwen3_5", "tiny-bf16-untied"), n, p);
  }
}

// Two key heads and four value heads: on 4 devices the DeltaNet's q and k stay whole while v
// and the recurrent state split by value heads. A prompt's step (16 tokens) leaves the state
// split as the decoding step (1 token) takes it, however each partitions inside.
TEST(TensorParallel, Qwen35WithFewerKeyHeadsThanDevicesMatchesOneDevice) {
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) expect_same_as_one_device(fixture("qwen3_5", "tiny-bf16-tied"), n, p);
  }
}

TEST(TensorParallel, Lfm2MatchesOneDevice) {
  for (const std::string& p : mesh_platforms()) {
    for (int n : {2, 4}) expect_same_as_one_device(fixture("lfm2", "tiny-bf16-untied"), n, p);
  }
}

// On the XLA CPU plugin each device holds only its shards too: the buffers the engine keeps
// on each of its devices are the shards' sizes, and the module carries their shardings.
TEST(TensorParallel, PjrtDevicesHoldTheirShards) {
  if (mesh_platforms().size() < 2) GTEST_SKIP() << "the XLA CPU plugin is not installed";
  CpuDevices devices(2);
  const std::string dir = fixture("llama", "tiny-f32");
  llm::Engine one(dir, get_platform("xla-cpu"), options(1));
  llm::Engine split(dir, get_platform("xla-cpu"), options(2));
  ASSERT_EQ(split.devices().size(), 2u);
  EXPECT_NE(split.devices()[0], split.devices()[1]);
  for (const auto& [name, buffer] : one.device_weights()[0]) {
    const int64_t full = buffer.shape().numel();
    for (int k = 0; k < 2; ++k) {
      const Buffer& shard = split.device_weights()[k].at(name);
      EXPECT_EQ(&shard.platform(), split.devices()[k]) << name;
      EXPECT_TRUE(shard.shape().numel() == full || 2 * shard.shape().numel() == full) << name;
    }
  }
  EXPECT_EQ(split.device_weights()[1].at("model.layers.0.mlp.up_proj.weight").shape().numel(),
            one.device_weights()[0].at("model.layers.0.mlp.up_proj.weight").shape().numel() / 2);
}

// Each device holds its block of every split weight and nothing of the others' blocks: a
// split weight's shards add up to the whole, a whole weight is on every device.
TEST(TensorParallel, EachDeviceHoldsOnlyItsShards) {
  CpuDevices devices(2);
  const std::string dir = fixture("llama", "tiny-f32");
  llm::Engine one(dir, get_platform("cpu"), options(1));
  llm::Engine split(dir, get_platform("cpu"), options(2));
  const io::Weights& whole = split.device_weights()[0];
  int split_weights = 0;
  for (const auto& [name, buffer] : one.device_weights()[0]) {
    const int64_t full = buffer.shape().numel();
    const int64_t a = split.device_weights()[0].at(name).shape().numel();
    const int64_t b = split.device_weights()[1].at(name).shape().numel();
    EXPECT_EQ(a, b) << name;
    const bool is_split =
        (name.find("proj") != std::string::npos && name.find("k_proj") == std::string::npos &&
         name.find("v_proj") == std::string::npos) ||  // one key/value head
        name == "model.embed_tokens.weight" ||
        name == "lm_head.weight";
    EXPECT_EQ(a, is_split ? full / 2 : full) << name;
    split_weights += is_split;
    // The shards hold the whole tensor's values, each device its own block.
    if (is_split) {
      HostBuffer w = buffer.to_host();
      HostBuffer s0 = split.device_weights()[0].at(name).to_host();
      const bool rows =
          name.find("o_proj") == std::string::npos && name.find("down_proj") == std::string::npos;
      const int64_t cols = w.shape().size(1);
      EXPECT_EQ(s0.as<float>()[0], w.as<float>()[0]) << name;
      if (rows) {
        EXPECT_EQ(split.device_weights()[1].at(name).to_host().as<float>()[0],
                  w.as<float>()[full / 2])
            << name;
      } else {
        EXPECT_EQ(split.device_weights()[1].at(name).to_host().as<float>()[0],
                  w.as<float>()[cols / 2])
            << name;
      }
    }
  }
  EXPECT_EQ(split_weights, 3 * 5 + 2);  // q, o, gate, up, down in 3 layers; vocabulary
  (void)whole;
  // One key/value head: the caches stay whole on both devices.
  for (size_t i = 0; i < split.states().size(); ++i) {
    EXPECT_EQ(split.device_states()[1][i].shape(), one.states()[i].shape());
  }
}

// Qwen 3.5's DeltaNet layers split by heads (q, k and v's convolution states and the
// recurrent state), LFM 2's convolution blocks by channels: on 2 devices each holds half of
// every such state; the single key/value head's caches stay whole.
TEST(TensorParallel, RecurrentAndConvolutionStatesSplit) {
  CpuDevices devices(2);
  struct Expect {
    std::string dir;
    size_t split_states, whole_states;
  };
  for (const Expect& e : {Expect{fixture("qwen3_5", "tiny-bf16-untied"), 4 * 2, 2},
                          Expect{fixture("lfm2", "tiny-bf16-untied"), 3, 4}}) {
    SCOPED_TRACE(e.dir);
    llm::Engine one(e.dir, get_platform("cpu"), options(1));
    llm::Engine split(e.dir, get_platform("cpu"), options(2));
    size_t halved = 0, whole = 0;
    for (size_t i = 0; i < one.states().size(); ++i) {
      const int64_t full = one.states()[i].shape().numel();
      const int64_t a = split.device_states()[0][i].shape().numel();
      EXPECT_EQ(split.device_states()[1][i].shape().numel(), a);
      EXPECT_TRUE(a == full || 2 * a == full) << i;
      (2 * a == full ? halved : whole)++;
    }
    EXPECT_EQ(halved, e.split_states);
    EXPECT_EQ(whole, e.whole_states);
  }
}

// Megatron's pattern follows from the annotations: one all-reduce after each token mixer and
// each MLP (and one after the embedding split by vocabulary), no gathers but the logits'.
TEST(TensorParallel, OneAllReducePerBlock) {
  CpuDevices devices(2);
  struct Expect {
    std::string family, name;
    int layers;
  };
  for (const Expect& e : {Expect{"llama", "tiny-f32", 3}, Expect{"qwen3_5", "tiny-bf16-untied", 3},
                          Expect{"lfm2", "tiny-bf16-untied", 5}}) {
    SCOPED_TRACE(e.family);
    const std::string dir = fixture(e.family, e.name);
    std::ifstream in(dir + "/config.json");
    auto model = models::make_causal_lm(nlohmann::json::parse(in), dir, DType::f32);
    ShardedExecutable exe =
        llm::compile_sharded_step(get_platform("cpu"), *model, 1, 16, Mesh({{"model", 2}}));
    int reduces = 0, gathers = 0;
    for (const ir::Node& n : exe.device(0).graph().nodes()) {
      reduces += n.op == ir::Op::all_reduce;
      gathers += n.op == ir::Op::all_gather;
    }
    EXPECT_EQ(reduces, 2 * e.layers + 1);
    EXPECT_EQ(gathers, 0);
  }
}

TEST(TensorParallel, BadMeshesGiveOneClearError) {
  CpuDevices devices(6);
  const std::string dir = fixture("llama", "tiny-f32");
  llm::EngineOptions o = options(5);
  EXPECT_EQ(testing::error_of([&] { llm::Engine e(dir, get_platform("cpu"), o); }),
            "parameter \"model.layers.0.mlp.gate_proj.weight\": tag 'f' of size 48 does not "
            "divide by mesh axis 'model' of 5 devices");
  o.mesh = Mesh({{"model", 8}});
  EXPECT_EQ(testing::error_of([&] { llm::Engine e(dir, get_platform("cpu"), o); }),
            "cpu: the mesh {model=8} needs 8 devices, the CPU offers 6 (one per core; "
            "PRISM_CPU_DEVICES sets another count)");
  o.mesh = Mesh({{"data", 2}});
  EXPECT_EQ(testing::error_of([&] { llm::Engine e(dir, get_platform("cpu"), o); }),
            "llm: mesh axis 'data' splits nothing in this llama model (it splits over 'model')");
}

}  // namespace
}  // namespace prism
