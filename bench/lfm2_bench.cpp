// LFM 2.5 decode and prefill at LFM2.5-1.2B's shapes (bf16 weights, f32 and bf16 compute), next
// to the bound that memory bandwidth puts on decoding: every token reads every weight once,
// so tokens/s <= triad bandwidth / bytes of weights.
#include <cstdio>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/compiler/compile.h"
#include "prism/llm/engine.h"
#include "prism/models/lfm2.h"

namespace prism::bench {
namespace {

// LiquidAI/LFM2.5-1.2B's config.json, as parsed: 10 convolution and 6 attention layers.
models::Lfm2Config lfm25_1_2b() {
  using Layer = models::Lfm2Config::Layer;
  constexpr Layer C = Layer::conv, A = Layer::attention;
  models::Lfm2Config c;
  c.vocab_size = 65536;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;  // block_ff_dim 12288, auto-adjusted
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.max_positions = 128000;
  c.conv_kernel = 3;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  c.layers = {C, C, A, C, C, A, C, C, A, C, A, C, A, C, A, C};
  return c;
}

void lfm2_bench() {
  Platform& cpu = get_platform("cpu");
  int threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  double triad = measure_triad_gbps(threads);
  const int64_t seqlen = 1024;
  std::printf("LFM2.5 1.2B shapes, %d threads, triad %.1f GB/s\n", threads, triad);
  std::printf("%-6s %-8s %10s %12s %16s\n", "dtype", "step", "tokens", "tok/s",
              "of bandwidth bound");
  for (DType dtype : {DType::bf16, DType::f32}) {
    models::Lfm2 model(lfm25_1_2b(), dtype);
    Executable decode = llm::compile_step(cpu, model, 1, seqlen);
    Executable prefill = llm::compile_step(cpu, model, 512, seqlen);
    std::map<std::string, Buffer, std::less<>> weights;
    double weight_bytes = 0;
    for (const auto& p : decode.parameters()) {
      weights.emplace(p.name, cpu.allocate(p.shape));
      weight_bytes += p.shape.bytes();
    }
    std::vector<Buffer> states;
    for (const models::StateSpec& s : model.state_specs(seqlen)) {
      states.push_back(cpu.allocate(s.shape));
    }
    auto step = [&](Executable& exe, int64_t window, int32_t pos) {
      std::vector<Buffer> in{
          cpu.upload(HostBuffer(Shape(DType::i32, {{"s", window}}))),
          cpu.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {pos})),
          cpu.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {int32_t(window - 1)}))};
      in.insert(in.end(), states.begin(), states.end());
      std::vector<Buffer> out = exe.call(weights, in);
      states.assign(out.begin() + 1, out.end());
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

const Register kLfm2{"llm-lfm2", "LFM2.5 1.2B-shaped decode and prefill", lfm2_bench};

}  // namespace
}  // namespace prism::bench
