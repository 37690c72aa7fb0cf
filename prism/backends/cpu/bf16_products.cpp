#include "prism/backends/cpu/bf16_products.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string_view>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/gemm.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/topology.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"
#include "prism/core/error.h"
#include "prism/core/shape.h"

namespace prism::cpu {
namespace {

// The product measured: 192 rows of a prompt against a 512-column slice of a weight of 1024
// inputs (201 MFLOP, about half a millisecond a kind on a core at 400 GFLOP/s), 5 rounds.
constexpr int kRows = 192, kDepth = 1024, kColumns = 512, kRounds = 5;

// The few-row products measured: 8 rows (a batch of conversations, a check of 7 guesses)
// against 256 weight rows of 1024 values kept blocked, 512 KiB, in L2: the kernels'
// arithmetic, which decides how many rows they take before reading the weights is no longer
// what bounds them. A call is 4.2 MFLOP (some 20-40 us); 80 of each kind in turn, the best
// of each: a few milliseconds in all.
constexpr int kFewRows = 8, kFewRowsColumns = 256, kFewRowsRounds = 80;

// The seconds one call of fn takes.
template <typename Fn>
double seconds(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Of two ways to compute one product of `flop` flops, each way's best GFLOP/s over `rounds`
// calls of each in turn, after a first call of each (the buffers' first touches).
template <typename A, typename B>
std::array<double, 2> best_gflops(double flop, int rounds, A&& a, B&& b) {
  std::array<double, 2> best{0, 0};
  a();
  b();
  for (int r = 0; r < rounds; ++r) {
    best[0] = std::max(best[0], flop / seconds(a) / 1e9);
    best[1] = std::max(best[1], flop / seconds(b) / 1e9);
  }
  return best;
}

std::string cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/prism/cpu-products";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/prism/cpu-products";
  return "";
}

// A line of the cache: key, the faster kind's name, the two kinds' GFLOP/s (in the order the
// choice names them), separated by tabs.
struct Entry {
  std::string key, path;
  double first_gflops, second_gflops;
};

std::optional<Entry> parse(const std::string& line) {
  std::vector<std::string> f;
  std::istringstream in(line);
  for (std::string part; std::getline(in, part, '\t');) f.push_back(part);
  if (f.size() != 4 || (f[1] != "onednn" && f[1] != "fma" && f[1] != "dpbf16" && f[1] != "amx")) {
    return std::nullopt;
  }
  Entry e{f[0], f[1], 0, 0};
  char* end = nullptr;
  e.first_gflops = std::strtod(f[2].c_str(), &end);
  if (end == f[2].c_str() || *end) return std::nullopt;
  e.second_gflops = std::strtod(f[3].c_str(), &end);
  if (end == f[3].c_str() || *end) return std::nullopt;
  return e;
}

std::optional<Entry> cached(const std::string& path, const std::string& key) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto e = parse(line);
    if (e && e->key == key) return e;
  }
  return std::nullopt;
}

// Rewrites the cache with `e` in place of any line of its key (through a file of this
// process's renamed over it, so that a reader never sees half a file). Failures are ignored:
// the next process measures again.
void remember(const std::string& path, const Entry& e) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string lines;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto old = parse(line);
      if (old && old->key != e.key) lines += line + "\n";
    }
  }
  lines += fmt::format("{}\t{}\t{:.1f}\t{:.1f}\n", e.key, e.path, e.first_gflops, e.second_gflops);
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << lines;
    if (!out.flush()) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

// Of two kinds of product, the faster on this CPU: from the cache's line under `key`, else (and
// with `again`) measured by `measure` (each kind's GFLOP/s, in the order of `names`), rounded
// to the tenth the cache keeps (so that later processes say what this one says) and kept.
struct Measured {
  int faster;  // 0 or 1
  double gflops[2];
  const char* how;  // "measured" or "measured before"
};
Measured measured_choice(const std::string& key, const std::array<const char*, 2>& names,
                         bool again, const std::function<std::array<double, 2>()>& measure) {
  const std::string path = cache_path();
  if (!again) {
    if (auto e = cached(path, key); e && (e->path == names[0] || e->path == names[1])) {
      return {e->path == names[0] ? 0 : 1, {e->first_gflops, e->second_gflops}, "measured before"};
    }
  }
  const std::array<double, 2> s = measure();
  Measured m{0, {std::round(s[0] * 10) / 10, std::round(s[1] * 10) / 10}, "measured"};
  m.faster = m.gflops[1] > m.gflops[0] ? 1 : 0;
  remember(path, {key, names[m.faster], m.gflops[0], m.gflops[1]});
  return m;
}

// "bf16 products in oneDNN (223 GFLOP/s a core against 101 on f32 FMAs, measured)".
std::string describe(const Bf16ProductsChoice& c, std::string_view how) {
  if (c.path == Bf16Products::onednn) {
    return fmt::format(
        "bf16 products in oneDNN ({:.0f} GFLOP/s a core against {:.0f} on f32 FMAs, "
        "{})",
        c.onednn_gflops, c.fma_gflops, how);
  }
  return fmt::format(
      "bf16 products on f32 FMAs ({} kernel; {:.0f} GFLOP/s a core against {:.0f} in oneDNN, {})",
      gemm_kernel_name(), c.fma_gflops, c.onednn_gflops, how);
}

// PRISM_CPU_PRODUCTS, checked: "", "onednn", "fma", "amx" or "measure" (all the choices read
// it).
std::string_view products_wanted() {
  const char* env = std::getenv("PRISM_CPU_PRODUCTS");
  const std::string_view want = env ? env : "";
  PRISM_CHECK(
      want.empty() || want == "onednn" || want == "fma" || want == "amx" || want == "measure",
      "PRISM_CPU_PRODUCTS={}: expected onednn, fma, amx or measure", want);
  PRISM_CHECK(want != "amx" || amx_gemm_available(),
              "PRISM_CPU_PRODUCTS=amx: this CPU (or this process) has no AMX-BF16 tiles");
  return want;
}

Bf16ProductsChoice choose() {
  Bf16ProductsChoice c;
  const std::string_view want = products_wanted();
  if (!onednn::multiplies_bf16()) {
    PRISM_CHECK(want != "onednn",
                "PRISM_CPU_PRODUCTS=onednn: oneDNN has no bf16 products on this CPU");
    c.path = Bf16Products::fma;
    c.description = fmt::format("bf16 products on f32 FMAs ({} kernel; oneDNN has none here)",
                                gemm_kernel_name());
    return c;
  }
  if (want == "onednn" || want == "fma" || want == "amx") {
    c.path = want == "fma" ? Bf16Products::fma : Bf16Products::onednn;
    c.description = want != "fma"
                        ? std::string("bf16 products in oneDNN (PRISM_CPU_PRODUCTS)")
                        : fmt::format("bf16 products on f32 FMAs ({} kernel; PRISM_CPU_PRODUCTS)",
                                      gemm_kernel_name());
    return c;
  }
  const Measured m = measured_choice(bf16_products_key(), {"onednn", "fma"}, want == "measure", [] {
    const Bf16ProductsSpeed s = measure_bf16_products(kRows, kDepth, kColumns, kRounds);
    return std::array<double, 2>{s.onednn_gflops, s.fma_gflops};
  });
  c.path = m.faster == 0 ? Bf16Products::onednn : Bf16Products::fma;
  c.onednn_gflops = m.gflops[0];
  c.fma_gflops = m.gflops[1];
  c.description = describe(c, m.how);
  return c;
}

Bf16TilesChoice choose_tiles() {
  Bf16TilesChoice c;
  const std::string_view want = products_wanted();
  if (!amx_gemm_available() || bf16_products().path != Bf16Products::onednn) return c;
  if (want == "amx" || want == "onednn") {
    c.tiles = want == "amx";
    c.how = "PRISM_CPU_PRODUCTS";
    return c;
  }
  const Measured m =
      measured_choice(bf16_products_key() + " | tiles", {"onednn", "amx"}, want == "measure", [] {
        const Bf16TilesSpeed s = measure_bf16_tiles(kRows, kDepth, kColumns, kRounds);
        return std::array<double, 2>{s.onednn_gflops, s.tiles_gflops};
      });
  c.tiles = m.faster == 1;
  c.onednn_gflops = m.gflops[0];
  c.tiles_gflops = m.gflops[1];
  c.how = m.how;
  return c;
}

Bf16RowsChoice choose_rows() {
  Bf16RowsChoice c;
  if (!dot_row_kernels().bf16_rows_blocked) return c;
  const Measured m = measured_choice(
      bf16_products_key() + " | rows", {"fma", "dpbf16"}, products_wanted() == "measure", [] {
        const Bf16RowsSpeed s =
            measure_bf16_rows(kFewRows, kDepth, kFewRowsColumns, kFewRowsRounds);
        return std::array<double, 2>{s.fma_gflops, s.pairs_gflops};
      });
  c.pairs = m.faster == 1;
  c.fma_gflops = m.gflops[0];
  c.pairs_gflops = m.gflops[1];
  c.how = m.how;
  return c;
}

}  // namespace

std::string bf16_products_key() {
  const dnnl_version_t* v = dnnl_version();
  std::string key =
      fmt::format("{} | {} | gemm {} | oneDNN {}.{}.{}", cpu_model(), simd::current().name(),
                  gemm_kernel_name(), v->major, v->minor, v->patch);
  for (char& ch : key)
    if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
  return key;
}

Bf16ProductsSpeed measure_bf16_products(int M, int K, int N, int rounds) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> x(int64_t{M} * K), w(int64_t{N} * K), y(int64_t{M} * N);
  for (auto& v : x) v = f32_to_bf16(uniform(rng));
  for (auto& v : w) v = f32_to_bf16(uniform(rng));
  // The weights as the CPU backend keeps them: blocked where it would block them.
  const bool blocked = blockable(Shape(DType::bf16, {{"n", N}, {"k", K}}));
  std::vector<uint16_t> kept = w;
  if (blocked) {
    ThreadPool one(1);
    copy_weights(WeightLayout::bf16_blocks, reinterpret_cast<const std::byte*>(w.data()),
                 reinterpret_cast<std::byte*>(kept.data()), N, K, true, one);
  }
  const GemmWeights weights =
      blocked ? GemmWeights{kept.data(), 0, 0, K} : GemmWeights{kept.data(), 1, K};
  std::vector<float> packed(gemm_lhs_floats(M, K));
  const int64_t panels = (M + kGemmPanelRows - 1) / kGemmPanelRows;
  auto fma = [&] {
    gemm_pack_lhs(x.data(), K, 1, M, K, 0, panels, packed.data());
    gemm_columns(packed.data(), M, K, weights, 0, N, {y.data(), N, true});
  };

  std::optional<dnnl::matmul> matmul;
  dnnl::memory::desc src, wei, dst, scratch;
  if (onednn::multiplies_bf16()) {
    using dt = dnnl::memory::data_type;
    src = dnnl::memory::desc({M, K}, dt::bf16, dnnl::memory::format_tag::ab);
    wei = blocked ? dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::format_tag::BA16a64b2a)
                  : dnnl::memory::desc({K, N}, dt::bf16, {1, K});
    dst = dnnl::memory::desc({M, N}, dt::bf16, dnnl::memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), onednn::single_thread(),
                                    onednn::engine());
    matmul.emplace(pd);
    scratch = pd.scratchpad_desc();
  }
  auto onednn = [&] {
    dnnl::engine& engine = onednn::engine();
    onednn::execute(*matmul, scratch,
                    {{DNNL_ARG_SRC, dnnl::memory(src, engine, x.data())},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(wei, engine, kept.data())},
                     {DNNL_ARG_DST, dnnl::memory(dst, engine, y.data())}});
  };

  const double flop = 2.0 * M * K * N;
  Bf16ProductsSpeed s;
  fma();  // first touches of the buffers
  if (matmul) onednn();
  for (int r = 0; r < rounds; ++r) {
    s.fma_gflops = std::max(s.fma_gflops, flop / seconds(fma) / 1e9);
    if (matmul) s.onednn_gflops = std::max(s.onednn_gflops, flop / seconds(onednn) / 1e9);
  }
  return s;
}

Bf16TilesSpeed measure_bf16_tiles(int M, int K, int N, int rounds) {
  Bf16TilesSpeed s;
  if (!amx_gemm_available() || !onednn::multiplies_bf16()) return s;
  PRISM_CHECK(K % 32 == 0 && N % kWeightBlockRows == 0,
              "cpu: tile products of {} x {} weights cannot be blocked", N, K);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> x(int64_t{M} * K), w(int64_t{N} * K), kept(w.size()), y(int64_t{M} * N);
  for (auto& v : x) v = f32_to_bf16(uniform(rng));
  for (auto& v : w) v = f32_to_bf16(uniform(rng));
  ThreadPool one(1);
  copy_weights(WeightLayout::bf16_blocks, reinterpret_cast<const std::byte*>(w.data()),
               reinterpret_cast<std::byte*>(kept.data()), N, K, true, one);
  // The packed activations must be 64-byte aligned (amx_gemm.h).
  AlignedBuffer<uint16_t> packed(amx_gemm_packed_values(M, K));
  const int64_t rows = (M + kAmxGemmRows - 1) / kAmxGemmRows * kAmxGemmRows;
  auto tiles = [&] {
    pack_rows_for_amx_gemm(x.data(), K, M, K, 0, rows, packed.data());
    amx_gemm_blocked(packed.data(), M, K, kept.data(), N / kWeightBlockRows, y.data(), N);
  };
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc src({M, K}, dt::bf16, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc wei({K, N}, dt::bf16, dnnl::memory::format_tag::BA16a64b2a);
  const dnnl::memory::desc dst({M, N}, dt::bf16, dnnl::memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), onednn::single_thread(),
                                  onednn::engine());
  dnnl::matmul matmul(pd);
  const dnnl::memory::desc scratch = pd.scratchpad_desc();
  auto onednn = [&] {
    dnnl::engine& engine = onednn::engine();
    onednn::execute(matmul, scratch,
                    {{DNNL_ARG_SRC, dnnl::memory(src, engine, x.data())},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(wei, engine, kept.data())},
                     {DNNL_ARG_DST, dnnl::memory(dst, engine, y.data())}});
  };
  const std::array<double, 2> best = best_gflops(2.0 * M * K * N, rounds, tiles, onednn);
  s.tiles_gflops = best[0];
  s.onednn_gflops = best[1];
  return s;
}

Bf16RowsSpeed measure_bf16_rows(int M, int K, int N, int rounds) {
  const DotRowKernels dots = dot_row_kernels();
  Bf16RowsSpeed s;
  if (!dots.bf16_rows_blocked || !dots.f32_rows_blocked) return s;
  PRISM_CHECK(K % 2 == 0 && N % kWeightBlockRows == 0,
              "cpu: few-row products of {} x {} weights cannot be blocked", N, K);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> x(int64_t{M} * K), w(int64_t{N} * K), kept(w.size());
  std::vector<float> x32(x.size()), y(int64_t{M} * N);
  for (size_t i = 0; i < x.size(); ++i) x32[i] = bf16_to_f32(x[i] = f32_to_bf16(uniform(rng)));
  for (auto& v : w) v = f32_to_bf16(uniform(rng));
  ThreadPool one(1);
  copy_weights(WeightLayout::bf16_blocks, reinterpret_cast<const std::byte*>(w.data()),
               reinterpret_cast<std::byte*>(kept.data()), N, K, true, one);
  const int64_t blocks = N / kWeightBlockRows;
  auto fma = [&] { dots.f32_rows_blocked(x32.data(), K, M, kept.data(), K, blocks, y.data(), N); };
  auto pairs = [&] { dots.bf16_rows_blocked(x.data(), K, M, kept.data(), K, blocks, y.data(), N); };
  const std::array<double, 2> best = best_gflops(2.0 * M * K * N, rounds, fma, pairs);
  s.fma_gflops = best[0];
  s.pairs_gflops = best[1];
  return s;
}

const Bf16ProductsChoice& bf16_products() {
  static const Bf16ProductsChoice choice = choose();
  return choice;
}

const Bf16TilesChoice& bf16_tile_products() {
  static const Bf16TilesChoice choice = choose_tiles();
  return choice;
}

const Bf16RowsChoice& bf16_rows_products() {
  static const Bf16RowsChoice choice = choose_rows();
  return choice;
}

}  // namespace prism::cpu
