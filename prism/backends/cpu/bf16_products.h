// Which kernels multiply bf16 matrices that oneDNN's slices would take (a prompt's products,
// kernels_dot.cpp): oneDNN's bf16 products (vdpbf16ps, or AMX tiles where oneDNN has them), or
// gemm.h's f32 FMAs on weights widened in cache. Neither is the faster everywhere: on an AMD
// EPYC (Zen 4) vdpbf16ps does twice the work of an f32 FMA, on some Intel Xeons half; AMX tiles
// do several times more. So the choice is measured: at the first product, one single-threaded
// product of each kind (a few milliseconds), the faster taken and kept per CPU model and
// kernels in the user's cache (`$XDG_CACHE_HOME/prism/cpu-products`, else
// `~/.cache/prism/cpu-products`; a cache that cannot be read or written only costs the
// measurement again). Where oneDNN has no bf16 products (before AVX-512), gemm.h's alone.
//
// PRISM_CPU_PRODUCTS=onednn or fma forces one (for tests and benchmarks; fma forces the
// widened products even where oneDNN has bf16), =measure measures again and rewrites the
// cache line.
#pragma once

#include <string>

namespace prism::cpu {

enum class Bf16Products { onednn, fma };

struct Bf16ProductsChoice {
  Bf16Products path = Bf16Products::fma;
  // For people: "bf16 products in oneDNN (223 GFLOP/s a core against 101 on f32 FMAs,
  // measured)".
  std::string description;
  double onednn_gflops = 0, fma_gflops = 0;  // measured a core, where measured (or cached)
};

// The choice for this process, made on the first call (thread-safe).
const Bf16ProductsChoice& bf16_products();

// The measurement itself: one product of x{M, K} . w{K, N} (bf16, w stored {n, k}, blocked as
// the CPU backend keeps weights where it would) on the calling thread, each kind `rounds`
// times in turn; the best of each in GFLOP/s (0 for oneDNN where it has no bf16 products).
struct Bf16ProductsSpeed {
  double onednn_gflops = 0, fma_gflops = 0;
};
Bf16ProductsSpeed measure_bf16_products(int M, int K, int N, int rounds);

// The cache's key for this CPU and binary: the CPU's model name, the SIMD target, gemm.h's
// micro-kernel and oneDNN's version.
std::string bf16_products_key();

}  // namespace prism::cpu
