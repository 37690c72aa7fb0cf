#include "prism/backends/cpu/amx_rows.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "prism/core/error.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define PRISM_HAVE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace prism::cpu {

#if PRISM_HAVE_AMX
namespace {

#define PRISM_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))

bool cpu_and_os_have_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  if (!tile || !bf16) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t{hi} << 32) | lo;
  constexpr uint64_t kTileState = (uint64_t{1} << 17) | (uint64_t{1} << 18);  // cfg and data
  return (xcr0 & kTileState) == kTileState;
}

// Linux hands out the tile data state only to processes that ask (arch_prctl, since 5.16).
bool linux_permits_amx() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool amx_available() {
  static const bool available = cpu_and_os_have_amx_bf16() && linux_permits_amx();
  return available;
}

// Tiles: 0-3 the sums of 64 weight rows (16 each) for every row of x, 4 a slice of x's rows
// (32 values of k), 5-7 the weights (16 pairs of k for 16 weight rows), taken in turn.
PRISM_TARGET_AMX void amx_rows_blocked(const uint16_t* x, int64_t ldx, int64_t rows,
                                       const uint16_t* w, int64_t k, int64_t blocks, float* out,
                                       int64_t ldo) {
  AmxTileConfig config;
  for (int t = 0; t < 5; ++t) config.set(t, rows, 64);
  for (int t = 5; t < 8; ++t) config.set(t, 16, 64);
  _tile_loadconfig(&config);
  // Within a block a pair of k holds 64 rows x 2 values (256 bytes); the 16 rows of tile c
  // start 16 c rows into it.
  constexpr int64_t kPairStride = 64 * 2 * sizeof(uint16_t);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t* block = w + b * 64 * k;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < k; i += kAmxDepth) {
      const uint16_t* p = block + i * 64;  // pair i / 2
      _tile_loadd(4, x + i, ldx * sizeof(uint16_t));
      _tile_loadd(5, p, kPairStride);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, p + 32, kPairStride);
      _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(7, p + 64, kPairStride);
      _tile_dpbf16ps(2, 4, 7);
      _tile_loadd(5, p + 96, kPairStride);
      _tile_dpbf16ps(3, 4, 5);
    }
    float* o = out + b * 64;
    const int64_t stride = ldo * sizeof(float);
    _tile_stored(0, o, stride);
    _tile_stored(1, o + 16, stride);
    _tile_stored(2, o + 32, stride);
    _tile_stored(3, o + 48, stride);
  }
  _tile_release();
}

void pack_rows_for_amx(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint16_t* xp) {
  for (int64_t i = 0; i < k; i += 2)
    for (int64_t m = 0; m < rows; ++m) std::memcpy(xp + (i * rows + 2 * m), x + m * ldx + i, 4);
}

// Tiles: 0-3 the sums of 64 weight rows (16 each, one per tile row) for every row of x,
// 4 the packed x (16 pairs of k), 5-7 16 weight rows' 32 values of k, taken in turn.
PRISM_TARGET_AMX void amx_rows_plain(const uint16_t* xp, int64_t rows, const uint16_t* w,
                                     int64_t ldw, int64_t k, int64_t n, float* out, int64_t ldo) {
  AmxTileConfig config;
  const int64_t x_bytes = rows * 2 * sizeof(uint16_t);  // a pair of k for every row of x
  for (int t = 0; t < 4; ++t) config.set(t, 16, rows * sizeof(float));
  config.set(4, 16, x_bytes);
  for (int t = 5; t < 8; ++t) config.set(t, 16, 64);
  _tile_loadconfig(&config);
  const int64_t w_stride = ldw * sizeof(uint16_t);
  alignas(64) float sums[4][16][kAmxMaxRows];
  constexpr int64_t kSumsStride = kAmxMaxRows * sizeof(float);
  // The sums come out one weight row a tile row; out wants them one x row a row.
  auto store = [&](int64_t j0, int tiles) {
    for (int t = 0; t < tiles; ++t)
      for (int64_t m = 0; m < rows; ++m)
        for (int r = 0; r < 16; ++r) out[m * ldo + j0 + 16 * t + r] = sums[t][r][m];
  };
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    const uint16_t* rows0 = w + j * ldw;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < k; i += kAmxDepth) {
      _tile_loadd(4, xp + i * rows, x_bytes);
      _tile_loadd(5, rows0 + i, w_stride);
      _tile_dpbf16ps(0, 5, 4);
      _tile_loadd(6, rows0 + 16 * ldw + i, w_stride);
      _tile_dpbf16ps(1, 6, 4);
      _tile_loadd(7, rows0 + 32 * ldw + i, w_stride);
      _tile_dpbf16ps(2, 7, 4);
      _tile_loadd(5, rows0 + 48 * ldw + i, w_stride);
      _tile_dpbf16ps(3, 5, 4);
    }
    _tile_stored(0, sums[0], kSumsStride);
    _tile_stored(1, sums[1], kSumsStride);
    _tile_stored(2, sums[2], kSumsStride);
    _tile_stored(3, sums[3], kSumsStride);
    store(j, 4);
  }
  for (; j < n; j += 16) {  // the last rows, 16 at a time
    _tile_zero(0);
    for (int64_t i = 0; i < k; i += kAmxDepth) {
      _tile_loadd(4, xp + i * rows, x_bytes);
      _tile_loadd(5, w + j * ldw + i, w_stride);
      _tile_dpbf16ps(0, 5, 4);
    }
    _tile_stored(0, sums[0], kSumsStride);
    store(j, 1);
  }
  _tile_release();
}

#else  // no AMX here: amx_available() is false and the kernels are never called

bool amx_available() { return false; }
void amx_rows_blocked(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*,
                      int64_t) {}
void pack_rows_for_amx(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {}
void amx_rows_plain(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*,
                    int64_t) {}

#endif

}  // namespace prism::cpu
