// A small benchmark runner: each benchmark registers itself, measures medians of repeated
// runs, and prints ratios against limits measured in the same run. Speed claims live here,
// never in tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prism/models/qwen3_5.h"
#include "prism/runtime/platform.h"

namespace prism::bench {

struct Benchmark {
  std::string name;
  std::string help;
  std::function<void()> run;
};

std::vector<Benchmark>& registry();

struct Register {
  Register(std::string name, std::string help, std::function<void()> run) {
    registry().push_back({std::move(name), std::move(help), std::move(run)});
  }
};

// The value of `--name=VALUE` on the command line, else `fallback`.
std::string option(std::string_view name, std::string_view fallback = "");

// Median seconds of `repeats` runs of fn (after one warm-up run).
inline double median_seconds(const std::function<void()>& fn, int repeats = 5) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Best seconds of `repeats` runs: for probes of the machine's limits, which noise only lowers.
inline double best_seconds(const std::function<void()>& fn, int repeats = 5) {
  fn();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// The platform given with --platform (default "cpu"); benchmarks that support it measure it
// beside the CPU and print the ratio.
std::string platform_option();
// That platform, for the benchmarks that run on it alone (llm-shapes).
Platform& platform();

// A buffer of `shape` on `p` with values uniform in [-1, 1) (the same on every call).
Buffer random_buffer(Platform& p, const Shape& shape);

// The machine's limits, measured by the bench itself.
double measure_fp32_peak_gflops(int threads);  // independent FMA chains in registers
// vdpbf16ps chains in registers (bf16 products summed in f32); 0 without AVX-512 BF16.
double measure_bf16_peak_gflops(int threads);
// AMX tdpbf16ps on tiles held in the tile registers; 0 without AMX (or without the
// kernel's permission to use it).
double measure_amx_bf16_peak_gflops(int threads);
// Integer products of 8-bit values in vector registers: vpdpbusd chains with AVX-512 VNNI
// (under an AVX-512 target), else vpmaddubsw chains with AVX2, two ops a product; 0 elsewhere.
double measure_int8_peak_gops(int threads);
double measure_triad_gbps(int threads);  // STREAM triad over arrays far larger than cache
double measure_read_gbps(int threads);   // reading 1 GiB, 4 interleaved streams per thread

// measure_read_gbps's loop over a buffer allocated once, for sampling the bandwidth again and
// again in between the steps of what is measured against it.
class ReadProbe {
 public:
  explicit ReadProbe(int threads);
  double gbps();                      // one pass
  double best_gbps(int repeats = 5);  // the best of `repeats` passes, after one to warm up

 private:
  static constexpr int64_t kFloats = 256 << 20;  // 1 GiB
  void pass();
  int threads_;
  std::unique_ptr<float, decltype(&std::free)> data_;
};

// Another process busy on one core while this lives, as on a shared machine: a child that
// spins, pinned to the last CPU this process may run on (the pool's threads run there too).
// The destructor ends it.
class BusyCore {
 public:
  BusyCore();
  ~BusyCore();
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;
  int cpu() const { return cpu_; }

 private:
  int pid_ = -1;
  int cpu_ = -1;
};

// The random-weight Llama 3.2 1B-shaped checkpoint (safetensors, GGUF and a tokenizer) that
// `llm` and `serve` run, written by tools/make_bench_llama.py into `dir` on first use.
void ensure_checkpoint(const std::string& dir);
// --format: "bf16" (the checkpoint's own GGUF), or a quantized GGUF of the same weights,
// `dir`/model-FORMAT.gguf for q8_0, q4_0 and q4_k_m, made on first use (by llama.cpp's
// llama-quantize from the bf16 GGUF where scripts/setup.sh --bench built it, as the files
// users download are made, else by prism quantize). The GGUF file's path; throws for another
// format, naming `command`.
std::string checkpoint_gguf(const std::string& dir, const std::string& format,
                            const std::string& command);
// Qwen3.5-0.8B's shapes, its multi-token prediction head's included (bench/qwen3_5_bench.cpp).
models::Qwen3_5Config qwen3_5_0_8b();

// Speculative decoding on that checkpoint (bench/speculate_bench.cpp): `speculate`, and
// `llm --speculate`.
void speculate_bench();

}  // namespace prism::bench
