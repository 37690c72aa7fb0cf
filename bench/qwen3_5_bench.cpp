// Qwen 3.5 decode and prefill at Qwen3.5-0.8B's shapes (random bf16 weights, f32 and bf16
// compute), next to the bound that memory bandwidth puts on decoding: every token reads every
// weight once and reads and writes the recurrent states, so
// tokens/s <= triad bandwidth / (bytes of weights + 2 x bytes of recurrent and conv states).
#include <cstdio>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/compiler/compile.h"
#include "prism/llm/engine.h"
#include "prism/models/qwen3_5.h"

namespace prism::bench {
namespace {

models::Qwen3_5Config qwen3_5_0_8b() {
  models::Qwen3_5Config c;
  c.vocab_size = 248320;
  c.hidden_size = 1024;
  c.intermediate_size = 3584;
  for (int i = 0; i < 24; ++i) {  // three linear-attention layers, then one full-attention
    c.layers.push_back((i + 1) % 4 ? models::Qwen3_5Config::Layer::linear_attention
                                   : models::Qwen3_5Config::Layer::full_attention);
  }
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rotary_dim = 64;
  c.rope_theta = 1e7;
  c.linear_key_heads = 16;
  c.linear_value_heads = 16;
  c.linear_key_dim = 128;
  c.linear_value_dim = 128;
  c.conv_kernel = 4;
  c.max_positions = 262144;
  c.tie_word_embeddings = true;
  c.prefix = "model.language_model.";
  return c;
}

void qwen3_5_bench() {
  Platform& cpu = get_platform("cpu");
  int threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  double triad = measure_triad_gbps(threads);
  const int64_t seqlen = 1024, window = 512;
  std::printf("Qwen3.5 0.8B shapes, %d threads, triad %.1f GB/s\n", threads, triad);
  std::printf("%-6s %-8s %10s %12s %16s\n", "dtype", "step", "tokens", "tok/s",
              "of bandwidth bound");
  for (DType dtype : {DType::bf16, DType::f32}) {
    models::Qwen3_5 model(qwen3_5_0_8b(), dtype);
    Executable decode = llm::compile_step(cpu, model, 1, seqlen);
    Executable prefill = llm::compile_step(cpu, model, window, seqlen);
    std::map<std::string, Buffer, std::less<>> weights;
    double bytes = 0;
    for (const auto& p : decode.parameters()) {  // zeros: the speed does not depend on them
      weights.emplace(p.name, cpu.allocate(p.shape));
      bytes += p.shape.bytes();
    }
    std::vector<Buffer> states;
    for (const models::StateSpec& s : model.state_specs(seqlen)) {
      states.push_back(cpu.allocate(s.shape));
      if (!s.positional) bytes += 2 * s.shape.bytes();
    }
    auto step = [&](Executable& exe, int64_t len, int32_t pos) {
      std::vector<Buffer> in{
          cpu.upload(HostBuffer(Shape(DType::i32, {{"s", len}}))),
          cpu.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {pos})),
          cpu.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {int32_t(len - 1)}))};
      in.insert(in.end(), states.begin(), states.end());
      std::vector<Buffer> out = exe.call(weights, in);
      states.assign(out.begin() + 1, out.end());
    };
    double p = median_seconds([&] { step(prefill, window, 0); }, 3);
    int32_t pos = static_cast<int32_t>(window);
    double d = median_seconds([&] { step(decode, 1, pos++); }, 9);
    double bound = triad * 1e9 / bytes;
    std::string dt(name(dtype));
    std::printf("%-6s %-8s %10lld %12.1f\n", dt.c_str(), "prefill", static_cast<long long>(window),
                double(window) / p);
    std::printf("%-6s %-8s %10d %12.2f %15.0f%%\n", dt.c_str(), "decode", 1, 1 / d,
                100 * (1 / d) / bound);
  }
}

const Register kQwen3_5{"qwen3_5", "Qwen3.5 0.8B-shaped decode and prefill", qwen3_5_bench};

}  // namespace
}  // namespace prism::bench
