// prism/backends/cpu/quant_rows.h: products of f32 rows with weights in ggml's block formats
// match a double-precision product with the weights dequantized by prism/quant/dequantize.h,
// for 1 to 16 activation rows, strided rows and outputs, an odd number of weight rows, under
// every SIMD target this binary has and this CPU runs; rows dequantized into f32 or bf16 are
// dequantize's values bit for bit (rounded to bf16 as f32_to_bf16 does). Activations rounded
// to 8 bits (quantize_activations) are ggml's reference rounding, value for value, and their
// integer products (quant_rows_int8) match the double-precision product of the dequantized
// weights with the rounded activations to a few f32 ulps of the sum of |products|.
#include "prism/backends/cpu/quant_rows.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/dtype.h"
#include "prism/core/error.h"
#include "prism/quant/dequantize.h"
#include "prism/quant/quantize.h"
#include "tests/unit/test_util.h"

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

// --- Activations rounded to 8 bits, integer products ---------------------------------------

// Rounding to the nearest integer of an f32 value, computed in double (exact for the f32
// values here): half away from zero (C's roundf, ggml's Q8_0 and Q8_1) or half to even (ggml's
// nearest_int, Q8_K).
double round_half_away(float v) {
  const double a = std::floor(std::abs(double(v)) + 0.5);
  return v < 0 ? -a : a;
}
double round_half_even(float v) {
  double r = std::floor(double(v) + 0.5);
  if (r - double(v) == 0.5 && std::fmod(r, 2.0) != 0) r -= 1;
  return r;
}

// ggml's format of activations for weights of `type` (its vec_dot_type).
GgmlType activation_format(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    default:
      return type;
  }
}

// One block of activations as the definitions of ggml's formats round it.
struct RoundedBlock {
  std::vector<int8_t> q;
  float d = 0;
  std::vector<int32_t> sums;  // of each 16 (Q8_K) or of the block (Q8_0, Q8_1)
};

// Q8_0 and Q8_1 (quantize_row_q8_0_ref, quantize_row_q8_1_ref): d = max|x| / 127 in f32, each
// x times the f32 reciprocal of d, rounded half away from zero; d stored as f16.
RoundedBlock reference_q8_0(const float* x) {
  RoundedBlock b;
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[j]));
  const float d = amax / 127.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  int32_t sum = 0;
  for (int j = 0; j < 32; ++j) {
    const float scaled = x[j] * id;
    b.q.push_back(static_cast<int8_t>(round_half_away(scaled)));
    sum += b.q.back();
  }
  b.d = f16_to_f32(f32_to_f16(d));
  b.sums = {sum};
  return b;
}

// Q8_K (quantize_row_q8_K_ref): the first value of largest magnitude, max; iscale = -127 /
// max; each iscale * x rounded half to even, at most 127; d = 1 / iscale; sums of each 16.
// A block of zeros: all zeros.
RoundedBlock reference_q8_k(const float* x) {
  RoundedBlock b;
  float amax = 0, max = 0;
  for (int j = 0; j < 256; ++j) {
    if (std::abs(x[j]) > amax) {
      amax = std::abs(x[j]);
      max = x[j];
    }
  }
  b.q.assign(256, 0);
  b.sums.assign(16, 0);
  if (amax == 0) return b;
  const float iscale = -127.0f / max;
  for (int j = 0; j < 256; ++j) {
    const float scaled = iscale * x[j];
    b.q[j] = static_cast<int8_t>(std::min(127.0, round_half_even(scaled)));
    b.sums[j / 16] += b.q[j];
  }
  b.d = 1.0f / iscale;
  return b;
}

// Rows of activations with what rounding has to get right: ties (values that scale to a
// half exactly), zeros (values and whole blocks), large values, negative extremes, and
// random values of mixed magnitudes.
std::vector<float> awkward_rows(int64_t m, int64_t k, int64_t ldx, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  std::uniform_int_distribution<int> kind(0, 5), half(-120, 120);
  std::vector<float> x(static_cast<size_t>(m * ldx), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k / 32; ++b) {
      float* xb = x.data() + i * ldx + 32 * b;
      switch (kind(rng)) {
        case 0:  // ties: max |x| = 127 makes d = 1 (Q8_0) and iscale = -1 (Q8_K) if it leads
          for (int j = 0; j < 32; ++j) xb[j] = static_cast<float>(half(rng)) + 0.5f;
          xb[0] = b % 2 ? -127.0f : 127.0f;
          break;
        case 1:  // zeros
          for (int j = 0; j < 32; ++j) xb[j] = 0;
          break;
        case 2:  // large values
          for (int j = 0; j < 32; ++j) xb[j] = value(rng) * 3e5f;
          break;
        case 3:  // some zeros among small values
          for (int j = 0; j < 32; ++j) xb[j] = j % 3 ? value(rng) * 1e-3f : 0.0f;
          break;
        default:
          for (int j = 0; j < 32; ++j) xb[j] = value(rng) * static_cast<float>(1 + b % 3);
      }
    }
  }
  return x;
}

TEST(QuantRows, QuantizeActivationsIsGgmlsRounding) {
  for (GgmlType type : kTypes) {
    for (int64_t k : {256, 512}) {
      SCOPED_TRACE(std::string(quant::name(type)) + " k=" + std::to_string(k));
      constexpr int64_t m = 5;
      const int64_t ldx = k + 3;
      const std::vector<float> x = awkward_rows(m, k, ldx, static_cast<uint32_t>(k) + 1);
      for_each_target([&](const simd::Target&) {
        cpu::QuantizedRows rows;
        cpu::quantize_activations(type, x.data(), ldx, m, k, rows);
        const GgmlType format = activation_format(type);
        ASSERT_EQ(rows.weights(), type);
        ASSERT_EQ(rows.format(), format);
        ASSERT_EQ(rows.rows(), m);
        ASSERT_EQ(rows.cols(), k);
        std::vector<float> dequantized(static_cast<size_t>(k));
        int failures = 0;
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = x.data() + i * ldx;
          rows.dequantize(i, dequantized.data());
          if (format == GgmlType::F32 || format == GgmlType::F16 || format == GgmlType::BF16) {
            ASSERT_EQ(rows.block_elements(), 1);
            for (int64_t j = 0; j < k; ++j) {
              const float want = format == GgmlType::F16    ? f16_to_f32(f32_to_f16(xi[j]))
                                 : format == GgmlType::BF16 ? bf16_to_f32(f32_to_bf16(xi[j]))
                                                            : xi[j];
              if (bits_of(dequantized[j]) != bits_of(want) && ++failures <= 5)
                ADD_FAILURE() << "row " << i << ", value " << j << ": " << dequantized[j]
                              << ", want " << want;
            }
            continue;
          }
          const int64_t block = format == GgmlType::Q8_K ? 256 : 32;
          ASSERT_EQ(rows.block_elements(), block);
          for (int64_t b = 0; b < k / block; ++b) {
            const RoundedBlock want =
                block == 256 ? reference_q8_k(xi + 256 * b) : reference_q8_0(xi + 32 * b);
            const int8_t* q = rows.quants(i, b);
            EXPECT_EQ(bits_of(rows.scale(i, b)), bits_of(want.d))
                << "row " << i << ", block " << b << ": d " << rows.scale(i, b) << ", want "
                << want.d;
            for (int64_t j = 0; j < block; ++j) {
              if (q[j] != want.q[j] && ++failures <= 5)
                ADD_FAILURE() << "row " << i << ", block " << b << ", value " << j << " ("
                              << xi[block * b + j] << "): " << int(q[j]) << ", want "
                              << int(want.q[j]);
              const float value = static_cast<float>(double(want.d) * want.q[j]);
              if (bits_of(dequantized[block * b + j]) != bits_of(value) && ++failures <= 5)
                ADD_FAILURE() << "dequantized row " << i << ", value " << block * b + j;
            }
            for (size_t j = 0; j < want.sums.size(); ++j)
              EXPECT_EQ(rows.sum(i, b, static_cast<int64_t>(j)), want.sums[j])
                  << "row " << i << ", block " << b << ", sum " << j;
          }
        }
      });
    }
  }
}

TEST(QuantRows, QuantizeActivationsRoundsTiesAsGgml) {
  // max |x| = 127: Q8_0's d is 1 and its ties go away from zero; Q8_K's iscale is -1 (the
  // extreme is positive) and its ties go to even.
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>(j % 8) - 3.5f;
  x[0] = 127;
  x[32] = 127;
  for_each_target([&](const simd::Target&) {
    cpu::QuantizedRows rows;
    cpu::quantize_activations(GgmlType::Q8_0, x.data(), 256, 1, 256, rows);
    EXPECT_EQ(rows.scale(0, 0), 1.0f);
    EXPECT_EQ(rows.quants(0, 0)[1], -3);  // -2.5
    EXPECT_EQ(rows.quants(0, 0)[2], -2);  // -1.5
    EXPECT_EQ(rows.quants(0, 0)[3], -1);  // -0.5
    EXPECT_EQ(rows.quants(0, 0)[4], 1);   // 0.5
    EXPECT_EQ(rows.quants(0, 0)[5], 2);   // 1.5
    EXPECT_EQ(rows.quants(0, 0)[6], 3);   // 2.5
    cpu::quantize_activations(GgmlType::Q4_K, x.data(), 256, 1, 256, rows);
    EXPECT_EQ(rows.scale(0, 0), -1.0f);
    EXPECT_EQ(rows.quants(0, 0)[0], -127);
    EXPECT_EQ(rows.quants(0, 0)[1], 2);   // 2.5
    EXPECT_EQ(rows.quants(0, 0)[2], 2);   // 1.5
    EXPECT_EQ(rows.quants(0, 0)[3], 0);   // 0.5
    EXPECT_EQ(rows.quants(0, 0)[4], 0);   // -0.5
    EXPECT_EQ(rows.quants(0, 0)[5], -2);  // -1.5
    EXPECT_EQ(rows.quants(0, 0)[6], -2);  // -2.5
    // A block of zeros: d = 0, no values, no sums.
    std::vector<float> zeros(256, 0.0f);
    cpu::quantize_activations(GgmlType::Q6_K, zeros.data(), 256, 1, 256, rows);
    EXPECT_EQ(rows.scale(0, 0), 0.0f);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(rows.sum(0, 0, j), 0);
  });
}

// quant_rows_int8 of w (n = 37 rows of `type`, k values, row_bytes apart) under every target,
// against the double-precision product of the dequantized weights with the activations as
// rounded, within `ulps` f32 ulps of the sum of |products|; and against quant_rows with the
// f32 activations, within the effect of the rounding: sum |w| * |x - rounded x| (the exact
// difference of the two products is sum w * (x - rounded x)), plus quant_rows' tolerance.
void check_int8(GgmlType type, const std::vector<std::byte>& w, int64_t row_bytes, int64_t k,
                uint32_t seed) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  constexpr int64_t n = 37, kMaxM = 16;
  const int64_t ldx = k + 7, ldo = n + 3;
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(kMaxM * ldx));
  std::uniform_real_distribution<float> value(-1, 1);
  for (float& v : x) v = value(rng);
  std::vector<double> dequantized(static_cast<size_t>(n * k));
  {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      quant::dequantize(
          type,
          {w.data() + r * row_bytes, static_cast<size_t>(k / t.block_elements * t.block_bytes)},
          row);
      std::copy(row.begin(), row.end(), dequantized.begin() + r * k);
    }
  }
  for_each_target([&](const simd::Target&) {
    const bool native = cpu::quant_rows_int8_native(type);
    SCOPED_TRACE(native ? "integer kernel" : "quant_rows on the rounded activations");
    for (int64_t m : {1, 2, 3, 4, 5, 8, 16}) {
      SCOPED_TRACE("m=" + std::to_string(m));
      cpu::QuantizedRows rows;
      cpu::quantize_activations(type, x.data(), ldx, m, k, rows);
      // The activations as rounded, exactly (a double holds every f32 d times an int8).
      std::vector<double> xr(static_cast<size_t>(m * k));
      const int64_t block = rows.block_elements();
      for (int64_t i = 0; i < m; ++i) {
        if (block == 1) {
          std::vector<float> v(static_cast<size_t>(k));
          rows.dequantize(i, v.data());
          std::copy(v.begin(), v.end(), xr.begin() + i * k);
          continue;
        }
        for (int64_t j = 0; j < k; ++j)
          xr[i * k + j] = double(rows.scale(i, j / block)) * rows.quants(i, j / block)[j % block];
      }
      const float unset = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> out(static_cast<size_t>(m * ldo), unset), f32(out);
      cpu::quant_rows_int8(type, rows, w.data(), row_bytes, n, k, out.data(), ldo);
      cpu::quant_rows(type, x.data(), ldx, m, w.data(), row_bytes, n, k, f32.data(), ldo);
      // The integer kernels round each block's sum and its scales, and sum k / 64 (blocks of
      // 32) or k / 256 (K-quants) terms in each lane, then 16 lanes; quant_rows rounds each
      // product and sums k / 16 of them in a lane.
      const double ulps = native ? 4 : static_cast<double>(k) / 16 + 8;
      int failures = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < n; ++r) {
          double want = 0, magnitude = 0, rounding = 0, f32_magnitude = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double wj = dequantized[r * k + j];
            want += wj * xr[i * k + j];
            magnitude += std::abs(wj * xr[i * k + j]);
            rounding += std::abs(wj) * std::abs(double(x[i * ldx + j]) - xr[i * k + j]);
            f32_magnitude += std::abs(wj * x[i * ldx + j]);
          }
          const float got = out[i * ldo + r];
          const double tolerance = ulps * FLT_EPSILON * magnitude;
          if (!(std::abs(got - want) <= tolerance) && ++failures <= 5)
            ADD_FAILURE() << "row " << i << ", weight row " << r << ": " << got << ", want " << want
                          << " (" << std::abs(got - want) / (FLT_EPSILON * magnitude)
                          << " ulps of the sum of |products| " << magnitude << ")";
          const double near = rounding + tolerance + 1e-4 * f32_magnitude;
          if (!(std::abs(double(got) - f32[i * ldo + r]) <= near) && ++failures <= 5)
            ADD_FAILURE() << "row " << i << ", weight row " << r << ": " << got << ", quant_rows "
                          << f32[i * ldo + r] << ", the rounding's bound " << near;
        }
        for (int64_t r = n; r < ldo; ++r)
          if (!std::isnan(out[i * ldo + r]) && ++failures <= 5)
            ADD_FAILURE() << "row " << i << ": wrote past n, at " << r;
      }
    }
  });
}

TEST(QuantRows, Int8MatchesRoundedProduct) {
  for (GgmlType type : kTypes) {
    for (int64_t k : {512, 256}) {
      SCOPED_TRACE(std::string(quant::name(type)) + " k=" + std::to_string(k));
      const quant::GgmlTypeInfo& t = quant::info(type);
      const auto seed = static_cast<uint32_t>(t.type) * 1000 + static_cast<uint32_t>(k) + 11;
      std::mt19937 rng(seed);
      {
        SCOPED_TRACE("quantized weights");
        const int64_t row_bytes = k / t.block_elements * t.block_bytes;
        check_int8(type, random_rows(type, 37, k, row_bytes, rng), row_bytes, k, seed);
      }
      if (quant::info(type).block_elements > 1) {
        SCOPED_TRACE("random blocks, rows with bytes between them");
        const int64_t row_bytes = k / t.block_elements * t.block_bytes + 6;
        check_int8(type, random_blocks(type, 37, k, row_bytes, rng), row_bytes, k, seed + 1);
      }
    }
  }
}

TEST(QuantRows, Int8OddNumbersOfBlocks) {
  // Blocks of 32 go two at a time: one, three and five blocks leave one alone.
  for (GgmlType type :
       {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    for (int64_t k : {32, 96, 160}) {
      SCOPED_TRACE(std::string(quant::name(type)) + " k=" + std::to_string(k));
      const quant::GgmlTypeInfo& t = quant::info(type);
      const int64_t row_bytes = k / 32 * t.block_bytes;
      std::mt19937 rng(static_cast<uint32_t>(k));
      check_int8(type, random_blocks(type, 37, k, row_bytes, rng), row_bytes, k, 5);
    }
  }
}

TEST(QuantRows, Int8KernelsOnEveryX86TargetWithAvx2) {
  for_each_target([](const simd::Target& t) {
#if defined(__x86_64__)
    // AVX-512 VNNI's kernels under the AVX-512 targets where the CPU has it, AVX2's otherwise.
    const bool native = t.name().starts_with("avx2") || t.name().starts_with("avx3");
#else
    const bool native = false;
#endif
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                          GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
      EXPECT_EQ(cpu::quant_rows_int8_native(type), native) << quant::name(type);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
      EXPECT_FALSE(cpu::quant_rows_int8_native(type)) << quant::name(type);
  });
}

// PRISM_CPU_QUANT_ROWS set to `kernel` while it lives (the integer kernels read it whenever
// they round activations).
class QuantRowsKernel {
 public:
  explicit QuantRowsKernel(const char* kernel) {
    if (const char* before = std::getenv("PRISM_CPU_QUANT_ROWS")) before_ = before;
    setenv("PRISM_CPU_QUANT_ROWS", kernel, 1);
  }
  ~QuantRowsKernel() {
    if (before_) {
      setenv("PRISM_CPU_QUANT_ROWS", before_->c_str(), 1);
    } else {
      unsetenv("PRISM_CPU_QUANT_ROWS");
    }
  }

 private:
  std::optional<std::string> before_;
};

// The formats the tiles take, and lengths of rows to try them on.
// and the fewest rows they take by default.
struct AmxCase {
  GgmlType type;
  std::vector<int64_t> ks;
  int64_t fewest;
};
const AmxCase kAmxCases[] = {{GgmlType::Q8_0, {512, 96, 32}, 5},
                             {GgmlType::Q4_0, {512, 96, 32}, 5},
                             {GgmlType::Q4_K, {512, 256, 1024}, 9}};

TEST(QuantRows, Int8OnAmxTiles) {
  if (!cpu::amx_int8_available()) GTEST_SKIP() << "no AMX-INT8 on this CPU or system";
  const QuantRowsKernel amx("amx");
  for (const AmxCase& c : kAmxCases) {
    const quant::GgmlTypeInfo& t = quant::info(c.type);
    for (int64_t k : c.ks) {
      SCOPED_TRACE(fmt::format("{} k={}", t.name, k));
      std::mt19937 rng(static_cast<uint32_t>(k) + 3);
      const int64_t row_bytes = k / t.block_elements * t.block_bytes;
      check_int8(c.type, random_rows(c.type, 37, k, row_bytes, rng), row_bytes, k, 9);
      check_int8(c.type, random_blocks(c.type, 37, k, row_bytes + 6, rng), row_bytes + 6, k, 10);
    }
    // Laid out for the tiles where the target is AVX3_DL, for 1-16 rows only; by default for
    // `fewest`-16.
    const int64_t k = t.block_elements == 256 ? 256 : 64;
    std::vector<float> x(static_cast<size_t>(17 * k), 0.5f);
    cpu::QuantizedRows rows;
    const bool dl = simd::current().name().starts_with("avx3_dl");
    for (int64_t m : {int64_t{1}, c.fewest - 1, c.fewest, int64_t{16}, int64_t{17}}) {
      cpu::quantize_activations(c.type, x.data(), k, m, k, rows);
      EXPECT_EQ(rows.amx().tiles != nullptr, dl && m <= 16) << "m=" << m;
      const QuantRowsKernel automatic("auto");
      cpu::quantize_activations(c.type, x.data(), k, m, k, rows);
      EXPECT_EQ(rows.amx().tiles != nullptr, dl && m >= c.fewest && m <= 16) << "auto, m=" << m;
    }
  }
}

// What batched decoding promises: a row's result does not depend on the rows it is computed
// with. Every count of rows, under each choice of kernels this CPU runs (auto: VNNI for up to
// 4 rows, the tiles for more), gives each row the bits it gets alone.
// Up to 16 rows, and more (a prefill's, whose chunks of 8 the AVX2 kernels take in bands of
// weight rows), rounded on one thread or on a pool.
TEST(QuantRows, Int8RowsDoNotDependOnTheirBatch) {
  std::vector<const char*> kernels = {"auto", "vnni"};
  if (cpu::amx_int8_available()) kernels.push_back("amx");
  cpu::ThreadPool pool(3);
  for (const char* kernel : kernels) {
    const QuantRowsKernel use(kernel);
    for (GgmlType type : kTypes) {
      SCOPED_TRACE(std::string(kernel) + " " + std::string(quant::name(type)));
      const quant::GgmlTypeInfo& t = quant::info(type);
      constexpr int64_t n = 37, k = 512, kMaxM = 45;
      const int64_t row_bytes = k / t.block_elements * t.block_bytes;
      std::mt19937 rng(static_cast<uint32_t>(t.type) + 17);
      const std::vector<std::byte> w = random_rows(type, n, k, row_bytes, rng);
      std::vector<float> x(static_cast<size_t>(kMaxM * k));
      std::uniform_real_distribution<float> value(-1, 1);
      for (float& v : x) v = value(rng);
      auto product = [&](int64_t first, int64_t m, cpu::ThreadPool* on) {
        cpu::QuantizedRows rows;
        cpu::quantize_activations(type, x.data() + first * k, k, m, k, rows, on);
        std::vector<float> out(static_cast<size_t>(m * n));
        cpu::quant_rows_int8(type, rows, w.data(), row_bytes, n, k, out.data(), n);
        return out;
      };
      std::vector<std::vector<float>> alone;
      for (int64_t i = 0; i < kMaxM; ++i) alone.push_back(product(i, 1, nullptr));
      for (int64_t m : {2, 3, 4, 5, 8, 9, 16, 17, 30, 45}) {
        for (cpu::ThreadPool* on : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
          const std::vector<float> batch = product(kMaxM - m, m, on);
          for (int64_t i = 0; i < m; ++i) {
            EXPECT_EQ(0, std::memcmp(batch.data() + i * n, alone[kMaxM - m + i].data(),
                                     n * sizeof(float)))
                << "row " << i << " of " << m << (on ? " (rounded on a pool)" : "");
          }
        }
      }
    }
  }
}

// The integer kernels' arithmetic for the formats whose block sums are exact (quant_rows.h),
// written out from ggml's block layouts: per block an integer T = the product of the weights'
// integer values (Q6_K's less 32, each 16 times its scale; the K-quants' each 32 times theirs)
// with the rounded activations, and for Q4_K and Q5_K M = sum_j min_j * (the activations' sum
// over sub-block j); then acc = fma(float(T), d_w * d_x, acc) and acc = fma(float(M), -dmin_w *
// d_x, acc), block after block. Row i of x against the weight row at w.
float exact_int8_product(GgmlType type, const std::byte* w, const cpu::QuantizedRows& x,
                         int64_t i) {
  const quant::GgmlTypeInfo& t = quant::info(type);
  const auto* u = reinterpret_cast<const uint8_t*>(w);
  auto f16 = [](const uint8_t* p) {
    return prism::f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8));
  };
  float acc = 0;
  for (int64_t b = 0; b < x.cols() / t.block_elements; ++b) {
    const uint8_t* p = u + b * t.block_bytes;
    const int8_t* q = x.quants(i, b);
    const float dx = x.scale(i, b);
    int64_t sum = 0, mins = 0;
    float d = 0, dmin = 0;
    switch (type) {
      case GgmlType::Q8_0:
        d = f16(p);
        for (int j = 0; j < 32; ++j) sum += int64_t{static_cast<int8_t>(p[2 + j])} * q[j];
        break;
      case GgmlType::Q4_0:
        d = f16(p);
        for (int j = 0; j < 32; ++j)
          sum += ((j < 16 ? p[2 + j] & 15 : p[2 + j - 16] >> 4) - 8) * q[j];
        break;
      case GgmlType::Q5_0: {
        d = f16(p);
        const uint32_t high = p[2] | p[3] << 8 | p[4] << 16 | uint32_t{p[5]} << 24;
        for (int j = 0; j < 32; ++j) {
          const int nibble = j < 16 ? p[6 + j] & 15 : p[6 + j - 16] >> 4;
          sum += ((nibble | static_cast<int>((high >> j) & 1) << 4) - 16) * q[j];
        }
        break;
      }
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: {
        const bool five = type == GgmlType::Q5_K;
        d = f16(p);
        dmin = f16(p + 2);
        const uint8_t* sc = p + 4;
        const uint8_t* qs = p + (five ? 48 : 16);
        for (int j = 0; j < 8; ++j) {
          // ggml's get_scale_min_k4
          const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
          const int min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
          int64_t block = 0, xs = 0;
          for (int l = 0; l < 32; ++l) {
            int v = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
            if (five) v |= ((p[16 + l] >> j) & 1) << 4;
            block += v * q[32 * j + l];
            xs += q[32 * j + l];
          }
          sum += scale * block;
          mins += min * xs;
        }
        break;
      }
      case GgmlType::Q6_K:
        d = f16(p + 208);
        for (int h = 0; h < 2; ++h) {
          for (int s = 0; s < 4; ++s) {
            for (int l = 0; l < 32; ++l) {
              const uint8_t low = p[64 * h + l + 32 * (s % 2)];
              const int v =
                  ((s < 2 ? low & 15 : low >> 4) | ((p[128 + 32 * h + l] >> (2 * s)) & 3) << 4) -
                  32;
              sum += int64_t{static_cast<int8_t>(p[192 + 8 * h + 2 * s + l / 16])} * v *
                     q[128 * h + 32 * s + l];
            }
          }
        }
        break;
      default:
        ADD_FAILURE() << "no exact sums for " << t.name;
    }
    acc = std::fma(static_cast<float>(sum), d * dx, acc);
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K)
      acc = std::fma(static_cast<float>(mins), -dmin * dx, acc);
  }
  return acc;
}

// Every integer kernel (AVX2's, VNNI's and, where it takes them, the tiles') gives those bits,
// so that a product may take any of them and a CPU's answer does not depend on which it has.
TEST(QuantRows, Int8ExactFormatsSumEachBlockExactly) {
  std::vector<const char*> kernels = {"auto"};
  if (cpu::amx_int8_available()) kernels.push_back("amx");
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K,
                        GgmlType::Q5_K, GgmlType::Q6_K}) {
    const quant::GgmlTypeInfo& t = quant::info(type);
    const int64_t e = t.block_elements;
    for (int64_t k : {e, 3 * e, int64_t{1024}}) {
      for (bool extreme : {false, true}) {
        SCOPED_TRACE(fmt::format("{} k={}{}", t.name, k, extreme ? " random bytes" : ""));
        constexpr int64_t n = 37;
        const int64_t row_bytes = k / t.block_elements * t.block_bytes;
        std::mt19937 rng(static_cast<uint32_t>(k) + 41);
        const std::vector<std::byte> w = extreme ? random_blocks(type, n, k, row_bytes, rng)
                                                 : random_rows(type, n, k, row_bytes, rng);
        std::vector<float> x(static_cast<size_t>(40 * k));
        std::uniform_real_distribution<float> value(-1, 1);
        for (float& v : x) v = value(rng);
        for_each_target([&](const simd::Target& target) {
          if (!cpu::quant_rows_int8_native(type)) return;
          for (const char* kernel : kernels) {
            const QuantRowsKernel use(kernel);
            for (int64_t m : {1, 3, 8, 11, 16, 40}) {  // 40: a prefill's many rows
              SCOPED_TRACE(fmt::format("{} {} m={}", target.name(), kernel, m));
              cpu::QuantizedRows rows;
              cpu::quantize_activations(type, x.data(), k, m, k, rows);
              std::vector<float> out(static_cast<size_t>(m * n));
              cpu::quant_rows_int8(type, rows, w.data(), row_bytes, n, k, out.data(), n);
              int failures = 0;
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t r = 0; r < n; ++r) {
                  const float want = exact_int8_product(type, w.data() + r * row_bytes, rows, i);
                  const float got = out[i * n + r];
                  if (bits_of(got) != bits_of(want) && ++failures <= 5)
                    ADD_FAILURE() << "row " << i << ", weight row " << r << ": " << got << ", want "
                                  << want;
                }
              }
            }
          }
        });
      }
    }
  }
}

// VNNI's kernels for the formats without a minimum sum each block exactly and scale it as the
// tiles do, so the two give the same bits: a product may take either by its number of rows.
TEST(QuantRows, Int8VnniAndAmxAgreeBitForBit) {
  if (!cpu::amx_int8_available()) GTEST_SKIP() << "no AMX-INT8 on this CPU or system";
  for (const AmxCase& c : kAmxCases) {
    const quant::GgmlTypeInfo& t = quant::info(c.type);
    for (int64_t k : c.ks) {
      for (bool extreme : {false, true}) {
        SCOPED_TRACE(fmt::format("{} k={}{}", t.name, k, extreme ? " random bytes" : ""));
        constexpr int64_t n = 37;
        const int64_t row_bytes = k / t.block_elements * t.block_bytes;
        std::mt19937 rng(static_cast<uint32_t>(k) + 29);
        const std::vector<std::byte> w = extreme ? random_blocks(c.type, n, k, row_bytes, rng)
                                                 : random_rows(c.type, n, k, row_bytes, rng);
        std::vector<float> x(static_cast<size_t>(16 * k));
        std::uniform_real_distribution<float> value(-1, 1);
        for (float& v : x) v = value(rng);
        for (int64_t m : {1, 2, 3, 4, 7, 16}) {
          std::vector<float> out[2];
          for (int kernel = 0; kernel < 2; ++kernel) {
            const QuantRowsKernel use(kernel == 0 ? "vnni" : "amx");
            cpu::QuantizedRows rows;
            cpu::quantize_activations(c.type, x.data(), k, m, k, rows);
            out[kernel].assign(static_cast<size_t>(m * n), 0.0f);
            cpu::quant_rows_int8(c.type, rows, w.data(), row_bytes, n, k, out[kernel].data(), n);
          }
          EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)))
              << "m=" << m;
        }
      }
    }
  }
}

// Q4_0, Q8_0, Q4_K, Q5_K and Q6_K weights kept with the blocks of each 16 rows interleaved
// (weight_layout.h):
// the layout holds every byte where interleaved_index says and copies back to the bytes as
// stored, and quant_rows_int8_interleaved gives quant_rows_int8's bits on the stored weights
// for any range of weight rows (whole groups of 16, parts of one, parts of two) and any number
// of activation rows (one tile of up to 8, several, a band of 64 and more), with one, an odd
// number and many blocks a row. On CPUs with AMX-INT8, whose tiles read the weights as stored,
// the VNNI kernels are forced so that these kernels are tested there too.
TEST(QuantRows, Int8InterleavedWeightsGiveTheStoredBits) {
  const testing::ScopedEnv vnni("PRISM_CPU_QUANT_ROWS", "vnni");
  cpu::ThreadPool pool(2);
  int tested = 0;
  for (GgmlType type :
       {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    if (!cpu::quant_rows_int8_interleaved_native(type)) continue;
    ++tested;
    const quant::GgmlTypeInfo& t = quant::info(type);
    for (int64_t blocks : {1, 3, 16}) {
      const int64_t k = blocks * t.block_elements;
      SCOPED_TRACE(fmt::format("{} k={}", t.name, k));
      constexpr int64_t n = 112;  // 7 groups: one row reads 4 or more as streams
      const int64_t row_bytes = blocks * t.block_bytes;
      std::mt19937 rng(static_cast<uint32_t>(k) + 41);
      const std::vector<std::byte> w = random_blocks(type, n, k, row_bytes, rng);
      const cpu::WeightLayout layout = *cpu::interleaved_layout(type);
      std::vector<std::byte> kept(w.size()), back(w.size());
      cpu::copy_weights(layout, w.data(), kept.data(), n, row_bytes, true, pool);
      int misplaced = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < row_bytes; ++j) {
          if (kept[cpu::interleaved_index(r, j, row_bytes, type)] != w[r * row_bytes + j])
            ++misplaced;
        }
      }
      EXPECT_EQ(misplaced, 0);
      cpu::copy_weights(layout, kept.data(), back.data(), n, row_bytes, false, pool);
      EXPECT_TRUE(back == w);
      std::vector<float> x(static_cast<size_t>(70 * k));
      std::uniform_real_distribution<float> value(-1, 1);
      for (float& v : x) v = value(rng);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 70}) {
        cpu::QuantizedRows rows;
        cpu::quantize_activations(type, x.data(), k, m, k, rows);
        std::vector<float> want(static_cast<size_t>(m * n));
        cpu::quant_rows_int8(type, rows, w.data(), row_bytes, n, k, want.data(), n);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 112},
                              {16, 32},
                              {5, 37},
                              {16, 80},
                              {5, 109},
                              {111, 112}}) {
          SCOPED_TRACE(fmt::format("m={} rows [{}, {})", m, r0, r1));
          const int64_t ldo = r1 - r0 + 3;
          std::vector<float> got(static_cast<size_t>(m * ldo), NAN);
          cpu::quant_rows_int8_interleaved(type, rows, kept.data(), row_bytes, r0, r1, k,
                                           got.data(), ldo);
          int differ = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = r0; r < r1; ++r) {
              const float a = got[i * ldo + r - r0], b = want[i * n + r];
              if (std::memcmp(&a, &b, sizeof a) != 0 && ++differ <= 3)
                ADD_FAILURE() << "row " << i << ", weight row " << r << ": " << a << ", want " << b;
            }
            for (int64_t r = r1 - r0; r < ldo; ++r)
              if (!std::isnan(got[i * ldo + r]) && ++differ <= 3)
                ADD_FAILURE() << "row " << i << ": wrote past the range, at " << r;
          }
        }
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no kernels for interleaved weights here (AVX2 or VNNI)";
}

TEST(QuantRows, Int8InterleavedRefusesWhatItCannotRead) {
  const testing::ScopedEnv vnni("PRISM_CPU_QUANT_ROWS", "vnni");  // as above
  std::vector<float> x(64, 1.0f), out(16);
  std::vector<std::byte> w(16 * 36);
  cpu::QuantizedRows rows;
  cpu::quantize_activations(GgmlType::Q4_0, x.data(), 64, 1, 64, rows);
  auto error = [&](GgmlType type, int64_t row_bytes, int64_t r0, int64_t r1, int64_t k) {
    return testing::error_of([&] {
      cpu::quant_rows_int8_interleaved(type, rows, w.data(), row_bytes, r0, r1, k, out.data(), 16);
    });
  };
  EXPECT_EQ(error(GgmlType::Q4_1, 40, 0, 16, 64),
            "quant_rows_int8_interleaved: no kernel for Q4_1 weights kept interleaved here");
  EXPECT_FALSE(cpu::quant_rows_int8_interleaved_native(GgmlType::Q4_1));
  if (!cpu::quant_rows_int8_interleaved_native(GgmlType::Q4_0)) {
    EXPECT_EQ(error(GgmlType::Q4_0, 36, 0, 16, 64),
              "quant_rows_int8_interleaved: no kernel for Q4_0 weights kept interleaved here");
    return;
  }
  EXPECT_EQ(error(GgmlType::Q8_0, 68, 0, 16, 64),
            cpu::quant_rows_int8_interleaved_native(GgmlType::Q8_0)
                ? "quant_rows_int8_interleaved: activations rounded for Q4_0 x 64 values, not "
                  "Q8_0 x 64"
                : "quant_rows_int8_interleaved: no kernel for Q8_0 weights kept interleaved here");
  EXPECT_EQ(error(GgmlType::Q4_0, 40, 0, 16, 64),
            "quant_rows_int8_interleaved: rows of 40 bytes do not hold 64 Q4_0 values");
  EXPECT_EQ(error(GgmlType::Q4_0, 36, 8, 4, 64),
            "quant_rows_int8_interleaved: bad sizes m=1 rows [8, 4) ldo=16");
}

// The AVX2 kernels' lane tiles take the K-quants' chunks of 5-8 rows from a copy of the rows
// quantize_activations lays out for them: made for Q8_K rows, 5 or more, under the AVX2 target
// (whose integer kernels are the AVX2 ones), and for nothing else. Int8RowsDoNotDependOnTheirBatch
// and Int8ExactFormatsSumEachBlockExactly check that the tiles give the other kernels' bits.
TEST(QuantRows, Int8LanesWhereTheAvx2KernelsTakeThem) {
  for_each_target([](const simd::Target& target) {
    const bool avx2 = target.name().starts_with("avx2");
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q8_0}) {
      const bool k_quant = quant::info(type).block_elements == 256;
      for (int64_t m : {1, 4, 5, 8, 16}) {
        SCOPED_TRACE(fmt::format("{} {} m={}", target.name(), quant::name(type), m));
        const int64_t k = 512;
        std::vector<float> x(static_cast<size_t>(m * k), 0.25f);
        cpu::QuantizedRows rows;
        cpu::quantize_activations(type, x.data(), k, m, k, rows);
        EXPECT_EQ(rows.int8_lanes() != nullptr,
                  avx2 && k_quant && m >= 5 && cpu::quant_rows_int8_native(type));
      }
    }
  });
}

TEST(QuantRows, Int8RefusesAnUnknownKernel) {
  const QuantRowsKernel bogus("fast");
  std::vector<float> x(64, 1.0f);
  cpu::QuantizedRows rows;
  EXPECT_THROW(cpu::quantize_activations(GgmlType::Q8_0, x.data(), 64, 1, 64, rows), Error);
}

TEST(QuantRows, Int8RefusesWhatItCannotRead) {
  std::vector<float> x(512, 1.0f), out(4);
  std::vector<std::byte> w(4096);
  cpu::QuantizedRows rows;
  EXPECT_THROW(cpu::quantize_activations(GgmlType::IQ2_XXS, x.data(), 256, 1, 256, rows), Error);
  EXPECT_THROW(cpu::quantize_activations(GgmlType::Q4_K, x.data(), 128, 1, 128, rows), Error);
  cpu::quantize_activations(GgmlType::Q4_K, x.data(), 512, 1, 512, rows);
  // Rounded for another type, or another k.
  EXPECT_THROW(cpu::quant_rows_int8(GgmlType::Q6_K, rows, w.data(), 420, 1, 512, out.data(), 4),
               Error);
  EXPECT_THROW(cpu::quant_rows_int8(GgmlType::Q4_K, rows, w.data(), 144, 1, 256, out.data(), 4),
               Error);
  // Plain rows hold no quantized values.
  cpu::quantize_activations(GgmlType::F16, x.data(), 512, 1, 512, rows);
  EXPECT_THROW(rows.quants(0, 0), Error);
}

}  // namespace
}  // namespace prism
