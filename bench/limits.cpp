// Measures the machine's fp32 peak and memory bandwidth, so that every benchmark can print
// its result as a fraction of what this machine can do, measured in the same run.
#include <immintrin.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/core/error.h"

namespace prism::bench {
namespace {

// Runs fn(thread index) on `threads` threads and waits.
void on_threads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, t);
  fn(0);
  for (auto& t : pool) t.join();
}

#if defined(__x86_64__)
// The sum of v's lanes, through memory: GCC 12 warns, wrongly, that _mm512_reduce_add_ps reads
// an uninitialized value.
__attribute__((target("avx512f"))) float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}
#endif

// 12 independent accumulators hide the FMA latency on two pipes; returns flops done.
double fma_loop(int64_t iterations) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int lanes = 16;
  auto set = [](float x) { return _mm512_set1_ps(x); };
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto add = [](V a, V b) { return _mm512_add_ps(a, b); };
  auto sum = [](V a) { return lane_sum(a); };
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  constexpr int lanes = 8;
  auto set = [](float x) { return _mm256_set1_ps(x); };
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto add = [](V a, V b) { return _mm256_add_ps(a, b); };
  auto sum = [](V a) {
    alignas(32) float f[8];
    _mm256_store_ps(f, a);
    float s = 0;
    for (float x : f) s += x;
    return s;
  };
#else  // a portable build (-DPRISM_NATIVE=OFF): the SSE vectors every x86-64 has, no FMA
  using V = float __attribute__((vector_size(16)));
  constexpr int lanes = 4;
  auto set = [](float x) { return V{x, x, x, x}; };
  auto fma = [](V a, V b, V c) { return a * b + c; };
  auto add = [](V a, V b) { return a + b; };
  auto sum = [](V a) { return a[0] + a[1] + a[2] + a[3]; };
#endif
  V acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = set(0.001f * i);
  V a = set(0.999999f), b = set(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = fma(acc[i], a, b);
  }
  V total = acc[0];
  for (int i = 1; i < 12; ++i) total = add(total, acc[i]);
  volatile float sink = sum(total);
  (void)sink;
  return 2.0 * lanes * 12 * static_cast<double>(iterations);
}

double fma_flops_per_iteration() { return fma_loop(1); }

#if defined(__x86_64__)
constexpr int kBf16Chains = 24;  // vdpbf16ps latency x throughput, with room

// kBf16Chains independent vdpbf16ps chains, each instruction 32 pairs of bf16 products summed
// into 16 f32 lanes (64 flops).
__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_loop(int64_t iterations) {
  __m512 acc[kBf16Chains];
  for (int i = 0; i < kBf16Chains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));  // 2^-24
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kBf16Chains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 total = acc[0];
  for (int i = 1; i < kBf16Chains; ++i) total = _mm512_add_ps(total, acc[i]);
  volatile float sink = lane_sum(total);
  (void)sink;
}

// Independent chains: latency x throughput, with room, and within the registers (16 ymm, 32 zmm).
constexpr int kAvx2Chains = 12, kVnniChains = 16;  // the loops below write them out

// kAvx2Chains independent chains of vpmaddubsw: 32 products of unsigned by signed bytes a
// 256-bit instruction, summed in pairs into 16 bits (64 ops).
__attribute__((target("avx2"))) void avx2_dot_loop(int64_t iterations) {
  volatile char start = 1;
  const __m256i b = _mm256_set1_epi8(start);
  // A volatile read each: 12 values the compiler cannot merge.
  __m256i a0 = _mm256_set1_epi8(start), a1 = _mm256_set1_epi8(start), a2 = _mm256_set1_epi8(start),
          a3 = _mm256_set1_epi8(start), a4 = _mm256_set1_epi8(start), a5 = _mm256_set1_epi8(start),
          a6 = _mm256_set1_epi8(start), a7 = _mm256_set1_epi8(start), a8 = _mm256_set1_epi8(start),
          a9 = _mm256_set1_epi8(start), a10 = _mm256_set1_epi8(start),
          a11 = _mm256_set1_epi8(start);
  for (int64_t it = 0; it < iterations; ++it) {
    // In asm: GCC 12 stores half the chains to the stack every iteration when it writes them.
    asm("vpmaddubsw %12, %0, %0\n\tvpmaddubsw %12, %1, %1\n\tvpmaddubsw %12, %2, %2\n\t"
        "vpmaddubsw %12, %3, %3\n\tvpmaddubsw %12, %4, %4\n\tvpmaddubsw %12, %5, %5\n\t"
        "vpmaddubsw %12, %6, %6\n\tvpmaddubsw %12, %7, %7\n\tvpmaddubsw %12, %8, %8\n\t"
        "vpmaddubsw %12, %9, %9\n\tvpmaddubsw %12, %10, %10\n\tvpmaddubsw %12, %11, %11"
        : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
          "+x"(a9), "+x"(a10), "+x"(a11)
        : "x"(b));
  }
  const __m256i total = _mm256_add_epi16(
      _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                       _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7))),
      _mm256_add_epi16(_mm256_add_epi16(a8, a9), _mm256_add_epi16(a10, a11)));
  volatile int sink = _mm256_extract_epi32(total, 0);
  (void)sink;
}

// The same with AVX-512 VNNI's vpdpbusd: 64 products of unsigned by signed bytes summed into 16
// 32-bit lanes (128 ops).
__attribute__((target("avx512f,avx512vnni"))) void vnni_dot_loop(int64_t iterations) {
  volatile char start = 1;
  const __m512i a = _mm512_set1_epi8(start), b = _mm512_set1_epi8(start);
  __m512i c0 = _mm512_set1_epi8(start), c1 = _mm512_set1_epi8(start), c2 = _mm512_set1_epi8(start),
          c3 = _mm512_set1_epi8(start), c4 = _mm512_set1_epi8(start), c5 = _mm512_set1_epi8(start),
          c6 = _mm512_set1_epi8(start), c7 = _mm512_set1_epi8(start), c8 = _mm512_set1_epi8(start),
          c9 = _mm512_set1_epi8(start), c10 = _mm512_set1_epi8(start),
          c11 = _mm512_set1_epi8(start), c12 = _mm512_set1_epi8(start),
          c13 = _mm512_set1_epi8(start), c14 = _mm512_set1_epi8(start),
          c15 = _mm512_set1_epi8(start);
  for (int64_t it = 0; it < iterations; ++it) {
    // In asm, as avx2_dot_loop (two statements: asm takes 30 operands at most).
    asm("vpdpbusd %9, %8, %0\n\tvpdpbusd %9, %8, %1\n\tvpdpbusd %9, %8, %2\n\t"
        "vpdpbusd %9, %8, %3\n\tvpdpbusd %9, %8, %4\n\tvpdpbusd %9, %8, %5\n\t"
        "vpdpbusd %9, %8, %6\n\tvpdpbusd %9, %8, %7"
        : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7)
        : "v"(a), "v"(b));
    asm("vpdpbusd %9, %8, %0\n\tvpdpbusd %9, %8, %1\n\tvpdpbusd %9, %8, %2\n\t"
        "vpdpbusd %9, %8, %3\n\tvpdpbusd %9, %8, %4\n\tvpdpbusd %9, %8, %5\n\t"
        "vpdpbusd %9, %8, %6\n\tvpdpbusd %9, %8, %7"
        : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15)
        : "v"(a), "v"(b));
  }
  __m512i total = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                       _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7))),
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)),
                       _mm512_add_epi32(_mm512_add_epi32(c12, c13), _mm512_add_epi32(c14, c15))));
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, total);
  volatile int sink = lanes[0];
  (void)sink;
}

// AMX: tiles of 16 rows x 64 bytes. tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16 one (as 16
// rows of pairs) into a 16x16 f32 tile: 16 * 16 * 32 * 2 = 16384 flops. Four accumulators from
// two A and two B tiles, the 2x2 blocking oneDNN's kernels use, keep the unit busy.
constexpr double kAmxFlopsPerIteration = 4 * 16384.0;

__attribute__((target("amx-tile,amx-bf16"))) void amx_dot_loop(int64_t iterations) {
  prism::cpu::AmxTileConfig config;
  for (int t = 0; t < 8; ++t) config.set(t, 16, 64);
  _tile_loadconfig(&config);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3f80;  // 1.0
    b[i] = 0x3380;  // 2^-24
  }
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  volatile float sink = c[0];
  (void)sink;
  _tile_release();
}
#endif

}  // namespace

double measure_amx_bf16_peak_gflops(int threads) {
#if defined(__x86_64__)
  static const bool usable = prism::cpu::amx_available();
  if (!usable) return 0;
  const int64_t iterations = 2'000'000;
  double s = best_seconds([&] { on_threads(threads, [&](int) { amx_dot_loop(iterations); }); });
  return kAmxFlopsPerIteration * iterations * threads / s / 1e9;
#else
  (void)threads;
  return 0;
#endif
}

double measure_bf16_peak_gflops(int threads) {
#if defined(__x86_64__)
  if (!cpu::simd::current().avx512_bf16) return 0;
  const int64_t iterations = 10'000'000;
  double s = best_seconds([&] { on_threads(threads, [&](int) { bf16_dot_loop(iterations); }); });
  return 64.0 * kBf16Chains * iterations * threads / s / 1e9;
#else
  (void)threads;
  return 0;
#endif
}

double measure_int8_peak_gops(int threads) {
#if defined(__x86_64__)
  const int64_t iterations = 10'000'000;
  if (cpu::simd::current().name().starts_with("avx3") && __builtin_cpu_supports("avx512vnni")) {
    const double s =
        best_seconds([&] { on_threads(threads, [&](int) { vnni_dot_loop(iterations); }); });
    return 128.0 * kVnniChains * iterations * threads / s / 1e9;
  }
  if (!__builtin_cpu_supports("avx2")) return 0;
  const double s =
      best_seconds([&] { on_threads(threads, [&](int) { avx2_dot_loop(iterations); }); });
  return 64.0 * kAvx2Chains * iterations * threads / s / 1e9;
#else
  (void)threads;
  return 0;
#endif
}

double measure_fp32_peak_gflops(int threads) {
  const int64_t iterations = 20'000'000;
  const double flops = fma_flops_per_iteration() * iterations;
  double s = best_seconds([&] { on_threads(threads, [&](int) { fma_loop(iterations); }); }, 5);
  return flops * threads / s / 1e9;
}

double measure_triad_gbps(int threads) {
  const int64_t n = 32 << 20;  // 3 arrays of 128 MiB
  auto alloc = [&] {
    auto* p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    return std::unique_ptr<float, decltype(&std::free)>(p, &std::free);
  };
  auto a = alloc(), b = alloc(), c = alloc();
  on_threads(threads, [&](int t) {  // first touch by the thread that will use the pages
    int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t i = lo; i < hi; ++i) a.get()[i] = 0, b.get()[i] = 1, c.get()[i] = 2;
  });
  double s = best_seconds([&] {
    on_threads(threads, [&](int t) {
      int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      float *pa = a.get(), *pb = b.get(), *pc = c.get();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
  });
  return 3.0 * n * sizeof(float) / s / 1e9;
}

// What a decode step does to its weights: each thread reads its share of 1 GiB once, as four
// streams at a time (four rows of a matrix), summing with AVX-512 so the loads are the limit.
ReadProbe::ReadProbe(int threads)
    : threads_(threads),
      data_(static_cast<float*>(std::aligned_alloc(64, kFloats * sizeof(float))), &std::free) {
  float* p = data_.get();
  on_threads(threads_, [&](int t) {  // first touch by the thread that will read the pages
    for (int64_t i = kFloats * t / threads_; i < kFloats * (t + 1) / threads_; ++i) p[i] = 1;
  });
}

void ReadProbe::pass() {
  constexpr int64_t streams = 4;
  const float* p = data_.get();
  std::vector<float> sums(threads_);
  on_threads(threads_, [&](int t) {
    int64_t lo = kFloats * t / threads_;
    int64_t len = (kFloats * (t + 1) / threads_ - lo) / streams / 16 * 16;
    const float* s0 = p + lo;
#if defined(__AVX512F__)
    __m512 acc[streams] = {};
    for (int64_t i = 0; i < len; i += 16)
      for (int64_t j = 0; j < streams; ++j)
        acc[j] = _mm512_add_ps(acc[j], _mm512_loadu_ps(s0 + j * len + i));
    float sum = 0;
    for (auto a : acc) sum += lane_sum(a);
#elif defined(__AVX__)
    // Two accumulators a stream: eight independent chains of adds hide their latency, so the
    // loads, not the adds, set the pace.
    __m256 acc[2 * streams] = {};
    for (int64_t i = 0; i < len; i += 16) {
      for (int64_t j = 0; j < streams; ++j) {
        acc[2 * j] = _mm256_add_ps(acc[2 * j], _mm256_loadu_ps(s0 + j * len + i));
        acc[2 * j + 1] = _mm256_add_ps(acc[2 * j + 1], _mm256_loadu_ps(s0 + j * len + i + 8));
      }
    }
    float sum = 0;
    for (__m256 a : acc) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, a);
      for (float v : lanes) sum += v;
    }
#else
    // Sixteen independent sums (one chain of float adds would wait on each add's latency).
    float part[16] = {};
    for (int64_t i = 0; i < streams * len; i += 16)
      for (int j = 0; j < 16; ++j) part[j] += s0[i + j];
    float sum = 0;
    for (float v : part) sum += v;
#endif
    sums[t] = sum;
  });
  volatile float sink = sums[0];
  (void)sink;
}

double ReadProbe::gbps() {
  auto start = std::chrono::steady_clock::now();
  pass();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(kFloats) * sizeof(float) / s / 1e9;
}

double ReadProbe::best_gbps(int repeats) {
  double s = best_seconds([&] { pass(); }, repeats);
  return static_cast<double>(kFloats) * sizeof(float) / s / 1e9;
}

double measure_read_gbps(int threads) { return ReadProbe(threads).best_gbps(); }

BusyCore::BusyCore() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  PRISM_CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0,
              "bench: sched_getaffinity failed");
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpu_ = c;
  pid_ = fork();
  PRISM_CHECK(pid_ >= 0, "bench: could not start a busy process");
  if (pid_ == 0) {  // the child: only system calls and a loop, as after fork in a threaded process
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu_, &one);
    sched_setaffinity(0, sizeof one, &one);
    volatile uint64_t x = 1;
    for (;;) x = x * 6364136223846793005u + 1442695040888963407u;
  }
}

BusyCore::~BusyCore() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

}  // namespace prism::bench
