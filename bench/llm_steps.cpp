#include "bench/llm_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
#include "prism/llm/engine.h"
#include "prism/runtime/collectives.h"
#include "prism/runtime/compile.h"
#include "prism/runtime/processes.h"
#include "prism/runtime/sharded.h"

namespace prism::bench {
namespace {

// A device's limits, measured with prism's own programs on it: a copy of 1 GiB (a program
// that returns its input: the platform's own copy; bytes counted read and written), the same
// through a generated loop (x + 1 over bf16), and a bf16 product of 8192 x 8192 x 8192 on
// random values. Best of 5 calls each.
struct DeviceLimits {
  double copy_gbps = 0, loop_gbps = 0, bf16_gflops = 0;
};

DeviceLimits measure_device_limits(Platform& p) {
  DeviceLimits limits;
  auto seconds = [&](const Executable& exe, const std::vector<Buffer>& in) {
    return best_seconds([&] {
      exe.call(std::span<const Buffer>{}, in);
      exe.platform().synchronize();
    });
  };
  {
    const Shape big(DType::bf16, {{"n", int64_t{1} << 29}});
    const std::vector<Buffer> in{p.allocate(big)};
    const double bytes = 2.0 * static_cast<double>(big.bytes());
    Executable copy = compile(p, [](Tensor x) { return x; }, {big});
    limits.copy_gbps = bytes / seconds(copy, in) / 1e9;
    Executable add = compile(p, [](Tensor x) { return x + 1; }, {big});
    limits.loop_gbps = bytes / seconds(add, in) / 1e9;
  }
  const int64_t n = 8192;
  const Shape a(DType::bf16, {{"m", n}, {"k", n}}), b(DType::bf16, {{"k", n}, {"n", n}});
  Executable dot = compile(p, [](Tensor x, Tensor y) { return x.dot(y, "k"); }, {a, b});
  const double s = seconds(dot, {random_buffer(p, a), random_buffer(p, b)});
  limits.bf16_gflops = 2.0 * static_cast<double>(n * n * n) / s / 1e9;
  return limits;
}

}  // namespace

void llm_steps_bench(const std::string& title,
                     const std::function<std::unique_ptr<models::CausalLM>(DType)>& make,
                     int64_t window, int64_t seqlen) {
  Platform& target = platform();
  // The bound a decode step cannot beat: bytes read per token / memory bandwidth. On the CPU
  // the bandwidth is measured here, reading 1 GiB as a decode step reads its weights, before
  // and after each dtype's steps: the best of those is the roof, since bandwidth on a shared
  // machine moves from run to run and a low sample would make a roof the steps go through.
  const bool cpu = target.name() == "cpu";
  int threads = cpu ? static_cast<cpu::CpuPlatform&>(target).pool().size() : 0;
  std::vector<double> samples;
  auto sample = [&] {
    if (cpu) samples.push_back(measure_read_gbps(threads));
  };
  std::string where = cpu ? fmt::format("{} threads", threads)
                          : fmt::format("{}: {}", target.name(), target.devices().at(0).name);
  struct Row {
    DType dtype;
    // `flops`: a prefill's products with the weights, 2 x tokens x each matrix's elements
    // (the vocabulary's matrix once: only the last row's logits are computed); attention not
    // counted.
    double prefill_tok_s, decode_tok_s, bytes, flops;
    // The time a device spends in collectives per step (mean over the devices, waits for
    // the others included), or -1 without a mesh.
    double prefill_collectives = -1, decode_collectives = -1;
  };
  // --devices=N: the steps split over N devices of the platform (tensor parallel), put beside
  // the same steps on one device of it, measured in the same run. Under mpirun (a run of
  // several processes: docs/cluster.md) by default one device in each process, with nothing
  // beside: one process cannot run the others' cores.
  const int processes = Processes::asked();
  const int64_t devices = std::stoll(option("devices", std::to_string(processes)));
  PRISM_CHECK(devices >= 1, "llm-shapes: --devices must be at least 1");
  // The steps of each dtype on platform `on`, over `mesh`, timed.
  auto measure = [&](Platform& on, const Mesh& mesh, bool sample_between) {
    std::vector<Row> rows;
    for (DType dtype : {DType::bf16, DType::f32}) {
      std::unique_ptr<models::CausalLM> model = make(dtype);
      ShardedExecutable decode = llm::compile_sharded_step(on, *model, 1, seqlen, mesh);
      ShardedExecutable prefill = llm::compile_sharded_step(on, *model, window, seqlen, mesh);
      const std::vector<Platform*>& devs = decode.devices();
      std::vector<NamedBuffers> weights(devs.size());
      double bytes = 0, flops = 0;
      for (const auto& p : decode.parameters()) {
        for (size_t k = 0; k < devs.size(); ++k) {
          weights[k].emplace(p.name, devs[k]->allocate(local_shape(p.shape, p.split, mesh)));
        }
        bytes += p.shape.bytes();
        if (p.shape.rank() == 2) {
          flops += 2.0 * static_cast<double>(p.shape.numel()) *
                   static_cast<double>(p.shape.has("voc") ? 1 : window);
        }
      }
      weights = decode.prepare(std::move(weights));  // as the engine does after loading
      std::vector<std::vector<Buffer>> states(devs.size());
      std::vector<models::StateSpec> specs = model->state_specs(seqlen);
      for (size_t i = 0; i < specs.size(); ++i) {
        const Shape local = local_shape(specs[i].shape, decode.input_splits()[3 + i], mesh);
        for (size_t k = 0; k < devs.size(); ++k) states[k].push_back(devs[k]->allocate(local));
        if (!specs[i].positional) bytes += 2 * specs[i].shape.bytes();
      }
      auto step = [&](ShardedExecutable& exe, int64_t len, int32_t pos) {
        std::vector<std::vector<Buffer>> in(devs.size());
        for (size_t k = 0; k < devs.size(); ++k) {
          Platform& d = *devs[k];
          auto scalar = [&](int32_t v) {
            return d.upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {v}));
          };
          in[k] = {d.upload(HostBuffer(Shape(DType::i32, {{"s", len}}))), scalar(pos),
                   scalar(static_cast<int32_t>(len - 1))};
          in[k].insert(in[k].end(), states[k].begin(), states[k].end());
        }
        std::vector<std::vector<Buffer>> out = exe.call(weights, in);
        for (size_t k = 0; k < devs.size(); ++k) states[k].assign(out[k].begin() + 1, out[k].end());
      };
      // The collectives' time per step and device, from the communicator's count across the
      // timed steps (and the warm-up step before them).
      const Communicator* comm =
          on.name() == "cpu" ? static_cast<cpu::CpuPlatform*>(devs[0])->communicator() : nullptr;
      auto per_step = [&](double before, int steps) {
        return comm ? (comm->seconds() - before) / steps / static_cast<double>(devs.size()) : -1;
      };
      double before = comm ? comm->seconds() : 0;
      double p = median_seconds([&] { step(prefill, window, 0); }, 3);
      const double p_collectives = per_step(before, 4);
      int32_t pos = static_cast<int32_t>(window);
      before = comm ? comm->seconds() : 0;
      double d = median_seconds([&] { step(decode, 1, pos++); }, 9);
      rows.push_back({dtype, static_cast<double>(window) / p, 1 / d, bytes, flops, p_collectives,
                      per_step(before, 10)});
      if (sample_between) sample();
    }
    return rows;
  };
  const Mesh mesh = devices > 1 ? Mesh({{models::kModelAxis, devices}}) : Mesh();
  if (devices > 1) {
    where += processes > 1 ? fmt::format(", split over {} devices, one in each of {} processes",
                                         devices, processes)
                           : fmt::format(", split over {} devices", devices);
  }
  sample();
  std::vector<Row> rows = measure(target, mesh, true);
  // Another platform, or a mesh, is put beside prism's own CPU backend on one device,
  // measured in the same run (--beside=0: not).
  std::vector<Row> cpu_rows;
  const bool beside = (!cpu || devices > 1) && processes == 1 && option("beside", "1") != "0";
  if (beside) cpu_rows = measure(get_platform("cpu"), Mesh(), false);
  double bandwidth = 0, peak = 0;
  if (cpu) {
    bandwidth = *std::max_element(samples.begin(), samples.end());
    std::printf("%s, %s, read bandwidth %.1f GB/s (best of %zu samples, %.1f-%.1f)\n",
                title.c_str(), where.c_str(), bandwidth, samples.size(),
                *std::min_element(samples.begin(), samples.end()), bandwidth);
  } else {
    // A device: its limits measured with prism's programs, beside the nominal ones.
    const DeviceInfo nominal = target.devices().at(0);
    const DeviceLimits measured = measure_device_limits(target);
    bandwidth = std::max(measured.copy_gbps, measured.loop_gbps);
    peak = measured.bf16_gflops;
    std::printf(
        "%s, %s\nmeasured (bytes read + written over 1 GiB): copy %.0f GB/s, x + 1 in a generated "
        "loop %.0f GB/s (nominal %.0f); bf16 product %.1f TFLOP/s (8192^3; nominal %.1f)\n",
        title.c_str(), where.c_str(), measured.copy_gbps, measured.loop_gbps, nominal.memory_gbps,
        peak / 1e3, nominal.bf16_gflops / 1e3);
  }
  if (beside) {
    std::printf("ratios against prism's cpu backend as one device on %s\n",
                get_platform("cpu").devices().at(0).name.c_str());
  }
  std::printf("%-6s %-8s %10s %12s %19s%s\n", "dtype", "step", "tokens", "tok/s",
              peak > 0 ? "of bw bound / peak" : "of bandwidth bound",
              beside ? "   vs prism's cpu" : "");
  auto bound = [&](const Row& r) {
    return bandwidth > 0
               ? fmt::format("{:.0f}%", 100 * r.decode_tok_s / (bandwidth * 1e9 / r.bytes))
               : std::string("-");
  };
  // A prefill's products as a share of the measured bf16 peak (on a device).
  auto of_peak = [&](const Row& r) {
    return peak > 0 ? fmt::format("{:.0f}%", 100 * r.flops * r.prefill_tok_s /
                                                 static_cast<double>(window) / (peak * 1e9))
                    : std::string("");
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string dt(name(r.dtype));
    std::string vs_prefill, vs_decode;
    if (beside) {
      vs_prefill = fmt::format("{:17.2f}x", r.prefill_tok_s / cpu_rows[i].prefill_tok_s);
      vs_decode = fmt::format("{:17.2f}x", r.decode_tok_s / cpu_rows[i].decode_tok_s);
    }
    std::printf("%-6s %-8s %10lld %12.1f %19s%s\n", dt.c_str(), "prefill",
                static_cast<long long>(window), r.prefill_tok_s, of_peak(r).c_str(),
                vs_prefill.c_str());
    std::printf("%-6s %-8s %10d %12.2f %19s%s\n", dt.c_str(), "decode", 1, r.decode_tok_s,
                bound(r).c_str(), vs_decode.c_str());
  }
  if (!rows.empty() && rows[0].decode_collectives >= 0) {
    std::printf("collectives per step and device (waits for the others included):\n");
    for (const Row& r : rows) {
      std::printf("%-6s prefill %.2f ms (%.0f%% of the step), decode %.3f ms (%.0f%%)\n",
                  std::string(name(r.dtype)).c_str(), r.prefill_collectives * 1e3,
                  100 * r.prefill_collectives * r.prefill_tok_s / static_cast<double>(window),
                  r.decode_collectives * 1e3, 100 * r.decode_collectives * r.decode_tok_s);
    }
  }
}

}  // namespace prism::bench
