// The row kernels of the CPU backend (softmax, norms, rope, reductions) under every SIMD
// target this binary has and this CPU runs (or the one PRISM_CPU_TARGET names), in GB/s
// (bytes read and written per second), on rows that stay in cache and on rows streamed from
// memory; the best target's GB/s is also given as a fraction of the triad bandwidth measured
// in the same run. Run it from a -DPRISM_NATIVE=OFF build and a native one to compare them.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/registry.h"
#include "prism/nn/nn.h"
#include "prism/runtime/compile.h"

namespace prism::bench {
namespace {

namespace simd = cpu::simd;

// The target PRISM_CPU_TARGET names, else one per Highway level (the avx512_bf16 variants
// run these kernels alike).
std::vector<simd::Target> targets() {
  const char* forced = std::getenv("PRISM_CPU_TARGET");
  if (forced && *forced) return {simd::current()};
  std::vector<simd::Target> out;
  for (const simd::Target& t : simd::available())
    if (!t.avx512_bf16) out.push_back(t);
  return out;
}

struct Case {
  std::string name;
  TraceFn fn;
  // The input shapes for about `bytes` of data in the first input.
  std::function<std::vector<Shape>(int64_t bytes)> shapes;
};

// Rows of `k` values of dtype t, `bytes` of them in all.
Shape rows_of(DType t, int64_t k, int64_t bytes) {
  return Shape(t, {{"r", std::max<int64_t>(1, bytes / (k * size_of(t)))}, {"k", k}});
}

TraceFn one(std::function<Tensor(Tensor)> fn) {
  return [fn](std::span<const Tensor> in) { return std::vector<Tensor>{fn(in[0])}; };
}

std::vector<Case> cases() {
  auto rows = [](DType t, int64_t k) {
    return [t, k](int64_t bytes) { return std::vector<Shape>{rows_of(t, k, bytes)}; };
  };
  // Llama-shaped rope: 32 heads of hd, tables per position.
  auto rope_shapes = [](DType t, int64_t hd) {
    return [t, hd](int64_t bytes) {
      int64_t s = std::max<int64_t>(1, bytes / (32 * hd * size_of(t)));
      return std::vector<Shape>{Shape(t, {{"s", s}, {"h", 32}, {"hd", hd}}),
                                Shape(DType::f32, {{"s", s}, {"hd", hd / 2}}),
                                Shape(DType::f32, {{"s", s}, {"hd", hd / 2}})};
    };
  };
  auto rope = [](bool interleaved) -> TraceFn {
    return [interleaved](std::span<const Tensor> in) {
      return std::vector<Tensor>{nn::rope(in[0], in[1], in[2], "hd", interleaved)};
    };
  };
  return {
      {"softmax f32 k=32768", one([](Tensor x) { return x.softmax("k"); }),
       rows(DType::f32, 32768)},
      {"log_softmax f32 k=32768", one([](Tensor x) { return x.log_softmax("k"); }),
       rows(DType::f32, 32768)},
      {"softmax bf16 k=32768", one([](Tensor x) { return x.softmax("k"); }),
       rows(DType::bf16, 32768)},
      {"rms_norm f32 d=2048", one([](Tensor x) { return x.rms_norm({"k"}, 1e-5); }),
       rows(DType::f32, 2048)},
      {"layer_norm f32 d=2048", one([](Tensor x) { return x.layer_norm({"k"}, 1e-5); }),
       rows(DType::f32, 2048)},
      {"rms_norm bf16 d=2048", one([](Tensor x) { return x.rms_norm({"k"}, 1e-5); }),
       rows(DType::bf16, 2048)},
      {"rope f32 rotate-half", rope(false), rope_shapes(DType::f32, 128)},
      {"rope f32 interleaved", rope(true), rope_shapes(DType::f32, 128)},
      {"rope bf16 hd=64", rope(false), rope_shapes(DType::bf16, 64)},
      {"sum f32 over k=4096", one([](Tensor x) { return x.sum({"k"}); }), rows(DType::f32, 4096)},
      {"max f32 over k=4096", one([](Tensor x) { return x.max({"k"}); }), rows(DType::f32, 4096)},
      {"sum f32 over rows", one([](Tensor x) { return x.sum({"r"}); }), rows(DType::f32, 4096)},
      {"argmax f32 k=32768", one([](Tensor x) { return x.argmax("k"); }), rows(DType::f32, 32768)},
  };
}

void rows_bench() {
  Platform& cpu = get_platform("cpu");
  int n_threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  double triad = measure_triad_gbps(n_threads);
  std::printf("triad bandwidth (measured, %d threads): %.1f GB/s\n", n_threads, triad);
  std::vector<simd::Target> all = targets();
  simd::Target before = simd::current();
  std::printf("GB/s under each SIMD target (PRISM_CPU_TARGET names); medians of 7 runs\n");
  std::printf("%-26s %8s", "kernel", "MiB");
  for (const simd::Target& t : all) std::printf(" %9s", t.name().c_str());
  std::printf(" %9s\n", "of triad");
  for (int64_t bytes : {int64_t(2) << 20, int64_t(128) << 20}) {
    for (const Case& c : cases()) {
      std::vector<Shape> shapes = c.shapes(bytes);
      Executable exe = compile(cpu, c.fn, shapes);
      std::vector<Buffer> in;
      double moved = 0;  // bytes read and written by one call
      for (const Shape& s : shapes) {
        in.push_back(random_buffer(cpu, s));
        moved += double(s.bytes());
      }
      for (const Shape& s : exe.output_shapes()) moved += double(s.bytes());
      std::printf("%-26s %8.1f", c.name.c_str(), double(shapes[0].bytes()) / (1 << 20));
      double best = 0;
      for (const simd::Target& t : all) {
        simd::use(t);
        double s = median_seconds([&] { exe.call(std::span<const Buffer>{}, in); }, 7);
        best = std::max(best, moved / s / 1e9);
        std::printf(" %9.1f", moved / s / 1e9);
        std::fflush(stdout);
      }
      std::printf(" %8.0f%%\n", 100 * best / triad);
    }
  }
  simd::use(before);
}

const Register kRows{"rows", "softmax, norms, rope and reductions per SIMD target, GB/s",
                     rows_bench};

}  // namespace
}  // namespace prism::bench
