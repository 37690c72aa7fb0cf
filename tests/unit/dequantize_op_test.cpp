// The dequantize op (weights kept in ggml's block formats) on the CPU: its values equal
// prism::quant::dequantize's (bit for bit the `gguf` package's, gguf_test.cpp) in the graph's
// decomposition too, products read the blocks for every number of activation rows, the
// executable keeps no dequantized copy of the weights, and an embedding lookup in a quantized
// table dequantizes only the rows it picks. backend_ops_test.cpp compares the other platforms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/compiler/passes.h"
#include "prism/quant/dequantize.h"
#include "prism/quant/quantize.h"
#include "tests/unit/platforms.h"
#include "tests/unit/quant_blocks.h"

namespace prism {
namespace {

using quant::GgmlType;
using testing::error_of;
using testing::S;

const GgmlType kFormats[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                             GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The reference: every row of `blocks` through prism::quant::dequantize.
std::vector<float> reference(GgmlType t, const HostBuffer& blocks) {
  const quant::GgmlTypeInfo& info = quant::info(t);
  const int64_t bytes = blocks.shape().numel();
  std::vector<float> out(static_cast<size_t>(bytes / info.block_bytes * info.block_elements));
  quant::dequantize(t, blocks.bytes(), out);
  return out;
}

class DequantizeOp : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantizeOp, EqualsTheReferenceBitForBit) {
  const GgmlType t = GetParam();
  const HostBuffer blocks = testing::random_blocks(t, 5, 2, 7);
  const std::vector<float> want = reference(t, blocks);
  for (const char* platform : {"cpu", "cpu-decomposed"}) {
    SCOPED_TRACE(platform);
    testing::DecomposingCpu decomposed;
    Platform& p = std::string_view(platform) == "cpu" ? get_platform("cpu")
                                                      : static_cast<Platform&>(decomposed);
    auto fn = [t](std::span<const Tensor> in) {
      return std::vector<Tensor>{in[0].dequantize(t, DType::f32)};
    };
    const HostBuffer got = run(TraceFn(fn), std::span(&blocks, 1), &p)[0];
    ASSERT_EQ(got.shape().numel(), static_cast<int64_t>(want.size()));
    const std::span<const float> values = got.as<float>();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::memcmp(&values[i], &want[i], 4), 0)
          << "value " << i << ": " << values[i] << " vs " << want[i];
    }
  }
}

// x {m, k} . dequantize(w {n, bytes}) on the CPU against the float product of the reference's
// values, in double, with the activations as the CPU's products take them: in f32, or, in
// `mode` int8 for up to 16 rows where the CPU has the integer kernels, rounded to ggml's 8-bit
// blocks (cpu::quantize_activations, which quant_rows_test.cpp checks against ggml's rounding).
void check_products(GgmlType t, int64_t n, int64_t blocks, std::initializer_list<int64_t> rows,
                    const char* mode) {
  const testing::QuantActivations activations(mode);
  const int64_t k = blocks * quant::info(t).block_elements;
  const HostBuffer w = testing::random_blocks(t, n, blocks, 11, "n", "k");
  const std::vector<float> wf = reference(t, w);
  Platform& cpu = get_platform("cpu");
  for (int64_t m : rows) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE("m=" + std::to_string(m) + " " + std::string(name(dt)) + " " + mode);
      std::vector<float> xv(static_cast<size_t>(m * k));
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37 * i) * 0.5f;
      const HostBuffer x = testing::f32(S({{"m", m}, {"k", k}}), xv).convert(dt);
      const HostBuffer x32 = x.convert(DType::f32);  // as rounded to dt
      std::vector<float> xs(x32.as<float>().begin(), x32.as<float>().end());
      const bool int8 =
          std::string_view(mode) == "int8" && m <= 16 && cpu::quant_rows_int8_native(t);
      if (int8) {  // as the integer kernels see them
        cpu::QuantizedRows rounded;
        cpu::quantize_activations(t, xs.data(), k, m, k, rounded);
        for (int64_t i = 0; i < m; ++i) rounded.dequantize(i, xs.data() + i * k);
      }
      // A fresh executable: the mode is read as products are compiled.
      Executable exe = prism::compile(
          cpu,
          [&](Tensor a, Tensor b) { return a.dot(b.dequantize(t, dt), "k").convert(DType::f32); },
          {x.shape(), w.shape()});
      std::vector<Buffer> in{cpu.upload(x), cpu.upload(w)};
      const HostBuffer out = exe.call(std::span<const Buffer>(), in)[0].to_host();
      const std::span<const float> got = out.as<float>();
      ASSERT_EQ(got.size(), static_cast<size_t>(m * n));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < n; ++r) {
          double want = 0, scale = 0;
          for (int64_t j = 0; j < k; ++j) {
            // bf16 products multiply weights rounded to bf16
            float wv = wf[r * k + j];
            if (dt == DType::bf16 && !int8) wv = bf16_to_f32(f32_to_bf16(wv));
            want += double(xs[i * k + j]) * wv;
            scale += std::abs(double(xs[i * k + j]) * wv);
          }
          const double tol = (dt == DType::bf16 ? 1e-2 : 1e-5) * scale + 1e-5;
          ASSERT_NEAR(got[i * n + r], want, tol) << "row " << i << ", column " << r;
        }
      }
    }
  }
}

// Decoding (1 row), batched decoding (up to 16) and prefill (more: panels of weight rows).
TEST_P(DequantizeOp, ProductsReadTheBlocks) {
  const GgmlType t = GetParam();
  const int64_t blocks = quant::info(t).block_elements == 32 ? 8 : 1;
  check_products(t, 320, blocks, {1, 3, 16, 17, 40}, "f32");
  check_products(t, 320, blocks, {1, 3, 16}, "int8");
}

INSTANTIATE_TEST_SUITE_P(Formats, DequantizeOp, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(quant::name(info.param)); });

// A prefill over more weight rows than a panel holds (1024): whole panels, then a last one.
TEST(DequantizeOp, ProductsOverSeveralPanels) {
  check_products(GgmlType::Q4_0, 2 * 1024 + 64, 8, {20}, "f32");
  check_products(GgmlType::Q8_0, 1024 + 37, 8, {20}, "int8");  // prefill: f32 all the same
}

// A prompt's product of x {m, k} (cos(step * i), rounded to bf16) by dequantize(w) in bf16,
// w {n, k} of random blocks of `t`: the blocks, their values rounded to bf16, x and the
// product the CPU gives.
struct QuantPrompt {
  HostBuffer w, dequantized, x, product;
};
QuantPrompt quant_prompt(GgmlType t, int64_t n, int64_t m, int64_t blocks, uint32_t seed,
                         double step) {
  const int64_t k = blocks * quant::info(t).block_elements;
  QuantPrompt p;
  p.w = testing::random_blocks(t, n, blocks, seed, "n", "k");
  p.dequantized = testing::f32(S({{"n", n}, {"k", k}}), reference(t, p.w)).convert(DType::bf16);
  std::vector<float> xv(static_cast<size_t>(m * k));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(step * i);
  p.x = testing::f32(S({{"m", m}, {"k", k}}), xv).convert(DType::bf16);
  p.product = run(TraceFn([t](std::span<const Tensor> in) {
                    return std::vector<Tensor>{in[0].dot(in[1].dequantize(t, DType::bf16), "k")};
                  }),
                  std::vector<HostBuffer>{p.x, p.w}, &get_platform("cpu"))[0];
  return p;
}

// A prefill's product over quantized weights (panels of weight rows dequantized to bf16, then
// multiplied) gives the bits of the same bf16 product over the whole dequantized matrix where
// bf16 products run on f32 FMAs: the panels take gemm.h's products, whose sums do not depend
// on the columns.
TEST(DequantizeOp, PanelsGiveTheBitsOfTheDequantizedProduct) {
  if (cpu::bf16_products().path != cpu::Bf16Products::fma) {
    GTEST_SKIP() << "bf16 products go to oneDNN on this CPU, whose sums need not keep their bits "
                    "from one width of columns to another";
  }
  const testing::QuantActivations f32_activations("f32");  // every format through the panels
  Platform& cpu = get_platform("cpu");
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
    SCOPED_TRACE(quant::info(t).name);
    const QuantPrompt p = quant_prompt(t, 1024 + 96, 20, t == GgmlType::Q8_0 ? 24 : 3, 5, 0.21);
    const HostBuffer plain = run(TraceFn([](std::span<const Tensor> in) {
                                   return std::vector<Tensor>{in[0].dot(in[1], "k")};
                                 }),
                                 std::vector<HostBuffer>{p.x, p.dequantized}, &cpu)[0];
    ASSERT_EQ(p.product.shape().bytes(), plain.shape().bytes());
    EXPECT_EQ(std::memcmp(p.product.bytes().data(), plain.bytes().data(), plain.shape().bytes()),
              0);
  }
}

// Where a prompt's bf16 products run on prism's AMX tiles, the quantized weights are
// dequantized into blocks of 64 rows a piece at a time and multiplied by amx_gemm_blocked: the
// bits of that kernel over the whole dequantized matrix, blocked (its sums of a column do not
// depend on the blocks multiplied with it). Depths of several pieces of 256 values, and one
// (2080) of pieces of 32 and two parts of amx_gemm_blocked's; 5 blocks of rows (a thread's
// unit is up to 4).
TEST(DequantizeOp, PromptProductsOnAmxTilesGiveTheTilesBits) {
  if (!cpu::amx_gemm_available() || !cpu::bf16_tile_products().tiles)
    GTEST_SKIP() << "a prompt's bf16 products do not run on prism's AMX tiles here";
  const testing::QuantActivations f32_activations("f32");  // every format through the tiles
  const std::pair<GgmlType, int64_t> cases[] = {
      {GgmlType::Q4_0, 16}, {GgmlType::Q8_0, 65}, {GgmlType::Q4_K, 2}, {GgmlType::Q6_K, 3}};
  for (const auto& [t, blocks] : cases) {
    SCOPED_TRACE(quant::info(t).name);
    const int64_t n = 5 * cpu::kWeightBlockRows, m = 40;
    const int64_t k = blocks * quant::info(t).block_elements;
    const QuantPrompt p = quant_prompt(t, n, m, blocks, 9, 0.13);
    // The kernel by hand: the dequantized weights blocked, the activations packed.
    const auto* wv = reinterpret_cast<const uint16_t*>(p.dequantized.bytes().data());
    cpu::AlignedBuffer<uint16_t> blocked(n * k), packed(cpu::amx_gemm_packed_values(m, k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) blocked.data()[cpu::blocked_index(r, c, k)] = wv[r * k + c];
    const int64_t padded = cpu::amx_gemm_packed_values(m, k) / k;
    cpu::pack_rows_for_amx_gemm(reinterpret_cast<const uint16_t*>(p.x.bytes().data()), k, m, k, 0,
                                padded, packed.data());
    std::vector<uint16_t> want(static_cast<size_t>(m * n));
    cpu::amx_gemm_blocked(packed.data(), m, k, blocked.data(), n / cpu::kWeightBlockRows,
                          want.data(), n);
    ASSERT_EQ(p.product.shape().bytes(), static_cast<int64_t>(want.size() * 2));
    EXPECT_EQ(std::memcmp(p.product.bytes().data(), want.data(), want.size() * 2), 0);
  }
}

// The executable reads the blocks: a folded dequantize has no memory of its own (the arena
// holds no copy of the weights), and a lookup in a quantized table dequantizes the rows it
// picks (simplify moves the gather before the dequantize).
TEST(DequantizeOp, KeepsNoDequantizedCopy) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  const GgmlType t = GgmlType::Q8_0;
  const HostBuffer table = testing::random_blocks(t, 64, 8, 3, "voc", "d");  // 64 x 256
  auto fn = [t](std::span<const Tensor> in) {
    Tensor weights = in[0].dequantize(t, DType::f32);
    Tensor x = weights.gather("voc", in[1]);                              // {s, d}
    return std::vector<Tensor>{x.dot(weights, "d").convert(DType::f32)};  // {s, voc}
  };
  const HostBuffer ids = HostBuffer::from<int32_t>(S({{"s", 2}}).with_dtype(DType::i32), {5, 60});
  const Shape shapes[] = {table.shape(), ids.shape()};
  const ir::Graph g = compiler::simplify(trace(fn, shapes));
  int dequantizes = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::dequantize) continue;
    ++dequantizes;
    // the lookup's dequantizes two rows of blocks; the product's reads the whole table
    const int64_t rows = n.shape.size(0);
    EXPECT_TRUE(rows == 2 || rows == 64) << n.shape.str();
  }
  EXPECT_EQ(dequantizes, 2);
  const HostBuffer out = run(TraceFn(fn), {table, ids})[0];
  const std::span<const float> got = out.as<float>();
  const std::vector<float> wf = reference(t, table);
  for (int s = 0; s < 2; ++s) {
    const int row = s == 0 ? 5 : 60;
    for (int v = 0; v < 64; ++v) {
      double want = 0, scale = 0;
      for (int j = 0; j < 256; ++j) {
        want += double(wf[row * 256 + j]) * wf[v * 256 + j];
        scale += std::abs(double(wf[row * 256 + j]) * wf[v * 256 + j]);
      }
      EXPECT_NEAR(got[s * 64 + v], want, 1e-5 * scale + 1e-5);
    }
  }
}

// Products of one x by several quantized parameter weights (a layer's q, k and v) run as one
// step, the activations rounded once per weights' format: each product's values are those of
// the product alone, bit for bit, for each of `rows` rows of x in `dtype`, under each mode of
// the activations.
void check_one_step(DType dtype, const int64_t (&widths)[3], int64_t k,
                    std::initializer_list<int64_t> rows) {
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K};
  Platform& cpu = get_platform("cpu");
  std::vector<Tensor> params;
  std::map<std::string, Buffer, std::less<>> bound;
  for (size_t p = 0; p < 3; ++p) {
    const int64_t blocks = k / quant::info(types[p]).block_elements;
    const HostBuffer w = testing::random_blocks(types[p], widths[p], blocks, 13 + p, "n", "k");
    const std::string name = fmt::format("w{}", p);
    params.push_back(Tensor::parameter(name, w.shape()));
    bound.emplace(name, cpu.upload(w));
  }
  for (const char* mode : {"int8", "f32"}) {
    const testing::QuantActivations activations(mode);
    for (int64_t m : rows) {
      SCOPED_TRACE(fmt::format("{} {} m={}", name(dtype), mode, m));
      std::vector<float> xv(static_cast<size_t>(m * k));
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.29 * i) * 0.7f;
      const HostBuffer x = testing::f32(S({{"m", m}, {"k", k}}), xv).convert(dtype);
      std::vector<Buffer> in{cpu.upload(x)};
      auto product = [&](Tensor a, size_t p) {
        return a.dot(params[p].dequantize(types[p], dtype), "k");
      };
      Executable together =
          prism::compile(cpu,
                         [&](Tensor a) {
                           return std::vector<Tensor>{product(a, 0), product(a, 1), product(a, 2)};
                         },
                         {x.shape()});
      const std::vector<Buffer> got = together.call(bound, in);
      for (size_t p = 0; p < 3; ++p) {
        Executable alone = prism::compile(
            cpu, [&](Tensor a) { return std::vector<Tensor>{product(a, p)}; }, {x.shape()});
        const HostBuffer want = alone.call(bound, in)[0].to_host();
        const HostBuffer have = got[p].to_host();
        ASSERT_EQ(have.bytes().size(), want.bytes().size());
        EXPECT_EQ(0, std::memcmp(have.bytes().data(), want.bytes().data(), want.bytes().size()))
            << "product " << p;
      }
    }
  }
}

// Decoding, batches (VNNI and AMX tiles where present) and prefill, in f32.
TEST(DequantizeOp, ProductsOfTheSameActivationsAsOneStep) {
  check_one_step(DType::f32, {48, 21, 35}, 256, {1, 5, 16, 20, 40});
}

// A prompt's bf16 products of whole blocks of 64 weight rows: on prism's AMX tiles where they
// take bf16 prompts (one loop over all the products' units of blocks, 1 to 5 blocks each).
TEST(DequantizeOp, PromptProductsOfTheSameActivationsAsOneStep) {
  check_one_step(DType::bf16, {192, 64, 320}, 512, {17, 40});
}

// A product's bf16 results are its f32 results rounded, however the row kernels' columns were
// split among the threads and into cache-sized tiles of f32 (16 rows of 33000 columns; 600
// rows where the integer kernels take a prefill, as on CPUs with AVX2 but not AVX-512 VNNI).
TEST(DequantizeOp, Bf16ResultsAreTheF32ResultsRounded) {
  Platform& cpu = get_platform("cpu");
  const int64_t k = 256;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0}) {
    for (auto [m, n] : {std::pair<int64_t, int64_t>{16, 33000}, {600, 4100}}) {
      // more rows go to float products of dequantized panels, whose bf16 products round the
      // weights too
      if (m > 16 && !cpu::quant_rows_int8_takes_many_rows(t)) continue;
      SCOPED_TRACE(fmt::format("{} m={} n={}", quant::name(t), m, n));
      const HostBuffer w =
          testing::random_blocks(t, n, k / quant::info(t).block_elements, 5, "n", "k");
      std::vector<float> xv(static_cast<size_t>(m * k));
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.31 * i) * 0.6f;
      const HostBuffer x16 = testing::f32(S({{"m", m}, {"k", k}}), xv).convert(DType::bf16);
      const HostBuffer x32 = x16.convert(DType::f32);  // the same values
      auto product = [&](const HostBuffer& x, DType dt) {
        Executable exe =
            prism::compile(cpu,
                           [&](Tensor a, Tensor b) {
                             return a.dot(b.dequantize(t, dt), "k").convert(DType::bf16);
                           },
                           {x.shape(), w.shape()});
        std::vector<Buffer> in{cpu.upload(x), cpu.upload(w)};
        return exe.call(std::span<const Buffer>(), in)[0].to_host();
      };
      const HostBuffer half = product(x16, DType::bf16), rounded = product(x32, DType::f32);
      ASSERT_EQ(half.bytes().size(), static_cast<size_t>(m * n * 2));
      const auto* a = reinterpret_cast<const uint16_t*>(half.bytes().data());
      const auto* b = reinterpret_cast<const uint16_t*>(rounded.bytes().data());
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(a[i], b[i]) << "row " << i / n << ", column " << i % n;
      }
    }
  }
}

TEST(DequantizeOp, BadOperandsAreOneError) {
  auto traced = [](GgmlType t, Shape s, DType to = DType::f32) {
    const Shape shapes[] = {s};
    return error_of([&] {
      trace(
          [&](std::span<const Tensor> in) { return std::vector<Tensor>{in[0].dequantize(t, to)}; },
          shapes);
    });
  };
  const Shape rows = S({{"r", 2}, {"b", 34}}, DType::u8);
  EXPECT_EQ(traced(GgmlType::Q8_0, S({{"r", 2}, {"b", 35}}, DType::u8)),
            "dequantize: 35 bytes along \"b\" of u8{r=2,b=35} are not whole Q8_0 blocks of 34 "
            "bytes");
  EXPECT_EQ(traced(GgmlType::Q8_0, S({{"r", 2}, {"b", 34}})),
            "dequantize: needs bytes (u8) with the blocks along the last tag, got f32{r=2,b=34}");
  EXPECT_NE(traced(GgmlType::F16, rows).find("F16 is not a block format"), std::string::npos);
  EXPECT_NE(traced(GgmlType::IQ2_XXS, rows).find("IQ2_XXS is not a block format"),
            std::string::npos);
  EXPECT_EQ(traced(GgmlType::Q8_0, rows, DType::i32),
            "dequantize: to i32, not a floating-point dtype");
}

}  // namespace
}  // namespace prism
