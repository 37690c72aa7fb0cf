// The CPU's products with weights in ggml's block formats (quant_rows.h, amx_rows.h): decode's
// matrix-vector products and batched decoding's products of 4 to 16 rows, for each kernel
// this CPU runs: activations kept in f32 (quant_rows), rounded to 8 bits and multiplied in
// integers with AVX-512 VNNI or AVX2 (quant_rows_int8, "int8"), on AMX-INT8 tiles, and, where
// the CPU executable keeps Q4_0 and Q8_0 weights interleaved by 16 rows (weight_layout.h), on
// that layout (quant_rows_int8_interleaved, "int8x16"). Each product
// is an 8192 x 2048 matrix, as Llama 3.2 1B's MLP has (--n and --k change it), copied to fill 1 GiB
// so that every pass streams the weights from memory; the activations are rounded once per product,
// as the executable does. Printed: GB/s of weights as stored, that speed as a fraction of a plain
// read of memory measured in the same run (the ceiling of a product that reads each weight once),
// and billions of multiply-adds a second. Options: --threads=N (default: every core),
// --types=q4_k,q6_k and --batches=1,16 (some of the products only), --k=8192 (rows of another
// length).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/backends/registry.h"
#include "prism/quant/ggml_type.h"
#include "prism/quant/quantize.h"

namespace prism::bench {
namespace {

using quant::GgmlType;

// An option's text as a count (a positive integer), or one error line naming the option.
int64_t count_of(const std::string& text, std::string_view name) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  PRISM_CHECK(error == std::errc() && end == text.data() + text.size() && value >= 1,
              "quant: --{} takes a positive count, not '{}'", name, text);
  return value;
}

// "a,b,c" as its items.
std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    items.emplace_back(list.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

struct Kernel {
  const char* name;
  const char* rows;  // PRISM_CPU_QUANT_ROWS, for the integer kernels
  bool int8;
  bool interleaved = false;  // the weights kept with each 16 rows' blocks interleaved
};

void quant_bench() {
  const int threads = static_cast<int>(
      count_of(option("threads", std::to_string(std::max(1u, std::thread::hardware_concurrency()))),
               "threads"));
  cpu::ThreadPool pool(threads);
  // --n=ROWS and --bytes=TOTAL: smaller products, or ones that stay in cache (the kernels'
  // arithmetic alone).
  const int64_t rows = count_of(option("n", "8192"), "n");
  const int64_t total = count_of(option("bytes", std::to_string(int64_t{1} << 30)), "bytes");
  // --k=N: the length of a row (default 2048, the MLP's gate and up; 8192 is its down).
  const int64_t kK = count_of(option("k", "2048"), "k");
  PRISM_CHECK(kK >= 256 && kK % 256 == 0, "quant: --k takes a multiple of 256, not {}", kK);
  // --types and --batches are read before anything is measured, so a bad one fails at once.
  std::vector<GgmlType> types;
  for (const std::string& name : split_list(option("types", "q8_0,q4_0,q4_k,q6_k"))) {
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const std::optional<GgmlType> parsed = quant::ggml_type_from_name(upper);
    PRISM_CHECK(parsed, "quant: unknown type {} in --types", name);
    types.push_back(*parsed);
  }
  std::vector<int64_t> batches;
  for (const std::string& b : split_list(option("batches", "1,4,6,8,16")))
    batches.push_back(count_of(b, "batches"));
  const double read = ReadProbe(threads).best_gbps();
  std::printf("%s; %d threads here; plain read %.1f GB/s\n",
              get_platform("cpu").devices().at(0).name.c_str(), threads, read);
  std::vector<Kernel> kernels = {{"f32", "", false}, {"int8", "vnni", true}};
  if (cpu::amx_int8_available()) kernels.push_back({"amx", "amx", true});
  kernels.push_back({"int8x16", "vnni", true, true});
  std::printf("%-6s %4s %-6s %9s %8s %9s\n", "type", "rows", "kernel", "GB/s", "of read",
              "Gmadd/s");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1, 1);
  std::vector<float> floats(static_cast<size_t>(rows * kK));
  for (float& v : floats) v = value(rng);
  for (const GgmlType type : types) {
    const quant::GgmlTypeInfo& t = quant::info(type);
    const int64_t row_bytes = kK / t.block_elements * t.block_bytes, bytes = rows * row_bytes;
    const int64_t copies = std::max<int64_t>(1, total / bytes);
    std::vector<std::byte> weights(static_cast<size_t>(copies * bytes));
    if (quant::can_quantize(type)) {
      quant::quantize(type, floats, std::span(weights).first(static_cast<size_t>(bytes)));
    } else {  // Q6_K: random quants and scales, d = 2^-9 (the speed does not depend on them)
      std::uniform_int_distribution<int> byte(0, 255);
      for (int64_t i = 0; i < bytes; ++i) weights[i] = static_cast<std::byte>(byte(rng));
      for (int64_t b = 0; b < bytes / t.block_bytes; ++b) {
        weights[b * t.block_bytes + t.block_bytes - 2] = std::byte{0x00};
        weights[b * t.block_bytes + t.block_bytes - 1] = std::byte{0x18};
      }
    }
    for (int64_t c = 1; c < copies; ++c)
      std::memcpy(weights.data() + c * bytes, weights.data(), static_cast<size_t>(bytes));
    // The same weights as the CPU executable keeps them where it interleaves them.
    const bool interleavable =
        cpu::interleavable(type, Shape(DType::u8, {{"n", rows}, {"b", row_bytes}}));
    std::vector<std::byte> interleaved(interleavable ? weights.size() : 0);
    for (int64_t c = 0; interleavable && c < copies; ++c)
      cpu::copy_weights(*cpu::interleaved_layout(type), weights.data() + c * bytes,
                        interleaved.data() + c * bytes, rows, row_bytes, true, pool);
    for (int64_t m : batches) {
      std::vector<float> x(floats.begin(), floats.begin() + m * kK), out(m * rows);
      for (const Kernel& kernel : kernels) {
        if (kernel.int8 && !cpu::quant_rows_int8_native(type)) continue;
        if (kernel.interleaved && !interleavable) continue;
        setenv("PRISM_CPU_QUANT_ROWS", kernel.rows, 1);
        if (std::string_view(kernel.rows) == "amx" && !cpu::quant_rows_on_amx(type, m)) continue;
        cpu::QuantizedRows rounded;
        const double seconds = median_seconds([&] {
          for (int64_t c = 0; c < copies; ++c) {
            const std::byte* w = weights.data() + c * bytes;
            if (kernel.int8) cpu::quantize_activations(type, x.data(), kK, m, kK, rounded);
            if (kernel.interleaved) {  // in groups of 16 rows, as the executable
              const std::byte* wi = interleaved.data() + c * bytes;
              pool.parallel_for_tapered(rows / 16, 1, [&](int64_t g0, int64_t g1) {
                cpu::quant_rows_int8_interleaved(type, rounded, wi, row_bytes, 16 * g0, 16 * g1, kK,
                                                 out.data() + 16 * g0, rows);
              });
              continue;
            }
            pool.parallel_for(rows, 16, [&](int64_t n0, int64_t n1) {  // as the executable
              if (kernel.int8) {
                cpu::quant_rows_int8(type, rounded, w + n0 * row_bytes, row_bytes, n1 - n0, kK,
                                     out.data() + n0, rows);
              } else {
                cpu::quant_rows(type, x.data(), kK, m, w + n0 * row_bytes, row_bytes, n1 - n0, kK,
                                out.data() + n0, rows);
              }
            });
          }
        });
        const double gbps = static_cast<double>(copies * bytes) / seconds / 1e9;
        const double madds = static_cast<double>(copies * m * rows * kK) / seconds / 1e9;
        std::printf("%-6s %4lld %-6s %9.1f %7.0f%% %9.1f\n", std::string(t.name).c_str(),
                    static_cast<long long>(m), kernel.name, gbps, 100 * gbps / read, madds);
        std::fflush(stdout);
      }
    }
  }
  unsetenv("PRISM_CPU_QUANT_ROWS");
}

const Register kQuant{"quant", "products with quantized weights: f32, int8 and AMX-INT8 kernels",
                      quant_bench};

}  // namespace
}  // namespace prism::bench
