// The load report line: the rate is over the bytes copied, and tensors used in place (which
// cost nothing until read) are counted apart instead of making up a rate. Loading a local
// checkpoint onto the CPU: in place, copied, and in place after all when a copy would not fit;
// and onto a platform whose buffers cannot be written after they are made.
#include "prism/io/load.h"

#include <gtest/gtest.h>

#include <atomic>

#include "prism/backends/registry.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/test_util.h"

namespace prism::io {
namespace {

TEST(LoadStats, LineGivesTheRateOfTheBytesCopied) {
  LoadStats copied{.tensors = 3, .bytes = 2'000'000'000, .seconds = 0.5};
  EXPECT_EQ(copied.line(), "loaded 3 tensors, 2.00 GB in 0.50 s (4.00 GB/s)");
  LoadStats mixed{.tensors = 3,
                  .zero_copy = 2,
                  .bytes = 3'000'000'000,
                  .mapped_bytes = 2'000'000'000,
                  .seconds = 0.25};
  EXPECT_EQ(mixed.line(),
            "loaded 3 tensors, 3.00 GB in 0.25 s (4.00 GB/s; 2 tensors mapped in place, no copy)");
  LoadStats mapped{.tensors = 2,
                   .zero_copy = 2,
                   .bytes = 1'000'000'000,
                   .mapped_bytes = 1'000'000'000,
                   .seconds = 0.001};
  EXPECT_EQ(mapped.line(), "loaded 2 tensors, 1.00 GB in 0.00 s (mapped in place, no copy)");
  EXPECT_EQ(LoadStats{}.line(), "loaded 0 tensors, 0.00 GB in 0.00 s (0.00 GB/s)");
}

// The tiny model's tensors as parameters (f32, one tag per axis).
std::vector<Executable::Parameter> parameters_of(const std::vector<test::TinyTensor>& tensors) {
  std::vector<Executable::Parameter> params;
  for (const auto& t : tensors) {
    std::vector<Dim> dims;
    for (size_t a = 0; a < t.shape.size(); ++a)
      dims.push_back({Tag(a == 0 ? "a" : "b"), t.shape[a]});
    params.push_back({t.name, Shape(DType::f32, dims)});
  }
  return params;
}

TEST(Load, CopiesOrMapsAndFallsBackToMappingWhenACopyWouldNotFit) {
  test::TempDir dir;
  auto tensors = test::tiny_model();
  test::write_single(dir.str(), tensors);
  Store store = Store::open(dir.str());
  auto params = parameters_of(tensors);
  Platform& cpu = get_platform("cpu");
  struct Case {
    const char* what;
    LoadOptions options;
    size_t in_place;
  };
  const Case cases[] = {
      {"zero copy", {.report = false, .zero_copy = true}, tensors.size()},
      {"copied", {.report = false, .zero_copy = false}, 0},
      {"copied, within the limit", {.report = false, .zero_copy = false, .copy_limit = 1 << 20}, 0},
      {"a copy over the limit",
       {.report = false, .zero_copy = false, .copy_limit = 64},
       tensors.size()},
  };
  for (const Case& c : cases) {
    LoadStats stats;
    Weights weights = load(store, params, cpu, c.options, &stats);
    EXPECT_EQ(stats.tensors, tensors.size()) << c.what;
    EXPECT_EQ(stats.zero_copy, c.in_place) << c.what;
    for (const auto& t : tensors) {
      HostBuffer h = weights.at(t.name).to_host();
      std::vector<float> got(h.as<float>().begin(), h.as<float>().end());
      EXPECT_EQ(got, t.values) << c.what << ": " << t.name;
    }
  }
}

// The CPU, but its buffers take their bytes only whole, at upload, as PJRT's do.
class ImmutableBuffers : public Platform {
 public:
  std::string_view name() const override { return "immutable"; }
  std::vector<DeviceInfo> devices() const override { return cpu().devices(); }
  Buffer allocate(const Shape& s) override { return cpu().allocate(s); }
  Buffer upload(const HostBuffer& h) override {
    ++uploads;
    return cpu().upload(h);
  }
  void write(Buffer&, size_t, std::span<const std::byte>) override {
    fail("immutable: a buffer was written after it was made");
  }
  bool writes_in_place() const override { return false; }
  HostBuffer download(const Buffer& b) override { return cpu().download(b); }
  bool supports(const ir::Node& n) const override { return cpu().supports(n); }
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& g, const CompileSpec& s) override {
    return cpu().compile(g, s);
  }
  std::atomic<int> uploads = 0;

 private:
  static Platform& cpu() { return get_platform("cpu"); }
};

TEST(Load, StagesWholeTensorsWherePlatformBuffersCannotBeWritten) {
  test::TempDir dir;
  auto tensors = test::tiny_model();
  test::write_single(dir.str(), tensors);
  Store store = Store::open(dir.str());
  ImmutableBuffers platform;
  // Small chunks, several workers: each tensor arrives in pieces, uploaded once it is whole.
  Weights weights = load(
      store, parameters_of(tensors), platform,
      {.parallelism = 3, .chunk_size = 8, .progress = false, .report = false, .zero_copy = false});
  EXPECT_EQ(platform.uploads, static_cast<int>(tensors.size()));
  for (const auto& t : tensors) {
    HostBuffer h = weights.at(t.name).to_host();
    std::vector<float> got(h.as<float>().begin(), h.as<float>().end());
    EXPECT_EQ(got, t.values) << t.name;
  }
}

// A fused stored tensor read as blocks of its rows ("w[0:3]", "w[3:8]"), whole or split over
// the devices of a mesh: each block holds its rows, each device its share of each block; the
// blocks must tile the tensor exactly.
TEST(Load, ReadsBlocksOfRowsAndSplitsThemAcrossDevices) {
  test::TempDir dir;
  auto tensors = test::tiny_model();
  test::write_single(dir.str(), tensors);
  Store store = Store::open(dir.str());
  const test::TinyTensor& embed = tensors[0];  // {8, 4}
  Platform& cpu = get_platform("cpu");
  auto block = [](const char* name, int64_t rows) {
    return Executable::Parameter{name, Shape(DType::f32, {{"a", rows}, {"b", 4}})};
  };
  std::vector<Executable::Parameter> params{block("model.embed_tokens.weight[0:2]", 2),
                                            block("model.embed_tokens.weight[2:8]", 6)};
  Weights w = load(store, params, cpu, {.report = false});
  HostBuffer second = w.at("model.embed_tokens.weight[2:8]").to_host();
  EXPECT_EQ(std::vector<float>(second.as<float>().begin(), second.as<float>().end()),
            std::vector<float>(embed.values.begin() + 8, embed.values.end()));

  // Split over 2 devices by columns: each device gets columns 0-1 or 2-3 of each block.
  setenv("PRISM_CPU_DEVICES", "2", 1);
  const Mesh mesh({{"model", 2}});
  std::vector<Platform*> devices = cpu.mesh_devices(mesh);
  std::vector<ShardedExecutable::Parameter> sharded;
  for (const auto& p : params) sharded.push_back({p.name, p.shape, {-1, 0}});
  std::vector<Weights> per = load_sharded(store, sharded, mesh, devices,
                                          {.chunk_size = 16, .progress = false, .report = false});
  unsetenv("PRISM_CPU_DEVICES");
  for (int k = 0; k < 2; ++k) {
    HostBuffer got = per[k].at("model.embed_tokens.weight[2:8]").to_host();
    ASSERT_EQ(got.shape().sizes(), (std::vector<int64_t>{6, 2}));
    for (int r = 0; r < 6; ++r) {
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(got.as<float>()[r * 2 + c], embed.values[(2 + r) * 4 + 2 * k + c]);
      }
    }
  }

  // Blocks that leave rows out, and rows that are not there.
  std::vector<Executable::Parameter> gap{block("model.embed_tokens.weight[0:2]", 2),
                                         block("model.embed_tokens.weight[3:8]", 5)};
  EXPECT_EQ(prism::testing::error_of([&] { load(store, gap, cpu, {.report = false}); }),
            "load: tensor \"model.embed_tokens.weight\" in " + store.uri() +
                " has 8 rows, but the model reads rows 3..8 next after row 2: its sizes disagree "
                "with the checkpoint");
  EXPECT_EQ(
      prism::testing::error_of([&] { store.rows("model.embed_tokens.weight[4:9]"); }),
      store.uri() + ": rows 4..9 of tensor 'model.embed_tokens.weight' are outside its 8 rows");
  EXPECT_EQ(prism::testing::error_of([&] { store.rows("model.embed_tokens.weight[a:9]"); }),
            store.uri() +
                ": 'model.embed_tokens.weight[a:9]' is not a tensor's name followed by [first:end] "
                "rows");
}

}  // namespace
}  // namespace prism::io
