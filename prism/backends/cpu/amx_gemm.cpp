#include "prism/backends/cpu/amx_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/simd.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define PRISM_HAVE_AMX_GEMM 1
#include <immintrin.h>
#endif

namespace prism::cpu {

int64_t amx_gemm_packed_values(int64_t m, int64_t k) {
  return (m + kAmxGemmRows - 1) / kAmxGemmRows * kAmxGemmRows * k;
}

void pack_rows_for_amx_gemm(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, int64_t r0,
                            int64_t r1, uint16_t* xp) {
  constexpr int64_t kTileRows = kAmxGemmRows / 2, kDepth = 32;
  // 16 steps of the 32 rows at a time, row by row: each row's 1 KiB read as one stream, the
  // 32 KiB written stays in L1 until it is whole. Packing the 512 x 8192 activations of a
  // down projection from memory took 0.84 ms on one core of an Intel Xeon with AMX, against
  // 1.37 step by step (32 rows read at once) and 3.6 row by row over all the steps.
  constexpr int64_t kSteps = 16;
  const int64_t steps = k / kDepth;
  for (int64_t g = r0; g < r1; g += kAmxGemmRows) {
    uint16_t* group = xp + g * k;
    for (int64_t s0 = 0; s0 < steps; s0 += kSteps) {
      const int64_t s1 = std::min(steps, s0 + kSteps);
      for (int64_t r = 0; r < kAmxGemmRows; ++r) {
        // row r % 16 of tile r / 16 of each step
        uint16_t* dst = group + (r / kTileRows) * kTileRows * kDepth + (r % kTileRows) * kDepth;
        const uint16_t* src = x + (g + r) * ldx;
        for (int64_t s = s0; s < s1; ++s) {
          if (g + r < m) {
            std::memcpy(dst + s * kAmxGemmRows * kDepth, src + s * kDepth, kDepth * 2);
          } else {
            std::memset(dst + s * kAmxGemmRows * kDepth, 0, kDepth * 2);
          }
        }
      }
    }
  }
}

namespace {

// block_rows_for_amx_gemm one value pair at a time.
void block_rows_plain(const uint16_t* rows, int64_t ldr, int64_t c0, int64_t c1, uint16_t* block) {
  constexpr int64_t kBlockRows = 64;
  for (int64_t r = 0; r < kBlockRows; ++r) {
    for (int64_t c = c0; c < c1; c += 2) {
      std::memcpy(block + ((c / 2) * kBlockRows + r) * 2, rows + r * ldr + (c - c0), 4);
    }
  }
}

}  // namespace

#if PRISM_HAVE_AMX_GEMM

#define PRISM_TARGET_AVX512 __attribute__((target("avx512f")))

namespace {

// GCC 12's unpack intrinsics pass an undefined vector as their masked-off source, which its
// -Wmaybe-uninitialized takes for a read of an uninitialized value.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// block_rows_for_amx_gemm in AVX-512. Pairs of values are 32-bit words: 16 rows x 16 pairs at
// a time are transposed in registers (unpacks within 128-bit lanes, then two rounds of lane
// shuffles) into 16 pairs x 16 rows, each one aligned 64-byte store into its pair's 64 rows.
PRISM_TARGET_AVX512 void block_rows_avx512(const uint16_t* rows, int64_t ldr, int64_t c0,
                                           int64_t c1, uint16_t* block) {
  constexpr int64_t kBlockRows = 64;
  auto* out = reinterpret_cast<uint32_t*>(block);
  for (int64_t r0 = 0; r0 < kBlockRows; r0 += 16) {
    for (int64_t c = c0; c < c1; c += 32) {
      __m512i v[16], t[16];
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(rows + (r0 + i) * ldr + (c - c0));
      for (int i = 0; i < 16; i += 2) {  // within lanes: rows i, i+1 paired
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
      }
      for (int i = 0; i < 16; i += 4) {  // within lanes: pair q of rows i..i+3 in u[i + q]
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      uint32_t* dst = out + (c / 2) * kBlockRows + r0;
      for (int q = 0; q < 4; ++q) {  // lane l of v[4g + q]: pair 4l + q of rows 4g..4g+3
        const __m512i w0 = _mm512_shuffle_i32x4(v[q], v[4 + q], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(v[q], v[4 + q], 0xDD);
        const __m512i w2 = _mm512_shuffle_i32x4(v[8 + q], v[12 + q], 0x88);
        const __m512i w3 = _mm512_shuffle_i32x4(v[8 + q], v[12 + q], 0xDD);
        _mm512_store_si512(dst + q * kBlockRows, _mm512_shuffle_i32x4(w0, w2, 0x88));
        _mm512_store_si512(dst + (q + 8) * kBlockRows, _mm512_shuffle_i32x4(w0, w2, 0xDD));
        _mm512_store_si512(dst + (q + 4) * kBlockRows, _mm512_shuffle_i32x4(w1, w3, 0x88));
        _mm512_store_si512(dst + (q + 12) * kBlockRows, _mm512_shuffle_i32x4(w1, w3, 0xDD));
      }
    }
  }
}
#pragma GCC diagnostic pop

}  // namespace

// The check stays outside the AVX-512 code: a function compiled for AVX-512 may use it
// anywhere in its body, the fallback's loop too.
void block_rows_for_amx_gemm(const uint16_t* rows, int64_t ldr, int64_t c0, int64_t c1,
                             uint16_t* block) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    block_rows_avx512(rows, ldr, c0, c1, block);
  } else {
    block_rows_plain(rows, ldr, c0, c1, block);
  }
}

bool amx_gemm_available() {
  static const bool available = amx_available() && simd::current().avx512_bf16;
  return available;
}

namespace {

#define PRISM_TARGET_AMX_GEMM __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16")))

// A block of weights: 64 rows, as k / 2 pairs of 256 bytes; a step (32 values of k) of it 4 KiB.
constexpr int64_t kPairBytes = 64 * 2 * sizeof(uint16_t);
constexpr int64_t kStepBytes = 16 * kPairBytes;
// The packed activations of a step of 32 rows: two tiles of 1 KiB.
constexpr int64_t kRowStepValues = kAmxGemmRows * 32;
// Steps taken at a time for all the rows of a chunk, their weights (2 KiB a step of a half
// block), the rows' activations (2 KiB a step) and the chunk's sums (16 KiB) within L1's 48
// KiB: in alternating runs of 2 threads on a 512-token prefill's gate and up products (2-core
// Intel Xeon with AMX), 4 steps ran at a median 790 GFLOP/s a thread, 3 at 762, 5 at 766, all
// the steps of a part at 737.
constexpr int64_t kL1Steps = 4;

// Tiles 0-3 (the 2 x 2 tiles of sums) from and into 4 KiB at p.
PRISM_TARGET_AMX_GEMM inline void load_sums(const float* p) {
  _tile_loadd(0, p, 64);
  _tile_loadd(1, p + 256, 64);
  _tile_loadd(2, p + 512, 64);
  _tile_loadd(3, p + 768, 64);
}
PRISM_TARGET_AMX_GEMM inline void store_sums(float* p) {
  _tile_stored(0, p, 64);
  _tile_stored(1, p + 256, 64);
  _tile_stored(2, p + 512, 64);
  _tile_stored(3, p + 768, 64);
}

// The 2 x 2 tiles of sums (tiles 0-3: rows 0-15 and 16-31, columns 0-15 and 16-31 of the 32 x
// 32 at hand), rounded to bf16 into out's rows below `rows`.
PRISM_TARGET_AMX_GEMM void write_sums(int64_t rows, uint16_t* out, int64_t ldo) {
  alignas(64) float sums[4 * 256];
  store_sums(sums);
  for (int64_t r = 0; r < std::min<int64_t>(rows, kAmxGemmRows); ++r) {
    const float* row = sums + (r / 16) * 512 + (r % 16) * 16;
    uint16_t* dst = out + r * ldo;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(row))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(row + 256))));
  }
}

}  // namespace

// Tiles: 0-3 the sums of 32 rows x 32 columns, 4 and 5 the activations' two tiles of a step,
// 6 and 7 the weights' (16 columns each).
PRISM_TARGET_AMX_GEMM void amx_gemm_blocked(const uint16_t* xp, int64_t m, int64_t k,
                                            const uint16_t* w, int64_t blocks, uint16_t* out,
                                            int64_t ldo) {
  if (m <= 0 || blocks <= 0) return;
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) config.set(t, 16, 64);
  _tile_loadconfig(&config);
  const int64_t mp = (m + kAmxGemmRows - 1) / kAmxGemmRows * kAmxGemmRows;
  const int64_t steps = k / 32;
  const int64_t parts = (k + kAmxGemmMaxDepth - 1) / kAmxGemmMaxDepth;
  const int64_t part_steps = (steps + parts - 1) / parts;
  thread_local AlignedBuffer<float> partial;
  const int64_t chunk_groups = kAmxGemmChunkRows / kAmxGemmRows;
  float* acc = parts > 1 ? partial.reserve(chunk_groups * blocks * 2 * 1024) : nullptr;
  alignas(64) float held[kAmxGemmChunkRows / kAmxGemmRows * 1024];  // the chunk's sums
  const auto* wb = reinterpret_cast<const char*>(w);
  const int64_t block_bytes = 64 * k * static_cast<int64_t>(sizeof(uint16_t));

  for (int64_t m0 = 0; m0 < mp; m0 += kAmxGemmChunkRows) {
    const int64_t m1 = std::min(mp, m0 + kAmxGemmChunkRows);
    const int64_t groups = (m1 - m0) / kAmxGemmRows;
    for (int64_t s0 = 0; s0 < steps; s0 += part_steps) {
      const int64_t s1 = std::min(steps, s0 + part_steps);
      const bool first = s0 == 0, last = s1 == steps;
      // The next block's part is prefetched into L2 over the 2 * groups passes of this one's
      // steps: per step, its share rounded up to whole cache lines.
      const int64_t part_bytes = (s1 - s0) * kStepBytes;
      const int64_t ahead_step = (part_bytes / (2 * groups * (s1 - s0)) + 63) / 64 * 64;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t* block = w + b * 64 * k;
        // The next block's part, or after the last block the first block's next part (of
        // these rows or of the next chunk of rows), which left L2 since it was last read.
        const char* next = nullptr;
        const char* next_end = nullptr;
        if (b + 1 < blocks) {
          next = wb + (b + 1) * block_bytes + s0 * kStepBytes;
          next_end = next + part_bytes;
        } else if (s1 < steps || m1 < mp) {
          const int64_t n0 = s1 < steps ? s1 : 0, n1 = std::min(steps, n0 + part_steps);
          next = wb + n0 * kStepBytes;
          next_end = wb + n1 * kStepBytes;
        }
        for (int64_t h = 0; h < 2; ++h) {
          const uint16_t* wh = block + 64 * h;  // columns 32h.. of each pair of k
          // kL1Steps steps at a time for all the chunk's rows: their weights stay in L1
          // between the rows' groups, the groups' sums between the steps.
          for (int64_t c0 = s0; c0 < s1; c0 += kL1Steps) {
            const int64_t c1 = std::min(s1, c0 + kL1Steps);
            for (int64_t g = m0; g < m1; g += kAmxGemmRows) {
              const uint16_t* a = xp + g * k;
              float* sums = (c0 == s0 && !first) || (c1 == s1 && !last)
                                ? acc + (((g - m0) / kAmxGemmRows * blocks + b) * 2 + h) * 1024
                                : nullptr;
              float* near = held + (g - m0) / kAmxGemmRows * 1024;
              if (c0 > s0) {
                load_sums(near);
              } else if (first) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
              } else {
                load_sums(sums);
              }
              for (int64_t s = c0; s < c1; ++s) {
                const uint16_t* as = a + s * kRowStepValues;
                const uint16_t* ws = wh + s * (kStepBytes / sizeof(uint16_t));
                _tile_loadd(4, as, 64);
                _tile_loadd(6, ws, kPairBytes);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, ws + 32, kPairBytes);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, as + kRowStepValues / 2, 64);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
                for (int64_t l = 0; l < ahead_step && next < next_end; l += 64, next += 64)
                  _mm_prefetch(next, _MM_HINT_T1);
              }
              if (c1 < s1) {
                store_sums(near);
              } else if (last) {
                write_sums(m - g, out + g * ldo + b * 64 + h * 32, ldo);
              } else {
                store_sums(sums);
              }
            }
          }
        }
      }
    }
  }
  _tile_release();
}

#else  // no AMX here: amx_gemm_available() is false and the kernel is never called

bool amx_gemm_available() { return false; }
void block_rows_for_amx_gemm(const uint16_t* rows, int64_t ldr, int64_t c0, int64_t c1,
                             uint16_t* block) {
  block_rows_plain(rows, ldr, c0, c1, block);
}
void amx_gemm_blocked(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, uint16_t*,
                      int64_t) {}

#endif

}  // namespace prism::cpu
