// gemm.h's products: packing, the loops over blocks, and the micro-kernels (AVX-512, AVX2 and
// portable).
#include "prism/backends/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "prism/backends/cpu/hwy_targets.h"
//
#include <hwy/targets.h>

#include "prism/backends/cpu/nn_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PRISM_HAVE_GEMM_AVX2 1
#include <immintrin.h>
#endif

namespace prism::cpu {
namespace {

constexpr int64_t kMR = kGemmPanelRows;
constexpr int64_t kNR = 16;  // columns the portable and AVX2 micro-kernels take (two AVX2 vectors)
constexpr int64_t kNR512 = 64;  // and the AVX-512 one (four vectors, a block of weight_layout.h)
// Panels of x a pass of the micro-kernels runs through for each micro-panel of weights (96
// rows: 96 KiB of x at a depth of 256, kept in L2 beside the piece's weights).
constexpr int64_t kPassPanels = 16;

// c[6][ldc] (+)= a . b over kc values of k: a is a panel of x (kc x 6, each k's 6 rows
// together), b a micro-panel of weights (kc x the kernel's columns). `accumulate`: add to what c
// holds. `next`, where not null, is the panel the next call takes while it is not in cache: the
// AVX2 kernel asks for its lines as it goes (the AVX-512 one does not: not measured there).
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             bool accumulate, const float* next);
// Columns [n0, n0 + cols) of w (cols <= the kernel's columns; the others zero), k in [k0, k0 +
// kc), as a micro-panel: out[(k - k0) * columns + j].
using PackWeights = void (*)(GemmWeights w, int64_t n0, int64_t k0, int64_t cols, int64_t kc,
                             float* out);

uint16_t weight_at(const GemmWeights& w, int64_t k, int64_t n) {
  return w.blocked_k > 0 ? w.data[blocked_index(n, k, w.blocked_k)]
                         : w.data[k * w.k_stride + n * w.n_stride];
}

template <int64_t NR>
void PackWeightsPortable(GemmWeights w, int64_t n0, int64_t k0, int64_t cols, int64_t kc,
                         float* out) {
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t j = 0; j < NR; ++j)
      out[k * NR + j] = j < cols ? bf16_to_f32(weight_at(w, k0 + k, n0 + j)) : 0.0f;
}

void MicroKernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         bool accumulate, const float* /*next*/) {
  float acc[kMR][kNR];
  for (int64_t r = 0; r < kMR; ++r)
    for (int64_t j = 0; j < kNR; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    for (int64_t r = 0; r < kMR; ++r)
      for (int64_t j = 0; j < kNR; ++j) acc[r][j] = std::fma(a[r], b[j], acc[r][j]);
  }
  for (int64_t r = 0; r < kMR; ++r)
    for (int64_t j = 0; j < kNR; ++j) c[r * ldc + j] = acc[r][j];
}

#if PRISM_HAVE_GEMM_AVX2
#define PRISM_AVX2 __attribute__((target("avx2,fma")))

PRISM_AVX2 void MicroKernelAvx2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                bool accumulate, const float* next) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (accumulate) {
    c00 = _mm256_loadu_ps(c), c01 = _mm256_loadu_ps(c + 8);
    c10 = _mm256_loadu_ps(c + ldc), c11 = _mm256_loadu_ps(c + ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
#pragma GCC unroll 8
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    if (next != nullptr && k % 8 == 0) {  // the next panel's 8 k: 48 floats, three lines
      _mm_prefetch(reinterpret_cast<const char*>(next + k * kMR), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k * kMR + 16), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k * kMR + 32), _MM_HINT_T0);
    }
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  _mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
  _mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

// 8 bf16 values at p as f32.
PRISM_AVX2 inline __m256 Widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// v[i][j] becomes v[j][i].
PRISM_AVX2 inline void Transpose8(__m256* v) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(s0, s4, 0x20), v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  v[1] = _mm256_permute2f128_ps(s1, s5, 0x20), v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  v[2] = _mm256_permute2f128_ps(s2, s6, 0x20), v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  v[3] = _mm256_permute2f128_ps(s3, s7, 0x20), v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Columns [0, cols) of a micro-panel NR wide from weights stored {n, k} (p: k = 0 of column 0),
// 8 rows of 8 k at a time, transposed.
template <int64_t NR>
PRISM_AVX2 void PackNkAvx2(const uint16_t* p, int64_t n_stride, int64_t cols, int64_t kc,
                           float* out) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    for (int64_t h = 0; h < NR / 8; ++h) {
      __m256 v[8];
      for (int64_t r = 0; r < 8; ++r) {
        const int64_t n = h * 8 + r;
        v[r] = n < cols ? Widen8(p + n * n_stride + k) : _mm256_setzero_ps();
      }
      Transpose8(v);
      for (int64_t j = 0; j < 8; ++j) _mm256_store_ps(out + (k + j) * NR + h * 8, v[j]);
    }
  }
  for (; k < kc; ++k)
    for (int64_t j = 0; j < NR; ++j)
      out[k * NR + j] = j < cols ? bf16_to_f32(p[j * n_stride + k]) : 0.0f;
}

PRISM_AVX2 void PackWeightsAvx2(GemmWeights w, int64_t n0, int64_t k0, int64_t cols, int64_t kc,
                                float* out) {
  if (w.blocked_k == 0 && w.k_stride == 1) {
    PackNkAvx2<kNR>(w.data + n0 * w.n_stride + k0, w.n_stride, cols, kc, out);
    return;
  }
  if (w.blocked_k == 0 && w.n_stride == 1 && cols == kNR) {  // stored {k, n}: 16 columns a load
    for (int64_t k = 0; k < kc; ++k) {
      const uint16_t* p = w.data + (k0 + k) * w.k_stride + n0;
      _mm256_store_ps(out + k * kNR, Widen8(p));
      _mm256_store_ps(out + k * kNR + 8, Widen8(p + 8));
    }
    return;
  }
  PackWeightsPortable<kNR>(w, n0, k0, cols, kc, out);
}

#define PRISM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))

// GCC 12 warns about the self-initialized "undefined" source operands of its own AVX-512
// intrinsics once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The AVX2 kernel's scheme four vectors of 16 wide: 24 sums in registers, 24 FMAs for 4 loads
// of weights and 6 broadcasts a k.
PRISM_AVX512 void MicroKernelAvx512(int64_t kc, const float* a, const float* b, float* c,
                                    int64_t ldc, bool accumulate, const float* /*next*/) {
  __m512 acc[kMR][4];
#pragma GCC unroll 6
  for (int64_t r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int64_t q = 0; q < 4; ++q)
      acc[r][q] = accumulate ? _mm512_loadu_ps(c + r * ldc + q * 16) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR512) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    const __m512 b2 = _mm512_load_ps(b + 32), b3 = _mm512_load_ps(b + 48);
#pragma GCC unroll 6
    for (int64_t r = 0; r < kMR; ++r) {
      const __m512 x = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);
    }
  }
#pragma GCC unroll 6
  for (int64_t r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int64_t q = 0; q < 4; ++q) _mm512_storeu_ps(c + r * ldc + q * 16, acc[r][q]);
}

PRISM_AVX512 void PackWeightsAvx512(GemmWeights w, int64_t n0, int64_t k0, int64_t cols, int64_t kc,
                                    float* out) {
  if (w.blocked_k > 0 && n0 % kWeightBlockRows == 0 && k0 % 2 == 0 && kc % 2 == 0 &&
      cols == kNR512) {
    // A block row holds the pair (k, k + 1) of the block's 64 columns as 64 32-bit words: k's
    // value is the low half, k + 1's the high one.
    const uint16_t* p = w.data + n0 * w.blocked_k + k0 * kWeightBlockRows;
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int64_t k = 0; k < kc; k += 2, p += 2 * kWeightBlockRows) {
#pragma GCC unroll 4
      for (int64_t q = 0; q < 4; ++q) {
        const __m512i v = _mm512_loadu_si512(p + q * 32);
        _mm512_store_ps(out + k * kNR512 + q * 16, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        _mm512_store_ps(out + (k + 1) * kNR512 + q * 16,
                        _mm512_castsi512_ps(_mm512_and_si512(v, high)));
      }
    }
    return;
  }
  if (w.blocked_k == 0 && w.k_stride == 1) {
    PackNkAvx2<kNR512>(w.data + n0 * w.n_stride + k0, w.n_stride, cols, kc, out);
    return;
  }
  if (w.blocked_k == 0 && w.n_stride == 1 && cols == kNR512) {  // stored {k, n}
    for (int64_t k = 0; k < kc; ++k) {
      const uint16_t* p = w.data + (k0 + k) * w.k_stride + n0;
#pragma GCC unroll 4
      for (int64_t q = 0; q < 4; ++q) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + q * 16));
        _mm512_store_ps(out + k * kNR512 + q * 16,
                        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
      }
    }
    return;
  }
  PackWeightsPortable<kNR512>(w, n0, k0, cols, kc, out);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef PRISM_AVX512
#undef PRISM_AVX2
#endif

struct Kernels {
  MicroKernel micro;
  PackWeights pack;
  const char* name;
  int64_t columns;  // of a micro-panel
  int64_t depth;    // values of k packed at a time
};

Kernels kernels(GemmKernel kernel) {
#if PRISM_HAVE_GEMM_AVX2
  if (kernel == GemmKernel::best && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && simd::current().hwy <= HWY_AVX3) {
    return {&MicroKernelAvx512, &PackWeightsAvx512, "avx512", kNR512, 128};
  }
  if (kernel == GemmKernel::best && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma") && simd::current().hwy <= HWY_AVX2) {
    return {&MicroKernelAvx2, &PackWeightsAvx2, "avx2", kNR, 256};
  }
#else
  (void)kernel;
#endif
  return {&MicroKernelPortable, &PackWeightsPortable<kNR>, "portable", kNR, 256};
}

// A float buffer of the calling thread, 64-byte aligned, grown as needed.
class Buffer {
 public:
  float* get(int64_t floats) {
    if (floats > size_) {
      data_.reset(
          static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)));
      size_ = floats;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t size_ = 0;
};

}  // namespace

void gemm_pack_lhs(const uint16_t* x, int64_t row_stride, int64_t col_stride, int64_t M, int64_t K,
                   int64_t p0, int64_t p1, float* packed) {
  for (int64_t p = p0; p < p1; ++p) {
    float* panel = packed + p * K * kMR;
    for (int64_t r = 0; r < kMR; ++r) {
      const int64_t m = p * kMR + r;
      if (m >= M) {
        for (int64_t k = 0; k < K; ++k) panel[k * kMR + r] = 0.0f;
        continue;
      }
      const uint16_t* row = x + m * row_stride;
      for (int64_t k = 0; k < K; ++k) panel[k * kMR + r] = bf16_to_f32(row[k * col_stride]);
    }
  }
}

void gemm_columns(const float* packed, int64_t M, int64_t K, GemmWeights w, int64_t n0, int64_t n1,
                  GemmOutput y, GemmKernel kernel) {
  const Kernels k = kernels(kernel);
  const NnRowKernels rows = nn_row_kernels();
  thread_local Buffer weights, sums;
  const int64_t panels = (M + kMR - 1) / kMR;
  for (int64_t c0 = n0; c0 < n1; c0 += kGemmColumns) {
    const int64_t cols = std::min(kGemmColumns, n1 - c0);
    const int64_t nr = k.columns, micro_panels = (cols + nr - 1) / nr, ldc = micro_panels * nr;
    float* c = sums.get(panels * kMR * ldc);
    float* b = weights.get(micro_panels * k.depth * nr);
    for (int64_t k0 = 0; k0 < K; k0 += k.depth) {
      const int64_t kc = std::min(k.depth, K - k0);
      for (int64_t j = 0; j < micro_panels; ++j)
        k.pack(w, c0 + j * nr, k0, std::min(nr, cols - j * nr), kc, b + j * kc * nr);
      for (int64_t p0 = 0; p0 < panels; p0 += kPassPanels) {
        const int64_t p1 = std::min(panels, p0 + kPassPanels);
        for (int64_t j = 0; j < micro_panels; ++j) {
          for (int64_t p = p0; p < p1; ++p) {
            // The first micro-panel of a pass reads each of its panels of x from L3 or memory
            // (beyond L3 for K = 8192 at 512 rows: 16 MiB); the others from L2.
            const float* next = nullptr;
            if (j == 0 && p + 1 < p1) next = packed + ((p + 1) * K + k0) * kMR;
            if (j + 1 == micro_panels && p + 1 == p1 && p1 < panels) {
              next = packed + (p1 * K + k0) * kMR;  // the next pass's first
            }
            k.micro(kc, packed + (p * K + k0) * kMR, b + j * kc * nr, c + p * kMR * ldc + j * nr,
                    ldc, k0 > 0, next);
          }
        }
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      if (y.bf16) {
        rows.from_f32(
            DType::bf16, c + m * ldc,
            reinterpret_cast<std::byte*>(static_cast<uint16_t*>(y.data) + m * y.row_stride + c0),
            cols);
      } else {
        std::memcpy(static_cast<float*>(y.data) + m * y.row_stride + c0, c + m * ldc,
                    cols * sizeof(float));
      }
    }
  }
}

const char* gemm_kernel_name(GemmKernel kernel) { return kernels(kernel).name; }

}  // namespace prism::cpu
