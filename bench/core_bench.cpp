// The core's benchmarks: dot GFLOP/s against the measured fp32 peak, elementwise add GB/s
// against measured triad bandwidth (on a GPU: against the device's nominal limits), and the
// compile time of a 32-layer Llama-shaped graph.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "bench/bench.h"
#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
#include "prism/nn/nn.h"
#include "prism/runtime/compile.h"

namespace prism::bench {
namespace {

int threads() { return static_cast<cpu::CpuPlatform&>(get_platform("cpu")).pool().size(); }

// The platform given with --platform when it is not the CPU, else null.
Platform* other_platform() {
  const std::string& name = platform_option();
  return name == "cpu" ? nullptr : &get_platform(name);
}

// The nominal limits of the platform's first device where the platform states them (CUDA
// reads them from the driver), else null.
const DeviceInfo* nominal_limits(Platform* p) {
  static std::vector<DeviceInfo> devices;
  if (!p) return nullptr;
  devices = p->devices();
  return devices.empty() || devices.front().fp32_gflops <= 0 ? nullptr : &devices.front();
}

// Median seconds of one call of `exe` on its platform, waiting for the device to finish.
double call_seconds(const Executable& exe, const std::vector<Buffer>& in, int repeats) {
  return median_seconds(
      [&] {
        exe.call(std::span<const Buffer>{}, in);
        exe.platform().synchronize();
      },
      repeats);
}

// The products of a Llama-1B-shaped prefill of 512 tokens (x {512, k} . W), with W stored
// as checkpoints store it, [n][k], and as [k][n], on the CPU; `peak` is the bf16 one.
void prefill_dot_bench(double peak) {
  Platform& cpu = get_platform("cpu");
  std::printf("%-6s %-22s %12s %10s\n", "dtype", "m x k x n, W stored", "GFLOP/s", "of peak");
  const int64_t m = 512;
  for (auto [k, n] : {std::pair<int64_t, int64_t>{2048, 8192}, {8192, 2048}, {2048, 2048}}) {
    for (bool out_in : {true, false}) {
      Shape x(DType::bf16, {{"m", m}, {"k", k}});
      Shape w = out_in ? Shape(DType::bf16, {{"n", n}, {"k", k}})
                       : Shape(DType::bf16, {{"k", k}, {"n", n}});
      Executable exe = compile(cpu, [](Tensor x, Tensor w) { return x.dot(w, "k"); }, {x, w});
      double s = call_seconds(exe, {random_buffer(cpu, x), random_buffer(cpu, w)}, 5);
      double gflops = 2.0 * m * k * n / s / 1e9;
      std::string what = fmt::format("{}x{}x{} {}", m, k, n, out_in ? "[n][k]" : "[k][n]");
      std::printf("%-6s %-22s %12.1f %9.0f%%\n", "bf16", what.c_str(), gflops, 100 * gflops / peak);
      std::fflush(stdout);
    }
  }
}

// The two kinds of bf16 products a prompt can run on (bf16_products.h), on one core, at the
// shapes of a 512-token prefill's slices (weights as the CPU backend keeps them), against one
// core's peaks; and which one prism chose on this CPU.
void bf16_products_bench(double fp32_core_peak, double bf16_core_peak) {
  std::printf("\nbf16 products of a prompt, one core, GFLOP/s (best of 3):\n");
  std::printf("%-22s %12s %16s %16s\n", "m x k x n", "oneDNN", "f32 FMAs", "FMAs / oneDNN");
  for (auto [k, n] : {std::pair<int, int>{2048, 512}, {8192, 512}}) {
    const cpu::Bf16ProductsSpeed s = cpu::measure_bf16_products(512, k, n, 3);
    std::printf("%-22s %7.1f %3.0f%% %11.1f %3.0f%% %15.2fx\n",
                fmt::format("512x{}x{}", k, n).c_str(), s.onednn_gflops,
                100 * s.onednn_gflops / bf16_core_peak, s.fma_gflops,
                100 * s.fma_gflops / fp32_core_peak,
                s.onednn_gflops > 0 ? s.fma_gflops / s.onednn_gflops : 0.0);
  }
  std::printf("(%% of one core's bf16 dot and f32 FMA peaks); prism's choice: %s\n",
              cpu::bf16_products().description.c_str());
}

void dot_bench() {
  int n_threads = threads();
  double peak = measure_fp32_peak_gflops(n_threads);
  // bf16 products are put against the bf16 dot peak where the CPU has one (AVX-512 BF16).
  double bf16_peak = measure_bf16_peak_gflops(n_threads);
  Platform* other = other_platform();
  const DeviceInfo* dev = nominal_limits(other);
  std::printf("fp32 peak (measured, %d threads): %.0f GFLOP/s\n", n_threads, peak);
  if (bf16_peak > 0) {
    std::printf("bf16 dot peak (measured, vdpbf16ps, %d threads): %.0f GFLOP/s\n", n_threads,
                bf16_peak);
  } else {
    bf16_peak = peak;
  }
  if (dev) {
    std::printf("%s: %s, nominal fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s\n",
                std::string(other->name()).c_str(), dev->name.c_str(), dev->fp32_gflops,
                dev->bf16_gflops);
  }
  std::printf("%-6s %6s %12s %10s", "dtype", "n", "GFLOP/s", "of peak");
  if (other) std::printf(" %14s %10s", (std::string(other->name()) + " GFLOP/s").c_str(), "vs cpu");
  if (dev) std::printf(" %10s", "of nominal");
  std::printf("\n");
  Platform& cpu = get_platform("cpu");
  for (DType t : {DType::f32, DType::bf16}) {
    for (int64_t n : {512, 1024, 2048, 4096}) {
      Shape a(t, {{"m", n}, {"k", n}}), b(t, {{"k", n}, {"n", n}});
      auto fn = [](Tensor x, Tensor y) { return x.dot(y, "k"); };
      Executable exe = compile(cpu, fn, {a, b});
      int repeats = n >= 4096 ? 3 : 7;
      double s = call_seconds(exe, {random_buffer(cpu, a), random_buffer(cpu, b)}, repeats);
      double gflops = 2.0 * n * n * n / s / 1e9;
      std::printf("%-6s %6ld %12.1f %9.0f%%", std::string(name(t)).c_str(), n, gflops,
                  100 * gflops / (t == DType::bf16 ? bf16_peak : peak));
      if (other && (dev || n <= 2048)) {  // a device without a matrix engine needs minutes
        Executable on = compile(*other, fn, {a, b});
        double so = call_seconds(on, {random_buffer(*other, a), random_buffer(*other, b)}, repeats);
        double g = 2.0 * n * n * n / so / 1e9;
        std::printf(" %14.1f %9.2fx", g, g / gflops);
        if (dev) {
          double limit = t == DType::f32 ? dev->fp32_gflops : dev->bf16_gflops;
          std::printf(" %9.0f%%", 100 * g / limit);
        }
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  prefill_dot_bench(bf16_peak);
  bf16_products_bench(peak / n_threads, bf16_peak / n_threads);
}

void elementwise_bench() {
  int n_threads = threads();
  double triad = measure_triad_gbps(n_threads);
  Platform* other = other_platform();
  const DeviceInfo* dev = nominal_limits(other);
  std::printf("triad bandwidth (measured, %d threads): %.1f GB/s\n", n_threads, triad);
  if (dev) {
    std::printf("%s: %s, nominal memory bandwidth %.0f GB/s\n", std::string(other->name()).c_str(),
                dev->name.c_str(), dev->memory_gbps);
  }
  Platform& cpu = get_platform("cpu");
  const int64_t n = 32 << 20;
  std::printf("%-28s %10s %10s", "op", "GB/s", "of triad");
  if (other) std::printf(" %14s %10s", (std::string(other->name()) + " GB/s").c_str(), "vs cpu");
  if (dev) std::printf(" %10s", "of nominal");
  std::printf("\n");
  struct Case {
    const char* name;
    DType dtype;
    std::function<Tensor(Tensor, Tensor)> fn;
  };
  const Case cases[] = {
      {"add f32", DType::f32, [](Tensor x, Tensor y) { return x + y; }},
      {"x * sigmoid(x) + y f32", DType::f32, [](Tensor x, Tensor y) { return x.silu() + y; }},
      {"add bf16", DType::bf16, [](Tensor x, Tensor y) { return x + y; }},
      {"x * sigmoid(x) * y bf16", DType::bf16, [](Tensor x, Tensor y) { return x.silu() * y; }},
  };
  for (const Case& c : cases) {
    Shape s(c.dtype, {{"n", n}});
    Executable exe = compile(cpu, c.fn, {s, s});
    double sec = call_seconds(exe, {random_buffer(cpu, s), random_buffer(cpu, s)}, 5);
    double gbps = 3.0 * n * size_of(c.dtype) / sec / 1e9;
    std::printf("%-28s %10.1f %9.0f%%", c.name, gbps, 100 * gbps / triad);
    if (other) {
      Executable on = compile(*other, c.fn, {s, s});
      double so = call_seconds(on, {random_buffer(*other, s), random_buffer(*other, s)}, 5);
      double g = 3.0 * n * size_of(c.dtype) / so / 1e9;
      std::printf(" %14.1f %9.2fx", g, g / gbps);
      if (dev) std::printf(" %9.0f%%", 100 * g / dev->memory_gbps);
    }
    std::printf("\n");
  }
}

// One layer's attention at Llama 3.2 1B's shapes (32 query heads over 8 key heads of 64) on a
// cache of 1024 positions: a prefill of 512 tokens from position 0, and one decoding step
// at position 512; on a cache of 4096, a prefill of 1024 tokens from position 3072. GFLOP/s count
// the products of the visible (query, key) pairs. Then a decoding step at position 4000 of a
// 4096-position cache read from memory.
void attention_bench() {
  const int64_t H = 32, G = 8, D = 64, Sk = 1024;
  int n_threads = threads();
  Platform& cpu = get_platform("cpu");
  std::printf("on %s\n", cpu.devices().at(0).name.c_str());
  double peak = measure_fp32_peak_gflops(n_threads);
  // (bf16 on AMX tiles goes past it.)
  std::printf("fp32 peak (measured, %d threads): %.0f GFLOP/s\n", n_threads, peak);
  std::printf("%-6s %-8s %8s %12s %12s %10s\n", "dtype", "step", "queries", "us", "GFLOP/s",
              "of fp32");
  // The step of Sq queries from position `offset` over a cache of `keys` positions, compiled,
  // and random inputs for it.
  struct Step {
    Executable exe;
    std::vector<Buffer> in;
  };
  auto step = [&](DType t, int64_t Sq, int64_t keys, int32_t offset) {
    Shape q(t, {{"h", H}, {"q", Sq}, {"hd", D}}), kv(t, {{"h", G}, {"k", keys}, {"hd", D}});
    Shape off = Shape::scalar(DType::i32);
    auto fn = [](Tensor q, Tensor k, Tensor v, Tensor off) {
      return nn::attention(q, k, v, {.causal = true, .offset = off});
    };
    return Step{compile(cpu, fn, {q, kv, kv, off}),
                {random_buffer(cpu, q), random_buffer(cpu, kv), random_buffer(cpu, kv),
                 cpu.upload(HostBuffer::from<int32_t>(off, {offset}))}};
  };
  struct Case {
    int64_t queries, keys, offset;
  };
  // A short prompt's prefill, a decoding step, and the last 1024-token chunk of a 4096-token
  // prompt's prefill (prism llm feeds long prompts in such chunks), where attention is a
  // third of the step.
  for (DType t : {DType::bf16, DType::f32}) {
    for (Case c : {Case{512, Sk, 0}, Case{1, Sk, 512}, Case{1024, 4096, 3072}}) {
      Step st = step(t, c.queries, c.keys, static_cast<int32_t>(c.offset));
      double s = call_seconds(st.exe, st.in, c.queries == 1 ? 51 : c.queries > 512 ? 3 : 7);
      double pairs = 0;  // (query, key) pairs each query head sees
      for (int64_t i = 0; i < c.queries; ++i) pairs += static_cast<double>(c.offset + i + 1);
      double gflops = 4.0 * D * H * pairs / s / 1e9;
      const std::string what = c.queries == 1 ? "decode" : "prefill";
      std::printf("%-6s %-8s %8ld %12.1f %12.1f %9.0f%%%s\n", std::string(name(t)).c_str(),
                  what.c_str(), static_cast<long>(c.queries), s * 1e6, gflops, 100 * gflops / peak,
                  c.offset > 0 && c.queries > 1 ? "   (from position 3072)" : "");
      std::fflush(stdout);
    }
  }
  // A decoding step late in a long context, its cache coming from memory as in a model's step
  // (whose weights streamed through the caches before): 64 MiB read between calls. The cache
  // bytes read a second, against the read bandwidth.
  const double read_gbps = measure_read_gbps(n_threads);
  std::printf("\ndecode at position 4000, cache from memory (read bandwidth %.1f GB/s):\n",
              read_gbps);
  std::printf("%-6s %12s %12s %10s\n", "dtype", "us", "GB/s", "of read");
  std::vector<float> flush(16 << 20, 1.0f);
  volatile float sink = 0;  // keeps the reads of `flush`
  for (DType t : {DType::bf16, DType::f32}) {
    const int32_t position = 4000;
    Step st = step(t, 1, 4096, position);
    std::vector<double> times;
    for (int rep = 0; rep < 31; ++rep) {
      float read = 0;
      for (size_t i = 0; i < flush.size(); i += 16) read += flush[i];  // a line at a time
      sink = sink + read;
      const auto start = std::chrono::steady_clock::now();
      st.exe.call(std::span<const Buffer>{}, st.in);
      st.exe.platform().synchronize();
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double s = times[times.size() / 2];
    const double bytes = 2.0 * G * (position + 1) * D * static_cast<double>(size_of(t));
    std::printf("%-6s %12.1f %12.1f %9.0f%%\n", std::string(name(t)).c_str(), s * 1e6,
                bytes / s / 1e9, 100 * bytes / s / 1e9 / read_gbps);
    std::fflush(stdout);
  }
}

// Llama 3.2 1B's shapes: one prefill step over 128 tokens, 32 layers.
void compile_bench() {
  const int64_t layers = 32, d = 2048, ffn = 8192, heads = 32, kv = 8, hd = 64, vocab = 128256;
  const int64_t seq = 128;
  auto w = [](std::string name, std::initializer_list<Dim> dims) {
    return Tensor::parameter(std::move(name), Shape(DType::bf16, dims));
  };
  auto forward = [&](Tensor ids, Tensor pos) {
    Tensor x = w("embed", {{"voc", vocab}, {"d", d}}).gather("voc", ids).convert(DType::f32);
    auto [cos, sin] = nn::rope_tables(pos, nn::rope_inv_freq(hd, 500000));
    auto linear = [&](const Tensor& in, const std::string& name, Tag out, int64_t n) {
      return in.dot(w(name, {{out, n}, {"d", in.size("d")}}).convert(DType::f32), "d");
    };
    for (int64_t l = 0; l < layers; ++l) {
      std::string p = "layers." + std::to_string(l) + ".";
      Tensor h = x.rms_norm("d", 1e-5) * w(p + "in_norm", {{"d", d}}).convert(DType::f32);
      Tensor q = linear(h, p + "q", "o", heads * hd).split("o", {{"h", heads}, {"hd", hd}});
      Tensor k = linear(h, p + "k", "o", kv * hd).split("o", {{"h", kv}, {"hd", hd}});
      Tensor v = linear(h, p + "v", "o", kv * hd).split("o", {{"h", kv}, {"hd", hd}});
      q = nn::rope(q, cos, sin).rename({{"s", "q"}});
      k = nn::rope(k, cos, sin).rename({{"s", "k"}});
      Tensor a = nn::attention(q, k, v.rename({{"s", "k"}}), {.causal = true});
      Tensor o = a.merge({"h", "hd"}, "d").rename({{"q", "s"}});
      x = x + linear(o, p + "o", "d2", d).rename({{"d2", "d"}});
      h = x.rms_norm("d", 1e-5) * w(p + "post_norm", {{"d", d}}).convert(DType::f32);
      Tensor g = linear(h, p + "gate", "f", ffn), u = linear(h, p + "up", "f", ffn);
      Tensor m = (g.silu() * u).rename({{"f", "d"}});
      x = x + linear(m, p + "down", "d2", d).rename({{"d2", "d"}});
    }
    return linear(x.rms_norm("d", 1e-5), "lm_head", "voc", vocab).argmax("voc");
  };
  Platform& cpu = get_platform("cpu");
  std::vector<Shape> inputs{Shape(DType::i32, {{"s", seq}}), Shape(DType::i32, {{"s", seq}})};
  TraceFn fn = [&](std::span<const Tensor> in) {
    return std::vector<Tensor>{forward(in[0], in[1])};
  };
  ir::Graph traced;
  double t_trace = median_seconds([&] { traced = trace(fn, inputs); });
  ir::Graph optimized;
  double t_opt = median_seconds([&] { optimized = optimize(traced, cpu); });
  double t_backend = median_seconds([&] { cpu.compile(optimized, {}); });
  std::printf("32-layer Llama-shaped graph: %d nodes traced, %d after passes\n", traced.size(),
              optimized.size());
  std::printf("trace %.1f ms + passes %.1f ms + cpu backend %.1f ms = %.1f ms (target < 200)\n",
              t_trace * 1e3, t_opt * 1e3, t_backend * 1e3, (t_trace + t_opt + t_backend) * 1e3);
  // --platform=NAME: the same graph through that platform's passes and backend too (for a PJRT
  // plugin, printing StableHLO and the plugin's compiler).
  Platform& other = platform();
  if (other.name() != "cpu") {
    ir::Graph for_other;
    double o_opt = median_seconds([&] { for_other = optimize(traced, other); }, 1);
    double o_backend = median_seconds([&] { other.compile(for_other, {}); }, 1);
    std::printf("%s: passes %.1f ms + backend %.1f ms = %.1f ms\n",
                std::string(other.name()).c_str(), o_opt * 1e3, o_backend * 1e3,
                (t_trace + o_opt + o_backend) * 1e3);
  }
}

const Register kDot{"dot", "matrix products, f32 and bf16, n x n x n", dot_bench};
const Register kElementwise{"elementwise", "fused elementwise loops over 32M values, f32 and bf16",
                            elementwise_bench};
const Register kAttention{"attention", "one layer's causal attention at Llama 3.2 1B's shapes",
                          attention_bench};
const Register kCompile{"compile", "compile time of a 32-layer Llama-shaped graph", compile_bench};

}  // namespace
}  // namespace prism::bench
