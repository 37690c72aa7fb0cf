// Helpers for the io tests: temporary directories and small safetensors checkpoints.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "prism/io/safetensors.h"

namespace prism::test {

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "prism-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str(std::string_view relative = "") const {
    return relative.empty() ? path_.string() : (path_ / relative).string();
  }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Deterministic f32 values: tensor `seed`, element i -> seed * 1000 + i.
inline std::vector<float> iota_values(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(seed * 1000 + i);
  return v;
}

// A tiny two-layer model: name -> f32 tensor with iota values.
struct TinyTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

inline std::vector<TinyTensor> tiny_model() {
  std::vector<TinyTensor> t = {
      {"model.embed_tokens.weight", {8, 4}, {}}, {"model.layers.0.mlp.weight", {4, 4}, {}},
      {"model.layers.0.norm.weight", {4}, {}},   {"model.layers.1.mlp.weight", {4, 4}, {}},
      {"model.layers.1.norm.weight", {4}, {}},   {"lm_head.weight", {8, 4}, {}},
  };
  for (size_t i = 0; i < t.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : t[i].shape) n *= d;
    t[i].values = iota_values(n, static_cast<int>(i));
  }
  return t;
}

inline std::vector<io::SafetensorsEntry> entries_of(const std::vector<TinyTensor>& tensors) {
  std::vector<io::SafetensorsEntry> entries;
  for (const auto& t : tensors) {
    entries.push_back(
        {t.name, io::SafetensorsDType::F32, t.shape, std::as_bytes(std::span(t.values))});
  }
  return entries;
}

// Writes `tensors` as one model.safetensors into `dir`.
inline void write_single(const std::string& dir, const std::vector<TinyTensor>& tensors) {
  std::filesystem::create_directories(dir);
  io::write_safetensors(dir + "/model.safetensors", entries_of(tensors));
}

// Writes `tensors` as two shards and a model.safetensors.index.json into `dir`.
inline void write_sharded(const std::string& dir, const std::vector<TinyTensor>& tensors) {
  std::filesystem::create_directories(dir);
  size_t half = tensors.size() / 2;
  std::vector<TinyTensor> first(tensors.begin(), tensors.begin() + half);
  std::vector<TinyTensor> second(tensors.begin() + half, tensors.end());
  io::write_safetensors(dir + "/model-00001-of-00002.safetensors", entries_of(first));
  io::write_safetensors(dir + "/model-00002-of-00002.safetensors", entries_of(second));
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    map += (i ? ",\n    \"" : "    \"") + tensors[i].name + "\": \"model-0000" +
           (i < half ? "1" : "2") + "-of-00002.safetensors\"";
  }
  write_bytes(
      dir + "/model.safetensors.index.json",
      "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n" + map + "\n  }\n}\n");
}

}  // namespace prism::test
