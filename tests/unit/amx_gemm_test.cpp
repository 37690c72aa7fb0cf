// prism/backends/cpu/amx_gemm.h: a prompt's products with blocked bf16 weights on AMX tiles,
// against sums in double of the same bf16 values, rounded once to bf16: row counts that are not
// multiples of the kernel's 32 or of its chunks of 128, depths in one part and in several, one
// block of columns and several. Skipped where the CPU (or the process) has no AMX-BF16.
#include "prism/backends/cpu/amx_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"

namespace prism {
namespace {

TEST(AmxGemm, MatchesSumsInDoubleRoundedOnce) {
  if (!cpu::amx_gemm_available()) GTEST_SKIP() << "no AMX-BF16 here";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  cpu::ThreadPool one(1);
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{17, 64, 64},
                         {45, 96, 128},
                         {130, 2080, 192},
                         {300, 4096, 64},
                         {32, 32, 64}}) {
    std::vector<uint16_t> x(M * K), w(N * K), kept(N * K), out(M * N, 0xffff);
    for (auto& v : x) v = f32_to_bf16(uniform(rng));
    for (auto& v : w) v = f32_to_bf16(uniform(rng));
    cpu::copy_weights(cpu::WeightLayout::bf16_blocks, reinterpret_cast<const std::byte*>(w.data()),
                      reinterpret_cast<std::byte*>(kept.data()), N, K, true, one);
    const int64_t rows = (M + cpu::kAmxGemmRows - 1) / cpu::kAmxGemmRows * cpu::kAmxGemmRows;
    cpu::AlignedBuffer<uint16_t> packed(cpu::amx_gemm_packed_values(M, K));
    // Packed in two calls, as the pool's threads pack their share.
    cpu::pack_rows_for_amx_gemm(x.data(), K, M, K, 0, cpu::kAmxGemmRows, packed.data());
    cpu::pack_rows_for_amx_gemm(x.data(), K, M, K, cpu::kAmxGemmRows, rows, packed.data());
    cpu::amx_gemm_blocked(packed.data(), M, K, kept.data(), N / 64, out.data(), N);
    int bad = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(bf16_to_f32(x[m * K + k])) * bf16_to_f32(w[n * K + k]);
          sum += p;
          magnitude += std::abs(p);
        }
        // bf16's rounding of the result, and f32's of the sums on the way.
        const double got = bf16_to_f32(out[m * N + n]);
        const double allowed = std::abs(sum) / 256 + magnitude * 2e-5;
        if (!(std::abs(got - sum) <= allowed) && ++bad <= 5) {
          ADD_FAILURE() << M << " x " << K << " x " << N << ": [" << m << ", " << n << "] " << got
                        << " against " << sum;
        }
      }
    }
    EXPECT_EQ(bad, 0) << M << " x " << K << " x " << N;
  }
}

TEST(AmxGemm, PacksRowsPastTheEndAsZeros) {
  const int64_t M = 3, K = 64;
  std::vector<uint16_t> x(M * K, 0x3f80);  // 1.0
  std::vector<uint16_t> packed(cpu::amx_gemm_packed_values(M, K), 0xffff);
  ASSERT_EQ(packed.size(), static_cast<size_t>(32 * K));
  cpu::pack_rows_for_amx_gemm(x.data(), K, M, K, 0, 32, packed.data());
  // Step s, tile t, row r of the tile: 32 values at 1024 s + 512 t + 32 r.
  for (int64_t s = 0; s < K / 32; ++s)
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t i = 0; i < 32; ++i)
        EXPECT_EQ(packed[1024 * s + 512 * (r / 16) + 32 * (r % 16) + i], r < M ? 0x3f80 : 0)
            << s << " " << r << " " << i;
}

// Pieces of 64 rows put into a block land where the layout says (blocked_index), whatever
// the piece's width, and leave the rest of the block alone.
TEST(AmxGemm, BlocksPiecesOfRowsInPlace) {
  const int64_t K = 320;
  std::vector<uint16_t> rows(64 * K);
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < K; ++c) rows[r * K + c] = static_cast<uint16_t>(r * 1000 + c);
  cpu::AlignedBuffer<uint16_t> block(64 * K);
  std::fill_n(block.data(), 64 * K, uint16_t{0xffff});
  // Values [0, 256) in one piece, [256, 288) in another; [288, 320) not written.
  cpu::block_rows_for_amx_gemm(rows.data(), K, 0, 256, block.data());
  cpu::block_rows_for_amx_gemm(rows.data() + 256, K, 256, 288, block.data());
  int64_t bad = 0;
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const uint16_t want = c < 288 ? rows[r * K + c] : uint16_t{0xffff};
      bad += block.data()[cpu::blocked_index(r, c, K)] != want;
    }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace prism
