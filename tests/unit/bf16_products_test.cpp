// prism/backends/cpu/bf16_products.h: the measurement behind the choice between oneDNN's bf16
// products and gemm.h's f32 FMAs, and the key its cache keeps it under. (The choice itself,
// the cache and PRISM_CPU_PRODUCTS are process-wide: tests/cli/platforms.sh runs them.) The
// same for batched rows' two kernels of blocked weights.
#include "prism/backends/cpu/bf16_products.h"

#include <gtest/gtest.h>

#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/gemm.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/backends/cpu/topology.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

TEST(Bf16Products, MeasuresEachKindThisCpuHas) {
  // Weights the CPU backend would block (n and k multiples of the block's) and weights it would
  // not: both kinds run on either.
  for (auto [M, K, N] : {std::tuple{12, 64, 128}, std::tuple{7, 40, 100}}) {
    const cpu::Bf16ProductsSpeed s = cpu::measure_bf16_products(M, K, N, 2);
    EXPECT_GT(s.fma_gflops, 0.0);
    EXPECT_EQ(s.onednn_gflops > 0.0, cpu::onednn::multiplies_bf16());
  }
}

TEST(Bf16Products, MeasuresBothKernelsOfBatchedRows) {
  const cpu::Bf16RowsSpeed s = cpu::measure_bf16_rows(3, 64, 128, 2);
  const bool kernels = cpu::dot_row_kernels().bf16_rows_blocked != nullptr;
  EXPECT_EQ(s.fma_gflops > 0.0, kernels);
  EXPECT_EQ(s.pairs_gflops > 0.0, kernels);
  if (kernels) {
    EXPECT_EQ(testing::error_of([] { cpu::measure_bf16_rows(3, 64, 100, 1); }),
              "cpu: few-row products of 100 x 64 weights cannot be blocked");
    const cpu::Bf16RowsChoice& c = cpu::bf16_rows_products();
    EXPECT_TRUE(std::string_view(c.how) == "measured" ||
                std::string_view(c.how) == "measured before")
        << c.how;
    EXPECT_EQ(c.pairs, c.pairs_gflops > c.fma_gflops);
  }
}

TEST(Bf16Products, MeasuresTileProductsWhereTheCpuHasAmx) {
  const cpu::Bf16TilesSpeed s = cpu::measure_bf16_tiles(40, 64, 128, 2);
  const bool tiles = cpu::amx_gemm_available() && cpu::onednn::multiplies_bf16();
  EXPECT_EQ(s.tiles_gflops > 0.0, tiles);
  EXPECT_EQ(s.onednn_gflops > 0.0, tiles);
  const cpu::Bf16TilesChoice& c = cpu::bf16_tile_products();
  EXPECT_EQ(&c, &cpu::bf16_tile_products());  // made once
  if (!tiles) {
    EXPECT_FALSE(c.tiles);
    return;
  }
  EXPECT_EQ(testing::error_of([] { cpu::measure_bf16_tiles(40, 64, 100, 1); }),
            "cpu: tile products of 100 x 64 weights cannot be blocked");
  const std::string_view how = c.how;
  if (how == "measured" || how == "measured before") {
    EXPECT_EQ(c.tiles, c.tiles_gflops > c.onednn_gflops);
  } else if (cpu::bf16_products().path == cpu::Bf16Products::onednn) {
    EXPECT_EQ(how, "PRISM_CPU_PRODUCTS");
  } else {
    EXPECT_EQ(how, "");  // the FMAs take every product
  }
}

TEST(Bf16Products, TheCacheKeyNamesTheCpuAndTheKernels) {
  const std::string key = cpu::bf16_products_key();
  EXPECT_NE(key.find(cpu::cpu_model()), std::string::npos) << key;
  EXPECT_NE(key.find(std::string("gemm ") + cpu::gemm_kernel_name()), std::string::npos) << key;
  EXPECT_NE(key.find("oneDNN "), std::string::npos) << key;
  EXPECT_EQ(key.find_first_of("\t\n"), std::string::npos) << key;
}

TEST(Bf16Products, TheChoiceSaysWhatItIs) {
  const cpu::Bf16ProductsChoice& c = cpu::bf16_products();
  EXPECT_EQ(&c, &cpu::bf16_products());  // made once
  if (!cpu::onednn::multiplies_bf16()) {
    EXPECT_EQ(c.path, cpu::Bf16Products::fma);
  }
  EXPECT_EQ(c.description.rfind(c.path == cpu::Bf16Products::onednn ? "bf16 products in oneDNN"
                                                                    : "bf16 products on f32 FMAs",
                                0),
            0u)
      << c.description;
}

}  // namespace
}  // namespace prism
