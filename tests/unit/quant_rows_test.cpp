// prism/backends/cpu/quant_rows.h: products of f32 rows with weights in ggml's block formats
// match a double-precision product with the weights dequantized by prism/quant/dequantize.h,
// for 1 to 16 activation rows, strided rows and outputs, an odd number of weight rows, under
// every SIMD target this binary has and this CPU runs; rows dequantized into f32 or bf16 are
// dequantize's values bit for bit (rounded to bf16 as f32_to_bf16 does).
#include "prism/backends/cpu/quant_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "prism/backends/cpu/simd.h"
#include "prism/core/dtype.h"
#include "prism/core/error.h"
#include "prism/quant/dequantize.h"
#include "prism/quant/quantize.h"

namespace prism {
namespace {

using quant::GgmlType;
namespace simd = cpu::simd;

// Runs `check` once under every available target, then goes back to the one in use.
template <typename F>
void for_each_target(F&& check) {
  const simd::Target before = simd::current();
  for (const simd::Target& t : simd::available()) {
    SCOPED_TRACE("SIMD target " + t.name());
    simd::use(t);
    check(t);
  }
  simd::use(before);
}

void put_f16(std::byte* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Offsets of a block's f16 scales, for the types whose blocks are filled with random bytes.
std::vector<int> scale_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
      return {0};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// n rows of k values of `type`, rows `row_bytes` apart (the bytes between rows are random):
// random weights quantized where prism has a quantizer, else random blocks with f16 scales
// of 0.01-0.1.
std::vector<std::byte> random_rows(GgmlType type, int64_t n, int64_t k, int64_t row_bytes,
                                   std::mt19937& rng) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  const int64_t bytes = k / t.block_elements * t.block_bytes;
  std::vector<std::byte> w(static_cast<size_t>(n * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::byte& b : w) b = static_cast<std::byte>(byte(rng));
  std::uniform_real_distribution<float> value(-1, 1), scale(0.01f, 0.1f);
  for (int64_t r = 0; r < n; ++r) {
    std::byte* row = w.data() + r * row_bytes;
    if (quant::can_quantize(type)) {
      std::vector<float> v(static_cast<size_t>(k));
      for (float& x : v) x = value(rng);
      quant::quantize(type, v, {row, static_cast<size_t>(bytes)});
      continue;
    }
    for (int64_t b = 0; b < k / t.block_elements; ++b)
      for (int offset : scale_offsets(type)) put_f16(row + b * t.block_bytes + offset, scale(rng));
  }
  return w;
}

void check_type(GgmlType type, int64_t k, int64_t pad) {
  SCOPED_TRACE(std::string(quant::name(type)) + " k=" + std::to_string(k));
  ASSERT_GT(k, 0);
  const quant::GgmlTypeInfo& t = quant::info(type);
  constexpr int64_t n = 37, kMaxM = 16;
  const int64_t row_bytes = k / t.block_elements * t.block_bytes + pad;
  const int64_t ldx = k + 7, ldo = n + 3;
  std::mt19937 rng(static_cast<uint32_t>(t.type) * 1000 + static_cast<uint32_t>(k));
  const std::vector<std::byte> w = random_rows(type, n, k, row_bytes, rng);
  std::vector<float> x(static_cast<size_t>(kMaxM * ldx));
  std::uniform_real_distribution<float> value(-1, 1);
  for (float& v : x) v = value(rng);

  std::vector<float> dequantized(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    quant::dequantize(type, {w.data() + r * row_bytes, static_cast<size_t>(row_bytes - pad)},
                      {dequantized.data() + r * k, static_cast<size_t>(k)});
  for_each_target([&](const simd::Target&) {
    for (int64_t m : {1, 2, 3, 4, 5, 8, 16}) {
      SCOPED_TRACE("m=" + std::to_string(m));
      const float unset = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> out(static_cast<size_t>(m * ldo), unset);
      cpu::quant_rows(type, x.data(), ldx, m, w.data(), row_bytes, n, k, out.data(), ldo);
      int failures = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < n; ++r) {
          double want = 0, magnitude = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double p = double(x[i * ldx + j]) * dequantized[r * k + j];
            want += p;
            magnitude += std::abs(p);
          }
          const float got = out[i * ldo + r];
          if (!(std::abs(got - want) <= 1e-4 * magnitude + 1e-6) && ++failures <= 5)
            ADD_FAILURE() << "row " << i << ", weight row " << r << ": " << got << ", want " << want
                          << " (sum of |products| " << magnitude << ")";
        }
        for (int64_t r = n; r < ldo; ++r)
          if (!std::isnan(out[i * ldo + r]) && ++failures <= 5)
            ADD_FAILURE() << "row " << i << ": wrote past n, at " << r;
      }
    }
  });
}

// n rows of random bytes, rows `row_bytes` apart, whose f16 scales are any finite value:
// normal ones of either sign from 2^-14 to 2^5, subnormal ones, zeros. (Plain types: any
// bits, infinities and NaNs among them.)
std::vector<std::byte> random_blocks(GgmlType type, int64_t n, int64_t k, int64_t row_bytes,
                                     std::mt19937& rng) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  std::vector<std::byte> w(static_cast<size_t>(n * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255), kind(0, 9), exponent(1, 20);
  std::uniform_int_distribution<uint16_t> mantissa(0, 0x3ff), sign(0, 1);
  for (std::byte& b : w) b = static_cast<std::byte>(byte(rng));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < k / t.block_elements; ++b) {
      for (int offset : scale_offsets(type)) {
        const int c = kind(rng);
        uint16_t h = static_cast<uint16_t>(sign(rng) << 15);
        if (c < 7) h |= static_cast<uint16_t>(exponent(rng) << 10) | mantissa(rng);  // normal
        if (c >= 7 && c < 9) h |= std::max<uint16_t>(1, mantissa(rng));              // subnormal
        std::memcpy(w.data() + r * row_bytes + b * t.block_bytes + offset, &h, 2);
      }
    }
  }
  return w;
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// dequantize_rows of n = 37 rows of `w` into f32 and bf16 rows ldo = k + 5 apart, under every
// target, against quant::dequantize bit for bit; the elements between rows stay unwritten.
void check_dequantize_rows(GgmlType type, const std::vector<std::byte>& w, int64_t row_bytes,
                           int64_t k) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  constexpr int64_t n = 37;
  const int64_t ldo = k + 5;
  std::vector<float> want(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    quant::dequantize(
        type, {w.data() + r * row_bytes, static_cast<size_t>(k / t.block_elements * t.block_bytes)},
        {want.data() + r * k, static_cast<size_t>(k)});
  for_each_target([&](const simd::Target&) {
    constexpr uint32_t kUnset32 = 0xdeadbeef;
    constexpr uint16_t kUnset16 = 0xbeef;
    std::vector<uint32_t> f32(static_cast<size_t>(n * ldo), kUnset32);
    std::vector<uint16_t> bf16(static_cast<size_t>(n * ldo), kUnset16);
    cpu::dequantize_rows(type, w.data(), row_bytes, n, k, DType::f32,
                         reinterpret_cast<std::byte*>(f32.data()), ldo);
    cpu::dequantize_rows(type, w.data(), row_bytes, n, k, DType::bf16,
                         reinterpret_cast<std::byte*>(bf16.data()), ldo);
    int failures = 0;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < ldo; ++j) {
        const size_t at = static_cast<size_t>(r * ldo + j);
        const uint32_t want32 = j < k ? bits_of(want[r * k + j]) : kUnset32;
        const uint16_t want16 = j < k ? f32_to_bf16(want[r * k + j]) : kUnset16;
        if (f32[at] != want32 && ++failures <= 5)
          ADD_FAILURE() << "f32, row " << r << ", value " << j << ": bits " << std::hex << f32[at]
                        << ", want " << want32;
        if (bf16[at] != want16 && ++failures <= 5)
          ADD_FAILURE() << "bf16, row " << r << ", value " << j << ": bits " << std::hex << bf16[at]
                        << ", want " << want16;
      }
    }
  });
}

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K,
                           GgmlType::Q5_K, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

TEST(QuantRows, MatchesDequantizedProduct) {
  for (GgmlType type : kTypes) {
    check_type(type, 512, 0);
    check_type(type, 256, 0);
  }
}

TEST(QuantRows, RowsWithBytesBetweenThem) {
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K}) check_type(type, 256, 6);
}

TEST(QuantRows, PlainRowsOfAnyLength) {
  // No blocks: lengths that are not a whole number of vectors.
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) check_type(type, 45, 0);
}

TEST(QuantRows, MainFormatsHaveKernelsWhereThereAreVectors) {
  for_each_target([](const simd::Target& t) {
    if (t.name() == "emu128" || t.name() == "scalar") return;
    for (GgmlType type : kTypes) EXPECT_TRUE(cpu::quant_rows_native(type)) << quant::name(type);
  });
  EXPECT_FALSE(cpu::quant_rows_native(GgmlType::IQ2_XXS));
}

TEST(QuantRows, DequantizesRowsBitForBit) {
  for (GgmlType type : kTypes) {
    for (int64_t k : {512, 256}) {
      SCOPED_TRACE(std::string(quant::name(type)) + " k=" + std::to_string(k));
      const quant::GgmlTypeInfo& t = quant::info(type);
      const int64_t row_bytes = k / t.block_elements * t.block_bytes + 6;
      std::mt19937 rng(static_cast<uint32_t>(t.type) * 1000 + static_cast<uint32_t>(k) + 7);
      {
        SCOPED_TRACE("quantized weights");
        check_dequantize_rows(type, random_rows(type, 37, k, row_bytes, rng), row_bytes, k);
      }
      {
        SCOPED_TRACE("random blocks");
        check_dequantize_rows(type, random_blocks(type, 37, k, row_bytes, rng), row_bytes, k);
      }
    }
  }
}

TEST(QuantRows, DequantizesPlainRowsOfAnyLength) {
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    SCOPED_TRACE(quant::name(type));
    const int64_t row_bytes = 45 * quant::info(type).block_bytes + 2;
    std::mt19937 rng(45);
    check_dequantize_rows(type, random_blocks(type, 37, 45, row_bytes, rng), row_bytes, 45);
  }
}

TEST(QuantRows, DequantizeRefusesWhatItCannotRead) {
  std::vector<std::byte> w(1024), out(4096);
  EXPECT_THROW(
      cpu::dequantize_rows(GgmlType::IQ2_XXS, w.data(), 66, 1, 256, DType::f32, out.data(), 256),
      Error);
  EXPECT_THROW(
      cpu::dequantize_rows(GgmlType::Q8_0, w.data(), 34, 1, 32, DType::f16, out.data(), 32), Error);
  // k not a whole number of blocks.
  EXPECT_THROW(
      cpu::dequantize_rows(GgmlType::Q4_K, w.data(), 144, 1, 128, DType::bf16, out.data(), 128),
      Error);
}

TEST(QuantRows, RefusesWhatItCannotRead) {
  std::vector<std::byte> w(1024);
  std::vector<float> x(256), out(4);
  EXPECT_THROW(
      cpu::quant_rows(GgmlType::IQ2_XXS, x.data(), 256, 1, w.data(), 66, 1, 256, out.data(), 4),
      Error);
  // k not a whole number of blocks.
  EXPECT_THROW(
      cpu::quant_rows(GgmlType::Q4_K, x.data(), 256, 1, w.data(), 144, 1, 128, out.data(), 4),
      Error);
}

}  // namespace
}  // namespace prism
