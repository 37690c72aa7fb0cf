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
// On a CPU with AMX-BF16, where oneDNN's products run on tiles, a prompt's products with
// weights kept blocked have a third kind: prism's own on AMX tiles (amx_gemm.h). Whether it or
// oneDNN's is taken is measured the same way (bf16_tile_products below).
//
// PRISM_CPU_PRODUCTS=onednn, fma or amx forces one (for tests and benchmarks; fma forces the
// widened products even where oneDNN has bf16; amx needs AMX and takes oneDNN's products for
// the weights amx_gemm.h does not take), =measure measures again and rewrites the cache
// lines.
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

// Whether a prompt's products with bf16 weights kept blocked run on prism's AMX tiles
// (amx_gemm.h) rather than oneDNN's products, where the CPU has AMX-BF16 and bf16_products()
// chose oneDNN: measured as above (the same product, each kind on one thread), kept on a line
// of the cache of its own, the key followed by " | tiles".
struct Bf16TilesChoice {
  bool tiles = false;  // prism's AMX tiles
  double onednn_gflops = 0, tiles_gflops = 0;
  const char* how = "";  // "measured", "measured before" or "PRISM_CPU_PRODUCTS"; "" without AMX
};
// The choice for this process, made on the first call (thread-safe).
const Bf16TilesChoice& bf16_tile_products();

struct Bf16TilesSpeed {
  double onednn_gflops = 0, tiles_gflops = 0;
};
// x{M, K} . w{K, N} (N a multiple of 64, K of 32), w kept blocked, through oneDNN and through
// amx_gemm.h on the calling thread, `rounds` times in turn; the best of each (0 without AMX).
Bf16TilesSpeed measure_bf16_tiles(int M, int K, int N, int rounds);

// Products of 2-16 bf16 rows against blocked weights on a CPU with AVX-512 BF16 and no AMX
// (batched decoding, speculative checks; dot_rows.h's rows_kernel()): f32_rows_blocked (f32
// FMAs on weights widened in registers) or bf16_rows_blocked (vdpbf16ps), measured the same
// way: 8 rows against weights in cache, the kernels' arithmetic, which decides how many rows
// a product takes before it is no longer bound by reading its weights (vdpbf16ps runs at twice
// the FMAs' rate on AMD's Zen 4, at half on some Intel Xeons). Kept on a line of its own, the
// key followed by " | rows"; PRISM_CPU_PRODUCTS=measure measures it again too.
struct Bf16RowsChoice {
  bool pairs = false;  // bf16_rows_blocked; else f32_rows_blocked
  double fma_gflops = 0, pairs_gflops = 0;
  const char* how = "";  // "measured" or "measured before"; "" without the kernels
};
// The choice for this process, made on the first call (thread-safe).
const Bf16RowsChoice& bf16_rows_products();

struct Bf16RowsSpeed {
  double fma_gflops = 0, pairs_gflops = 0;
};
// M rows of x{M, K} . w{K, N} (N a multiple of 64, K even), w kept blocked, through each
// kernel on the calling thread, `rounds` times in turn; the best of each (0 without the
// kernels).
Bf16RowsSpeed measure_bf16_rows(int M, int K, int N, int rounds);

// The cache's key for this CPU and binary: the CPU's model name, the SIMD target, gemm.h's
// micro-kernel and oneDNN's version.
std::string bf16_products_key();

}  // namespace prism::cpu
