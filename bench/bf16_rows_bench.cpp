// The CPU's products of a few bf16 rows against bf16 weights stored as rows, {n, k}, the
// products of batched decoding (dot_rows.h): one row through the matrix-vector kernel
// (f32x_bf16w, as decoding one sequence runs), 2 to 16 through f32_rows_plain (weights widened
// in cache, the kernel of CPUs before AVX-512). Each product is an 8192 x 2048 matrix, as
// Llama 3.2 1B's MLP has, copied to fill 1 GiB so that every pass streams the weights from
// memory. Printed: GB/s of weights, that as a fraction of a plain read of memory measured in
// the same run (the ceiling of a product that reads each weight once), GFLOP/s, and that as a
// fraction of the f32 FMA peak measured in the same run (the other ceiling: from about 8 rows
// on, the products are bound by the multiply-adds). With AVX-512 BF16, a second table: the
// same weights kept blocked (weight_layout.h), as the CPU backend keeps them there, through
// the one-row kernel (bf16_blocked) and, for 2-16 rows, both kernels of blocked weights:
// f32_rows_blocked (FMAs on weights widened in registers) and bf16_rows_blocked (vdpbf16ps),
// against the f32 FMA and the bf16 pair-product peaks. Options: --threads=N (default: every
// core).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/backends/registry.h"
#include "prism/core/dtype.h"

namespace prism::bench {
namespace {

constexpr int64_t kK = 2048;

void bf16_rows_bench() {
  const int threads = std::stoi(
      option("threads", std::to_string(std::max(1u, std::thread::hardware_concurrency()))));
  cpu::ThreadPool pool(threads);
  const int64_t total = std::stoll(option("bytes", std::to_string(int64_t{1} << 30)));
  const double read = ReadProbe(threads).best_gbps();
  const double peak = measure_fp32_peak_gflops(threads);
  std::printf("%s; %d threads here; plain read %.1f GB/s, f32 FMA peak %.0f GFLOP/s\n",
              get_platform("cpu").devices().at(0).name.c_str(), threads, read, peak);
  const cpu::DotRowKernels dots = cpu::dot_row_kernels();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1, 1);
  // --n=ROWS and --cached=1: smaller products, and every pass over the same one (the
  // kernels' arithmetic alone, with the weights in cache).
  const int64_t kN = std::stoll(option("n", "8192"));
  const bool cached = option("cached", "0") == "1";
  const int64_t bytes = kN * kK * 2, copies = std::max<int64_t>(1, total / bytes);
  std::vector<uint16_t> weights(static_cast<size_t>((cached ? 1 : copies) * kN * kK));
  for (int64_t i = 0; i < kN * kK; ++i) weights[i] = f32_to_bf16(value(rng));
  for (int64_t c = 1; c < (cached ? 1 : copies); ++c)
    std::memcpy(weights.data() + c * kN * kK, weights.data(), static_cast<size_t>(bytes));
  std::vector<float> x(16 * kK);
  for (float& v : x) v = value(rng);
  std::vector<uint16_t> x16(x.size());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
  std::vector<float> packed(16 * cpu::plain_rows_stride(kK));
  dots.pack_rows_plain(x16.data(), kK, 16, kK, packed.data());
  std::printf("%4s %-12s %9s %8s %9s %8s\n", "rows", "kernel", "GB/s", "of read", "GFLOP/s",
              "of peak");
  for (int64_t m : {1, 2, 4, 8, 16}) {
    std::vector<float> out(m * kN);
    const double seconds = median_seconds([&] {
      for (int64_t c = 0; c < copies; ++c) {
        const uint16_t* w = weights.data() + (cached ? 0 : c * kN * kK);
        pool.parallel_for(kN, 16, [&](int64_t n0, int64_t n1) {  // as the executable
          if (m == 1) {
            cpu::for_row_groups(n0, n1, [&](const int64_t* rows) {
              const uint16_t* ws[cpu::kDotRows];
              float sums[cpu::kDotRows];
              for (int r = 0; r < cpu::kDotRows; ++r) ws[r] = w + rows[r] * kK;
              dots.f32x_bf16w(x.data(), ws, kK, sums);
              for (int r = 0; r < cpu::kDotRows; ++r) out[rows[r]] = sums[r];
            });
          } else {
            dots.f32_rows_plain(packed.data(), m, w + n0 * kK, kK, n1 - n0, out.data() + n0, kN);
          }
        });
      }
    });
    const double gbps = static_cast<double>(copies * bytes) / seconds / 1e9;
    const double gflops = 2.0 * static_cast<double>(copies * m * kN * kK) / seconds / 1e9;
    std::printf("%4lld %-12s %9.1f %7.0f%% %9.1f %7.0f%%\n", static_cast<long long>(m),
                m == 1 ? "f32x_bf16w" : "f32_rows_plain", gbps, 100 * gbps / read, gflops,
                100 * gflops / peak);
    std::fflush(stdout);
  }
  if (!dots.bf16_rows_blocked || kN % cpu::kWeightBlockRows != 0) return;

  // The weights kept blocked, every copy, and the kernels of blocked weights.
  for (int64_t c = 0; c < (cached ? 1 : copies); ++c) {
    std::vector<uint16_t> one(weights.begin() + c * kN * kK, weights.begin() + (c + 1) * kN * kK);
    cpu::copy_weights(
        cpu::WeightLayout::bf16_blocks, reinterpret_cast<const std::byte*>(one.data()),
        reinterpret_cast<std::byte*>(weights.data() + c * kN * kK), kN, kK, true, pool);
  }
  const double bf16_peak = measure_bf16_peak_gflops(threads);
  std::printf("weights blocked; bf16 pair-product peak %.0f GFLOP/s\n", bf16_peak);
  std::printf("%4s %-18s %9s %8s %9s %8s %8s\n", "rows", "kernel", "GB/s", "of read", "GFLOP/s",
              "of f32", "of bf16");
  std::vector<float> x32(16 * kK);
  for (size_t i = 0; i < x32.size(); ++i) x32[i] = bf16_to_f32(x16[i]);
  for (int64_t m : {1, 2, 3, 4, 8, 16}) {
    for (const bool pairs : {false, true}) {
      if (m == 1 && !pairs) continue;
      std::vector<float> out(m * kN);
      const double seconds = median_seconds([&] {
        for (int64_t c = 0; c < copies; ++c) {
          const uint16_t* w = weights.data() + (cached ? 0 : c * kN * kK);
          pool.parallel_for(kN / 64, 1, [&](int64_t b0, int64_t b1) {
            const uint16_t* wb = w + b0 * 64 * kK;
            if (m == 1) {
              dots.bf16_blocked(x16.data(), wb, kK, b1 - b0, out.data() + b0 * 64);
            } else if (pairs) {
              dots.bf16_rows_blocked(x16.data(), kK, m, wb, kK, b1 - b0, out.data() + b0 * 64, kN);
            } else {
              dots.f32_rows_blocked(x32.data(), kK, m, wb, kK, b1 - b0, out.data() + b0 * 64, kN);
            }
          });
        }
      });
      const double gbps = static_cast<double>(copies * bytes) / seconds / 1e9;
      const double gflops = 2.0 * static_cast<double>(copies * m * kN * kK) / seconds / 1e9;
      std::printf("%4lld %-18s %9.1f %7.0f%% %9.1f %7.0f%% %7.0f%%\n", static_cast<long long>(m),
                  m == 1  ? "bf16_blocked"
                  : pairs ? "bf16_rows_blocked"
                          : "f32_rows_blocked",
                  gbps, 100 * gbps / read, gflops, 100 * gflops / peak, 100 * gflops / bf16_peak);
      std::fflush(stdout);
    }
  }
}

const Register kBf16Rows{"bf16-rows",
                         "products of 1-16 bf16 rows against bf16 weights as stored and "
                         "blocked: GB/s, GFLOP/s, against the read bandwidth and the peaks",
                         bf16_rows_bench};

}  // namespace
}  // namespace prism::bench
