// Loading a ~1 GiB local checkpoint (page cache warm) onto the CPU, next to `cat FILE >
// /dev/null` measured in the same run: used in place (zero copy), copied, and converted
// (f32 -> bf16).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "bench/bench.h"
#include "prism/backends/registry.h"
#include "prism/io/load.h"
#include "prism/io/safetensors.h"
#include "prism/runtime/compile.h"

namespace prism::bench {
namespace {

void load_bench() {
  namespace fs = std::filesystem;
  std::string dir =
      (fs::temp_directory_path() / ("prism-load-bench-" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  std::string path = dir + "/model.safetensors";
  // 16 tensors of 64 MiB (f32), like the big matrices of a 1B model.
  const int64_t rows = 4096, cols = 4096, count = 16;
  std::vector<float> values(rows * cols);
  std::mt19937 rng(1);
  for (float& v : values) v = static_cast<float>(rng() % 1000) / 1000.0f;
  std::vector<io::SafetensorsEntry> entries;
  std::vector<std::string> names;
  for (int64_t i = 0; i < count; ++i) names.push_back("layers." + std::to_string(i) + ".weight");
  for (const std::string& n : names) {
    entries.push_back(
        {n, io::SafetensorsDType::F32, {rows, cols}, std::as_bytes(std::span(values))});
  }
  io::write_safetensors(path, entries);
  double bytes = static_cast<double>(fs::file_size(path));
  std::string cat = "cat '" + path + "' > /dev/null";
  double t_cat = median_seconds([&] {
    if (std::system(cat.c_str()) != 0) throw std::runtime_error("cat failed");
  });
  std::printf("checkpoint: %.2f GB; cat FILE > /dev/null: %.2f GB/s\n", bytes / 1e9,
              bytes / 1e9 / t_cat);
  std::printf("%-26s %10s %10s\n", "load", "GB/s", "vs cat");
  Platform& cpu = get_platform("cpu");
  io::Store store = io::Store::open(path);
  for (auto [label, dtype, zero_copy] : {std::tuple{"in place (zero copy)", DType::f32, true},
                                         std::tuple{"copied", DType::f32, false},
                                         std::tuple{"converted to bf16", DType::bf16, false}}) {
    std::vector<Executable::Parameter> params;
    for (const std::string& n : names) {
      params.push_back({n, Shape(dtype, {{"r", rows}, {"c", cols}})});
    }
    io::LoadOptions options;
    options.report = false;
    options.progress = false;
    options.zero_copy = zero_copy;
    double t = median_seconds([&] { io::load(store, params, cpu, options); });
    std::printf("%-26s %10.2f %9.2fx\n", label, bytes / 1e9 / t, t_cat / t);
  }
  fs::remove_all(dir);
}

const Register kLoad{"load", "loading a 1 GiB local checkpoint, next to cat", load_bench};

}  // namespace
}  // namespace prism::bench
