// One decode step and one 512-token prefill step at Llama 3.2 1B's shapes on uninitialized
// weights (bf16 and f32), on the platform given with --platform, next to the bound memory
// bandwidth puts on decoding: every token reads every weight once. Needs no checkpoint, so it
// runs on any platform; `llm` is the side-by-side with llama.cpp on a real checkpoint.
#include <cstdio>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/compiler/compile.h"
#include "prism/llm/engine.h"
#include "prism/models/llama.h"

namespace prism::bench {
namespace {

models::LlamaConfig llama_1b() {
  models::LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_layers = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.max_positions = 131072;
  c.rope_theta = 500000;
  c.tie_word_embeddings = true;
  return c;
}

void llm_shapes_bench() {
  Platform& target = platform();
  const int64_t seqlen = 1024;
  double triad = 0;  // the memory bandwidth decoding is bound by
  if (target.name() == "cpu") {
    int threads = static_cast<cpu::CpuPlatform&>(target).pool().size();
    triad = measure_triad_gbps(threads);
    std::printf("Llama 3.2 1B shapes, %d threads, triad %.1f GB/s\n", threads, triad);
  } else {
    DeviceInfo dev = target.devices().at(0);
    triad = dev.memory_gbps;
    std::printf("Llama 3.2 1B shapes, %s: %s, nominal bandwidth %.0f GB/s\n",
                std::string(target.name()).c_str(), dev.name.c_str(), triad);
  }
  std::printf("%-6s %-8s %10s %12s %16s\n", "dtype", "step", "tokens", "tok/s",
              "of bandwidth bound");
  for (DType dtype : {DType::bf16, DType::f32}) {
    models::Llama model(llama_1b(), dtype);
    Executable decode = llm::compile_step(target, model, 1, seqlen);
    Executable prefill = llm::compile_step(target, model, 512, seqlen);
    std::map<std::string, Buffer, std::less<>> weights;
    double weight_bytes = 0;
    for (const auto& p : decode.parameters()) {
      weights.emplace(p.name, target.allocate(p.shape));
      weight_bytes += p.shape.bytes();
    }
    std::vector<Buffer> caches;
    for (const Shape& s : model.cache_shapes(seqlen)) caches.push_back(target.allocate(s));
    auto step = [&](Executable& exe, int64_t window, int32_t pos) {
      std::vector<Buffer> in{
          target.upload(HostBuffer(Shape(DType::i32, {{"s", window}}))),
          target.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {pos})),
          target.upload(
              HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {int32_t(window - 1)}))};
      in.insert(in.end(), caches.begin(), caches.end());
      std::vector<Buffer> out = exe.call(weights, in);
      caches.assign(out.begin() + 1, out.end());
    };
    double p = median_seconds([&] { step(prefill, 512, 0); }, 3);
    int32_t pos = 512;
    double d = median_seconds([&] { step(decode, 1, pos++); }, 9);
    double bound = triad * 1e9 / weight_bytes;
    std::string dt(name(dtype));
    std::printf("%-6s %-8s %10d %12.1f\n", dt.c_str(), "prefill", 512, 512 / p);
    std::printf("%-6s %-8s %10d %12.2f %15.0f%%\n", dt.c_str(), "decode", 1, 1 / d,
                100 * (1 / d) / bound);
  }
}

const Register kLlmShapes{
    "llm-shapes", "Llama 3.2 1B-shaped decode and prefill steps, on --platform", llm_shapes_bench};

}  // namespace
}  // namespace prism::bench
