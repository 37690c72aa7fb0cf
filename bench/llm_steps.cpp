#include "bench/llm_steps.h"

#include <cstdio>
#include <map>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/compiler/compile.h"
#include "prism/llm/engine.h"

namespace prism::bench {

void llm_steps_bench(const std::string& title,
                     const std::function<std::unique_ptr<models::CausalLM>(DType)>& make,
                     int64_t window, int64_t seqlen) {
  Platform& target = platform();
  double bandwidth = 0;
  if (target.name() == "cpu") {
    int threads = static_cast<cpu::CpuPlatform&>(target).pool().size();
    bandwidth = measure_triad_gbps(threads);
    std::printf("%s, %d threads, triad %.1f GB/s\n", title.c_str(), threads, bandwidth);
  } else {
    DeviceInfo dev = target.devices().at(0);
    bandwidth = dev.memory_gbps;
    std::printf("%s, %s: %s, nominal bandwidth %.0f GB/s\n", title.c_str(),
                std::string(target.name()).c_str(), dev.name.c_str(), bandwidth);
  }
  std::printf("%-6s %-8s %10s %12s %16s\n", "dtype", "step", "tokens", "tok/s",
              "of bandwidth bound");
  for (DType dtype : {DType::bf16, DType::f32}) {
    std::unique_ptr<models::CausalLM> model = make(dtype);
    Executable decode = llm::compile_step(target, *model, 1, seqlen);
    Executable prefill = llm::compile_step(target, *model, window, seqlen);
    std::map<std::string, Buffer, std::less<>> weights;
    double bytes = 0;
    for (const auto& p : decode.parameters()) {
      weights.emplace(p.name, target.allocate(p.shape));
      bytes += p.shape.bytes();
    }
    std::vector<Buffer> states;
    for (const models::StateSpec& s : model->state_specs(seqlen)) {
      states.push_back(target.allocate(s.shape));
      if (!s.positional) bytes += 2 * s.shape.bytes();
    }
    auto step = [&](Executable& exe, int64_t len, int32_t pos) {
      auto scalar = [&](int32_t v) {
        return target.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {v}));
      };
      std::vector<Buffer> in{target.upload(HostBuffer(Shape(DType::i32, {{"s", len}}))),
                             scalar(pos), scalar(static_cast<int32_t>(len - 1))};
      in.insert(in.end(), states.begin(), states.end());
      std::vector<Buffer> out = exe.call(weights, in);
      states.assign(out.begin() + 1, out.end());
    };
    double p = median_seconds([&] { step(prefill, window, 0); }, 3);
    int32_t pos = static_cast<int32_t>(window);
    double d = median_seconds([&] { step(decode, 1, pos++); }, 9);
    double bound = bandwidth * 1e9 / bytes;
    std::string dt(name(dtype));
    std::printf("%-6s %-8s %10lld %12.1f\n", dt.c_str(), "prefill", static_cast<long long>(window),
                static_cast<double>(window) / p);
    std::printf("%-6s %-8s %10d %12.2f %15.0f%%\n", dt.c_str(), "decode", 1, 1 / d,
                100 * (1 / d) / bound);
  }
}

}  // namespace prism::bench
