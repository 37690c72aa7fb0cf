#include "prism/io/store.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io_test_util.h"
#include "prism/core/error.h"

namespace prism::io {
namespace {

using test::TempDir;

std::vector<float> read_floats(const Store& store, const std::string& name,
                               const ReadOptions& options = {}) {
  std::vector<float> out(store.at(name).bytes / sizeof(float));
  store.read_tensor_bytes(name, std::as_writable_bytes(std::span(out)), options);
  return out;
}

void expect_tiny_model(const Store& store) {
  auto model = test::tiny_model();
  EXPECT_EQ(store.size(), model.size());
  for (const auto& t : model) {
    EXPECT_EQ(read_floats(store, t.name), t.values) << t.name;
    // One-float chunks, many in flight: the same bytes.
    EXPECT_EQ(read_floats(store, t.name, {.parallelism = 4, .chunk_size = 4}), t.values) << t.name;
  }
}

TEST(Store, OpensSingleFileAndDirectory) {
  TempDir dir;
  test::write_single(dir.str(), test::tiny_model());
  expect_tiny_model(Store::open(dir.str()));
  expect_tiny_model(Store::open(dir.str("model.safetensors")));
  expect_tiny_model(Store::open("file://" + dir.str() + "/"));
}

TEST(Store, OpensShardedCheckpoint) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  Store store = Store::open(dir.str());
  EXPECT_EQ(store.files().size(), 2u);
  expect_tiny_model(store);
  expect_tiny_model(Store::open(dir.str("model.safetensors.index.json")));
}

TEST(Store, OpensEverySafetensorsFileInADirectoryWithoutIndex) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  std::filesystem::remove(dir.str("model.safetensors.index.json"));
  expect_tiny_model(Store::open(dir.str()));
}

TEST(Store, ViewsNameTensorsRelativeToAPrefix) {
  TempDir dir;
  test::write_single(dir.str(), test::tiny_model());
  Store store = Store::open(dir.str());
  Store layer = store.view("model.layers.1");
  EXPECT_EQ(layer.names(), (std::vector<std::string>{"mlp.weight", "norm.weight"}));
  EXPECT_EQ(layer.shape("mlp.weight"), Shape(DType::f32, {{Tag(), 4}, {Tag(), 4}}));
  EXPECT_EQ(layer.total_bytes(), (16 + 4) * 4u);
  EXPECT_EQ(store.view("model").view("layers.1").names(), layer.names());
  EXPECT_EQ(read_floats(layer, "norm.weight"), test::tiny_model()[4].values);
  // Local files are mapped: the bytes can be used in place.
  auto mapped = layer.mapped_bytes("norm.weight");
  ASSERT_EQ(mapped.size(), 16u);
  EXPECT_EQ(reinterpret_cast<const float*>(mapped.data())[0], 4000.0f);
  // A view does not see tensors that merely share a string prefix.
  EXPECT_EQ(store.view("model.layers.1").size(), 2u);
  EXPECT_EQ(store.view("model.layers.").size(), 4u);
}

TEST(Store, ReadsManyTensorsWithOneBound) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  Store store = Store::open(dir.str());
  auto model = test::tiny_model();
  std::vector<std::vector<float>> outs;
  std::vector<Store::TensorRead> reads;
  for (const auto& t : model) outs.emplace_back(t.values.size());
  for (size_t i = 0; i < model.size(); ++i) {
    reads.push_back({model[i].name, std::as_writable_bytes(std::span(outs[i]))});
  }
  store.read_tensors(reads, {.parallelism = 3, .chunk_size = 12});
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(outs[i], model[i].values);
}

TEST(Store, NamesWhatIsMissing) {
  TempDir dir;
  test::write_single(dir.str(), test::tiny_model());
  Store store = Store::open(dir.str());
  try {
    store.view("model.layers.1").at("mlp.wieght");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.str() +
                  ": no tensor 'model.layers.1.mlp.wieght' in view 'model.layers.1' "
                  "(nearby names: model.layers.1.mlp.weight, model.layers.1.norm.weight)");
  }
  std::vector<float> small(3);
  EXPECT_THROW(store.read_tensor_bytes("lm_head.weight", std::as_writable_bytes(std::span(small))),
               Error);
}

TEST(Store, RejectsMissingShard) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  std::filesystem::remove(dir.str("model-00002-of-00002.safetensors"));
  try {
    Store::open(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.str("model.safetensors.index.json") +
                  ": missing shard 'model-00002-of-00002.safetensors' (it holds 3 tensors, e.g. "
                  "'lm_head.weight')");
  }
}

// An index that is not JSON, or holds a number past double's range, is one error naming it.
TEST(Store, RejectsIndexThatIsNotJson) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  const std::string path = dir.str("model.safetensors.index.json");
  for (const char* text : {R"({"metadata": {"total_size": 9e999}, "weight_map": {}})", "{"}) {
    test::write_bytes(path, text);
    try {
      Store::open(dir.str());
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": not valid JSON: ", 0), 0u) << e.what();
    }
  }
}

TEST(Store, RejectsIndexThatDisagreesWithShards) {
  TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  std::string index = test::read_bytes(dir.str("model.safetensors.index.json"));
  index.replace(index.find("\"lm_head.weight\": \"model-00002"), 30,
                "\"lm_head.weight\": \"model-00001");
  test::write_bytes(dir.str("model.safetensors.index.json"), index);
  try {
    Store::open(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'lm_head.weight' is listed in shard "
                                         "'model-00001-of-00002.safetensors' but found in"),
              std::string::npos)
        << e.what();
  }
  TempDir empty;
  EXPECT_THROW(Store::open(empty.str()), Error);
  EXPECT_THROW(Store::open(empty.str("nothing.safetensors")), Error);
}

}  // namespace
}  // namespace prism::io
