#include "prism/backends/cpu/amx_rows.h"

#include <algorithm>
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

int64_t amx_int8_padded(int64_t m) {
  int64_t padded = 1;
  while (padded < m) padded *= 2;
  return padded;
}

#if PRISM_HAVE_AMX
namespace {

#define PRISM_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))

// Whether the operating system saves every state in `mask` of XCR0 (XSAVE state components):
// the CPU says it is enabled (OSXSAVE) and XCR0 has the bits.
bool os_saves(uint64_t mask) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t{hi} << 32) | lo;
  return (xcr0 & mask) == mask;
}

constexpr uint64_t kTileState = (uint64_t{1} << 17) | (uint64_t{1} << 18);  // cfg and data
constexpr uint64_t kAvx512State = 0xe6;  // SSE, AVX, the opmasks and the upper zmm halves

bool cpu_and_os_have_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  return tile && bf16 && os_saves(kTileState);
}

bool cpu_and_os_have_amx_int8() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), int8 = d & (1u << 25);  // AMX-TILE, AMX-INT8
  // AVX-512 F, DQ, BW and VL, and F16C: the kernels' scaling of the tiles' sums
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  if (!tile || !int8 || !avx512) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29))) return false;  // F16C
  return os_saves(kTileState | kAvx512State);
}

// Linux hands out the tile data state only to processes that ask (arch_prctl, since 5.16).
bool linux_permits_amx() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

// PRISM_CPU_AMX=0: none of AMX's kernels, as on a CPU without it (for tests and benchmarks of
// the other paths on a CPU with it).
static bool amx_wanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("PRISM_CPU_AMX");
    const std::string_view want = env ? env : "";
    PRISM_CHECK(want.empty() || want == "0" || want == "1", "PRISM_CPU_AMX={}: expected 0 or 1",
                want);
    return want != "0";
  }();
  return wanted;
}

bool amx_available() {
  static const bool available = amx_wanted() && cpu_and_os_have_amx_bf16() && linux_permits_amx();
  return available;
}

bool amx_int8_available() {
  static const bool available = amx_wanted() && cpu_and_os_have_amx_int8() && linux_permits_amx();
  return available;
}

// Tiles: 0-3 the sums of 64 weight rows (16 each) for every row of x, 4 a slice of x's rows
// (32 values of k), 5-7 the weights (16 pairs of k for 16 weight rows), taken in turn. A step
// of 32 values of k reads 4 KiB of a block, one stream; its 64 cache lines are prefetched into
// L1 kAheadBytes past the step's start. On a 2-core Intel Xeon with AMX (Llama-1B shapes,
// prism-bench decode-batch, seven alternating runs) a step of 4 conversations took 100-105 ms
// (median 102) with the prefetches against 109-114 (112.5) without, of 16 conversations 128-143
// (132) against 137-142 (138); in the first trials 1 or 2 KiB ahead did better than 512 bytes or 3
// KiB, and 4-16 KiB into L2 little.
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
  constexpr int64_t kAheadBytes = 1024;
  constexpr int64_t kStepLines = kAmxDepth / 2 * kPairStride / 64;  // a step's 4 KiB
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t* block = w + b * 64 * k;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < k; i += kAmxDepth) {
      const uint16_t* p = block + i * 64;  // pair i / 2
      const char* ahead = reinterpret_cast<const char*>(p) + kAheadBytes;
      for (int64_t line = 0; line < kStepLines; ++line)
        _mm_prefetch(ahead + line * 64, _MM_HINT_T0);
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

#define PRISM_TARGET_AMX_INT8 \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512dq,avx512bw,avx512vl,f16c,fma")))

// GCC 12 warns about the self-initialized "undefined" source operands of its own AVX-512
// intrinsics (_mm512_cvtepi32_ps and others) once they are inlined into these kernels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

// The results of a group of 16 (or `rows`) weight rows, in acc (lane p of acc[r]: weight row
// (16 r + p) / kPadded, activation row (16 r + p) % kPadded), into out (the group's first
// column).
template <int kPadded>
PRISM_TARGET_AMX_INT8 void store_group(int64_t m, int rows, const __m512* acc, float* out,
                                       int64_t ldo) {
  alignas(64) float flat[16 * kPadded];
  for (int r = 0; r < kPadded; ++r) _mm512_store_ps(flat + 16 * r, acc[r]);
  for (int64_t i = 0; i < m; ++i)
    for (int j = 0; j < rows; ++j) out[i * ldo + j] = flat[j * kPadded + i];
}

// The tiles: 0 and 1 a block of 16 weight rows (16 x 32 values), 2 and 3 the activations'
// block ([8][padded][4]), 4 and 5 the integer sums (16 x padded): two blocks in flight.
//
// A unit is one block of one group of 16 weight rows; the kernel runs the units group by
// group, block by block. Tile A reads Q8_0's values where the file's layout has them (row_bytes
// apart). Q4_0's nibbles are unpacked to value - 8 by vector instructions into a ring of kRing
// slots, kAhead units before the tiles load them: a tile load waits about 25 ns a block for
// bytes vector stores have just written (until the stores reach the cache).
template <int kPadded, bool kQ4>
struct AmxQ8Kernel {
  static constexpr int64_t kBlockBytes = kQ4 ? 18 : 34;
  static constexpr int kBytesARow = 4 * kPadded;   // a row of the sums, and of the activations
  static constexpr int64_t kRing = 8, kAhead = 6;  // kAhead + 2 <= kRing: two units a step

  const AmxQ8Rows& x;
  const uint8_t* w;
  int64_t row_bytes, blocks, n;
  __m512i row_offsets;  // lane j: j * row_bytes, where the gather of the d finds weight row j
  alignas(64) int8_t ring[kRing][16 * 32];
  alignas(64) int32_t sums[2][16 * kPadded];
  alignas(64) float dw[16];

  PRISM_TARGET_AMX_INT8 static void configure(int rows) {
    AmxTileConfig config;
    for (int t = 0; t < 2; ++t) config.set(t, rows, 32);
    for (int t = 2; t < 4; ++t) config.set(t, 8, kBytesARow);
    for (int t = 4; t < 6; ++t) config.set(t, rows, kBytesARow);
    _tile_loadconfig(&config);
  }

  int rows_of(int64_t group) const {
    return static_cast<int>(std::min<int64_t>(16, n - 16 * group));
  }

  // Q4_0: block b of `group`'s 16 (or fewer) weight rows' values, minus 8, into ring slot
  // `slot`, a row's 32 values 32 bytes apart (a row's 16 bytes hold values 0-15 in their low
  // nibbles, 16-31 in their high ones).
  PRISM_TARGET_AMX_INT8 void stage(int64_t group, int64_t b, int64_t slot) {
    const int rows = rows_of(group);
    const uint8_t* p = w + 16 * group * row_bytes + b * kBlockBytes + 2;
    int8_t* to = ring[slot];
    const __m512i low = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int r = 0; r < 16; r += 4) {
      __m512i v = _mm512_setzero_si512();
      for (int q = 0; q < 4 && r + q < rows; ++q) {
        const __m128i nibbles =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (r + q) * row_bytes));
        v = _mm512_mask_broadcast_i32x4(v, static_cast<__mmask16>(0xf << (4 * q)), nibbles);
      }
      const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, low), eight);
      const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), eight);
      _mm512_store_si512(to + 32 * r, _mm512_permutex2var_epi64(lo, first, hi));
      _mm512_store_si512(to + 32 * r + 64, _mm512_permutex2var_epi64(lo, second, hi));
    }
  }

  // Where tile A reads block b of `group` (staged in ring slot `slot` for Q4_0), and the bytes
  // between its rows.
  const void* weights(int64_t group, int64_t b, int64_t slot) const {
    if constexpr (kQ4) return ring[slot];
    return w + 16 * group * row_bytes + b * kBlockBytes + 2;
  }
  int64_t weight_stride() const { return kQ4 ? 32 : row_bytes; }

  // Block b of `group`'s 16 (or fewer) weight rows' d, as f32.
  PRISM_TARGET_AMX_INT8 __m512 scales(int64_t group, int64_t b) const {
    const uint8_t* g = w + 16 * group * row_bytes;
    const auto rows = static_cast<__mmask16>((1u << rows_of(group)) - 1);
    const __m256i d16 = _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(
        _mm512_setzero_si512(), rows, row_offsets, g + b * kBlockBytes, 1));
    return _mm512_cvtph_ps(d16);
  }

// The integer sums of block b, staged in ring slot `slot`, into sums[C - 4], on tiles A, B and
// C (GCC's tile intrinsics take the tiles' numbers as literals).
#define PRISM_AMX_Q8_MULTIPLY(A, B, C, group, slot, b)        \
  do {                                                        \
    _tile_loadd(A, weights(group, b, slot), weight_stride()); \
    _tile_loadd(B, x.tiles + (b)*32 * kPadded, kBytesARow);   \
    _tile_zero(C);                                            \
    _tile_dpbssd(C, A, B);                                    \
    _tile_stored(C, sums[(C)-4], kBytesARow);                 \
  } while (false)

  // acc += the sums of block b of `group` (in sums[s]) times d_w * d_x.
  PRISM_TARGET_AMX_INT8 void scale(int64_t group, int64_t b, int s, __m512* acc) {
    const __m512 d = scales(group, b);
    const __m512 dx = _mm512_load_ps(x.scales + 16 * b);
    if constexpr (kPadded == 16) _mm512_store_ps(dw, d);
    for (int r = 0; r < kPadded; ++r) {
      __m512 dr;  // lane p: d of weight row (16 r + p) / kPadded
      if constexpr (kPadded == 16) {
        dr = _mm512_set1_ps(dw[r]);
      } else {
        const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(16 * r / kPadded),
                                               _mm512_srli_epi32(lane, __builtin_ctz(kPadded)));
        dr = _mm512_permutexvar_ps(index, d);
      }
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(sums[s] + 16 * r));
      acc[r] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dr, dx), acc[r]);
    }
  }

  PRISM_TARGET_AMX_INT8 void run(float* out, int64_t ldo) {
    const int64_t groups = (n + 15) / 16;
    // The unit staged next: block sb of group sg, into slot ss.
    int64_t sg = 0, sb = 0, ss = 0;
    auto stage_next = [&]() PRISM_TARGET_AMX_INT8 {
      if (!kQ4 || sg == groups) return;
      stage(sg, sb, ss);
      ss = ss + 1 == kRing ? 0 : ss + 1;
      if (++sb == blocks) sb = 0, ++sg;
    };
    for (int64_t u = 0; u < kAhead; ++u) stage_next();
    __m512 acc[kPadded];
    int64_t slot = 0;
    for (int64_t group = 0; group < groups; ++group) {
      const int rows = rows_of(group);
      if (group == 0 || rows != 16) configure(rows);
      for (int r = 0; r < kPadded; ++r) acc[r] = _mm512_setzero_ps();
      int64_t b = 0;
      // The next group's bytes, read into L2 meanwhile: the hardware's prefetchers lose the
      // sixteen streams of a group's rows.
      const uint8_t* ahead = w + 16 * (group + 1) * row_bytes;
      for (; b + 2 <= blocks; b += 2) {
        for (int64_t o = 0; o < 32 * kBlockBytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(ahead + 16 * kBlockBytes * b + o),
                       _MM_HINT_T1);
        stage_next();
        stage_next();
        const int64_t next = slot + 1 == kRing ? 0 : slot + 1;
        PRISM_AMX_Q8_MULTIPLY(0, 2, 4, group, slot, b);
        PRISM_AMX_Q8_MULTIPLY(1, 3, 5, group, next, b + 1);
        scale(group, b, 0, acc);
        scale(group, b + 1, 1, acc);
        slot = next + 1 == kRing ? 0 : next + 1;
      }
      if (b < blocks) {
        stage_next();
        PRISM_AMX_Q8_MULTIPLY(0, 2, 4, group, slot, b);
        scale(group, b, 0, acc);
        slot = slot + 1 == kRing ? 0 : slot + 1;
      }
      store_group<kPadded>(x.m, rows, acc, out + 16 * group, ldo);
    }
  }
};

#undef PRISM_AMX_Q8_MULTIPLY

#define PRISM_TARGET_AMX_K                                                           \
  __attribute__((                                                                    \
      target("amx-tile,amx-int8,avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,f16c," \
             "fma")))

// Q4_K (amx_k_rows). The tiles: 0 and 1 a sub-block of 16 weight rows (16 x 32 values), 2 and
// 3 the activations' sub-block ([8][padded][4]), 4 and 5 its integer sums (16 x padded), two
// sub-blocks in flight. A unit is one 256-value block of one group of 16 weight rows; its
// nibbles are unpacked into one of two ring slots while the tiles read the other.
template <int kPadded>
struct AmxQ4KKernel {
  static constexpr int64_t kBlockBytes = 144;
  static constexpr int kBytesARow = 4 * kPadded;

  const AmxQ8Rows& x;
  const uint8_t* w;
  int64_t row_bytes, blocks, n;
  __m512i row_offsets;  // lane j: j * row_bytes, where the gathers find weight row j
  // A slot: the low nibbles of the block's first 64 bytes (sub-blocks 0 and 2, a row's 64
  // bytes apart), their high nibbles (1, 3), then the same of the next 64 bytes (4, 6; 5, 7).
  alignas(64) int8_t ring[2][4][16 * 64];
  alignas(64) int32_t sums[2][8][16 * kPadded];  // two units' integer sums, one per sub-block

  PRISM_TARGET_AMX_K static void configure(int rows) {
    AmxTileConfig config;
    for (int t = 0; t < 2; ++t) config.set(t, rows, 32);
    for (int t = 2; t < 4; ++t) config.set(t, 8, kBytesARow);
    for (int t = 4; t < 8; ++t) config.set(t, rows, kBytesARow);
    _tile_loadconfig(&config);
  }

  int rows_of(int64_t group) const {
    return static_cast<int>(std::min<int64_t>(16, n - 16 * group));
  }

  // Block s of `group`'s weight rows, their nibbles as bytes, into ring slot `slot`.
  PRISM_TARGET_AMX_K void stage(int64_t group, int64_t s, int slot) {
    const int rows = rows_of(group);
    const uint8_t* p = w + 16 * group * row_bytes + s * kBlockBytes + 16;
    const __m512i low = _mm512_set1_epi8(15);
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < 2; ++h) {
        const __m512i v = _mm512_loadu_si512(p + r * row_bytes + 64 * h);
        _mm512_store_si512(ring[slot][2 * h] + 64 * r, _mm512_and_si512(v, low));
        _mm512_store_si512(ring[slot][2 * h + 1] + 64 * r,
                           _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
      }
    }
  }

  const int8_t* sub_block(int slot, int j) const {
    return ring[slot][j / 4 * 2 + j % 2] + 32 * (j / 2 % 2);
  }

// Sub-block j of block s (staged in ring slot `slot`) into sums[slot][j], on tiles A, B, C.
#define PRISM_AMX_K_MULTIPLY(A, B, C, slot, s, j)                         \
  do {                                                                    \
    _tile_loadd(A, sub_block(slot, j), 64);                               \
    _tile_loadd(B, x.tiles + (8 * (s) + (j)) * 32 * kPadded, kBytesARow); \
    _tile_zero(C);                                                        \
    _tile_dpbssd(C, A, B);                                                \
    _tile_stored(C, sums[slot][j], kBytesARow);                           \
  } while (false)

  // The integer sums of block s's sub-blocks (staged in slot `slot`) into sums[slot].
  PRISM_TARGET_AMX_K void multiply(int64_t s, int slot) {
    PRISM_AMX_K_MULTIPLY(0, 2, 4, slot, s, 0);
    PRISM_AMX_K_MULTIPLY(1, 3, 5, slot, s, 1);
    PRISM_AMX_K_MULTIPLY(0, 2, 6, slot, s, 2);
    PRISM_AMX_K_MULTIPLY(1, 3, 7, slot, s, 3);
    PRISM_AMX_K_MULTIPLY(0, 2, 4, slot, s, 4);
    PRISM_AMX_K_MULTIPLY(1, 3, 5, slot, s, 5);
    PRISM_AMX_K_MULTIPLY(0, 2, 6, slot, s, 6);
    PRISM_AMX_K_MULTIPLY(1, 3, 7, slot, s, 7);
  }

  // acc += block s of `group`, its integer sums in sums[slot], by the arithmetic in
  // amx_rows.h.
  PRISM_TARGET_AMX_K void scale(int64_t group, int64_t s, int slot, __m512* acc) {
    // The 16 rows' block heads, lane j: weight row j's d and dmin, then the 12 bytes of 6-bit
    // scales and minimums q[0..11] (ggml's get_scale_min_k4: for j < 4, scale q[j] & 63 and
    // minimum q[j + 4] & 63; for j = 4 + t, scale (q[8 + t] & 15) | (q[t] >> 6) << 4 and
    // minimum (q[8 + t] >> 4) | (q[4 + t] >> 6) << 4).
    const uint8_t* base = w + 16 * group * row_bytes + s * kBlockBytes;
    const auto rows = static_cast<__mmask16>((1u << rows_of(group)) - 1);
    const __m512i zero = _mm512_setzero_si512();
    __m512i head[4];
    for (int c = 0; c < 4; ++c)
      head[c] = _mm512_mask_i32gather_epi32(zero, rows, row_offsets, base + 4 * c, 1);
    const __m512i six = _mm512_set1_epi32(63), four = _mm512_set1_epi32(15),
                  top = _mm512_set1_epi32(0x30);
    __m512i scale[8], mins[8];
    for (int t = 0; t < 4; ++t) {
      scale[t] = _mm512_and_si512(_mm512_srli_epi32(head[1], 8 * t), six);
      mins[t] = _mm512_and_si512(_mm512_srli_epi32(head[2], 8 * t), six);
      scale[4 + t] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 8 * t), four),
                                     _mm512_and_si512(_mm512_srli_epi32(head[1], 8 * t + 2), top));
      mins[4 + t] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 8 * t + 4), four),
                                    _mm512_and_si512(_mm512_srli_epi32(head[2], 8 * t + 2), top));
    }
    __m512i pairs[4];  // lane j: row j's minimums 2i (low word) and 2i + 1 (high word)
    for (int i = 0; i < 4; ++i)
      pairs[i] = _mm512_or_si512(mins[2 * i], _mm512_slli_epi32(mins[2 * i + 1], 16));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0]));
    const __m512 dmin = _mm512_xor_ps(  // -dmin
        _mm512_set1_ps(-0.0f),
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head[0], 16))));
    const __m512 dx = _mm512_load_ps(x.scales + 16 * s);
    const int32_t* xs = x.sums + 64 * s;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int r = 0; r < kPadded; ++r) {
      // lane p of the pairs' vector r: weight row (16 r + p) / kPadded
      const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(16 * r / kPadded),
                                             _mm512_srli_epi32(lane, __builtin_ctz(kPadded)));
      __m512i total = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j)
        total =
            _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_permutexvar_epi32(index, scale[j]),
                                                       _mm512_load_si512(sums[slot][j] + 16 * r)));
      __m512i m = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i)
        m = _mm512_dpwssd_epi32(m, _mm512_permutexvar_epi32(index, pairs[i]),
                                _mm512_load_si512(xs + 16 * i));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total),
                               _mm512_mul_ps(_mm512_permutexvar_ps(index, d), dx), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m),
                               _mm512_mul_ps(_mm512_permutexvar_ps(index, dmin), dx), acc[r]);
    }
  }

  // The units (block s of a group), group by group, in a pipeline: while the vector
  // instructions scale unit u's sums, the tiles multiply unit u + 1, and unit u + 2's nibbles
  // are unpacked. A tile load waits for bytes vector stores have just written, and vector
  // loads wait for a tile store, each for tens of nanoseconds: the pipeline keeps each unit's
  // work a unit away from what it waits for.
  PRISM_TARGET_AMX_K void run(float* out, int64_t ldo) {
    const int64_t groups = (n + 15) / 16, units = groups * blocks;
    auto group_of = [&](int64_t u) { return u / blocks; };
    auto block_of = [&](int64_t u) { return u % blocks; };
    configure(rows_of(0));
    stage(0, 0, 0);
    multiply(0, 0);
    if (units > 1) stage(group_of(1), block_of(1), 1);
    __m512 acc[kPadded];
    for (int r = 0; r < kPadded; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const int64_t group = group_of(u), s = block_of(u);
      const int slot = static_cast<int>(u % 2);
      if (u + 1 < units) {
        const int64_t next = group_of(u + 1);
        if (next != group && rows_of(next) != rows_of(group)) configure(rows_of(next));
        multiply(block_of(u + 1), 1 - slot);
      }
      if (u + 2 < units) stage(group_of(u + 2), block_of(u + 2), slot);
      // The next group's bytes, read into L2 meanwhile.
      const uint8_t* ahead = w + 16 * (group + 1) * row_bytes;
      for (int64_t o = 0; o < 16 * kBlockBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 16 * kBlockBytes * s + o), _MM_HINT_T1);
      scale(group, s, slot, acc);
      if (s + 1 == blocks) {
        store_group<kPadded>(x.m, rows_of(group), acc, out + 16 * group, ldo);
        for (int r = 0; r < kPadded; ++r) acc[r] = _mm512_setzero_ps();
      }
    }
  }
};

#undef PRISM_AMX_K_MULTIPLY

template <int kPadded>
PRISM_TARGET_AMX_K void amx_k_run(const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes,
                                  int64_t n, int64_t blocks, float* out, int64_t ldo) {
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  AmxQ4KKernel<kPadded>{x, w, row_bytes, blocks, n, row_offsets, {}, {}}.run(out, ldo);
  _tile_release();
}

template <int kPadded, bool kQ4>
PRISM_TARGET_AMX_INT8 void amx_q8_run(const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes,
                                      int64_t n, int64_t blocks, float* out, int64_t ldo) {
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  AmxQ8Kernel<kPadded, kQ4>{x, w, row_bytes, blocks, n, row_offsets, {}, {}, {}}.run(out, ldo);
  _tile_release();
}

template <int kPadded>
void amx_q8_rows_padded(bool q4, const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n,
                        int64_t blocks, float* out, int64_t ldo) {
  (q4 ? amx_q8_run<kPadded, true> : amx_q8_run<kPadded, false>)(x, w, row_bytes, n, blocks, out,
                                                                ldo);
}

}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void amx_q8_rows(bool q4, const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n,
                 int64_t k, float* out, int64_t ldo) {
  PRISM_CHECK(x.m >= 1 && x.m <= 16 && x.padded == amx_int8_padded(x.m) && k % 32 == 0 &&
                  row_bytes >= k / 32 * (q4 ? 18 : 34) && row_bytes < (int64_t{1} << 27),
              "amx_q8_rows: bad sizes m={} padded={} n={} k={} row_bytes={}", x.m, x.padded, n, k,
              row_bytes);
  const int64_t blocks = k / 32;
  switch (x.padded) {
    case 1:
      return amx_q8_rows_padded<1>(q4, x, w, row_bytes, n, blocks, out, ldo);
    case 2:
      return amx_q8_rows_padded<2>(q4, x, w, row_bytes, n, blocks, out, ldo);
    case 4:
      return amx_q8_rows_padded<4>(q4, x, w, row_bytes, n, blocks, out, ldo);
    case 8:
      return amx_q8_rows_padded<8>(q4, x, w, row_bytes, n, blocks, out, ldo);
    default:
      return amx_q8_rows_padded<16>(q4, x, w, row_bytes, n, blocks, out, ldo);
  }
}

void amx_k_rows(const AmxQ8Rows& x, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k,
                float* out, int64_t ldo) {
  PRISM_CHECK(x.m >= 1 && x.m <= 16 && x.padded == amx_int8_padded(x.m) && x.sums && k % 256 == 0 &&
                  row_bytes >= k / 256 * 144 && row_bytes < (int64_t{1} << 27),
              "amx_k_rows: bad sizes m={} padded={} n={} k={} row_bytes={}", x.m, x.padded, n, k,
              row_bytes);
  const int64_t blocks = k / 256;
  switch (x.padded) {
    case 1:
      return amx_k_run<1>(x, w, row_bytes, n, blocks, out, ldo);
    case 2:
      return amx_k_run<2>(x, w, row_bytes, n, blocks, out, ldo);
    case 4:
      return amx_k_run<4>(x, w, row_bytes, n, blocks, out, ldo);
    case 8:
      return amx_k_run<8>(x, w, row_bytes, n, blocks, out, ldo);
    default:
      return amx_k_run<16>(x, w, row_bytes, n, blocks, out, ldo);
  }
}

#else  // no AMX here: amx_available() is false and the kernels are never called

bool amx_available() { return false; }
void amx_rows_blocked(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*,
                      int64_t) {}
void pack_rows_for_amx(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {}
void amx_rows_plain(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*,
                    int64_t) {}
bool amx_int8_available() { return false; }
void amx_q8_rows(bool, const AmxQ8Rows&, const uint8_t*, int64_t, int64_t, int64_t, float*,
                 int64_t) {}
void amx_k_rows(const AmxQ8Rows&, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t) {}

#endif

}  // namespace prism::cpu
