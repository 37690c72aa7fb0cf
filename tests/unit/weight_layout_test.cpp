// Weights of products kept blocked by the CPU executable (prism/backends/cpu/weight_layout.h):
// prepare returns blocked copies and changes nothing it was given, the products give the same
// results from either layout, whoever else reads the weights sees them as stored (while
// products read them on another thread), and a mapped file's weights stay as they are.
#include "prism/backends/cpu/weight_layout.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/registry.h"
#include "prism/quant/dequantize.h"
#include "prism/quant/quantize.h"
#include "prism/runtime/compile.h"
#include "tests/unit/quant_blocks.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::expect_values;
using testing::f32;
using testing::S;

using Params = std::map<std::string, Buffer, std::less<>>;

// x {m, k} by the weights "a" {n = 192, k} and "b" {n = 64, k}, both stored {n, k} in bf16 (one
// step for the two: the same x), and by "c" {n = 64, k}, whose weights the executable also
// adds to themselves when `c_elementwise` (so it cannot keep them blocked). Small integers and
// halves: every sum is exact in f32 and rounded once to bf16.
struct Case {
  static constexpr int64_t K = 96;
  const std::vector<int64_t> widths = {192, 64, 64};
  std::vector<std::vector<float>> w;

  Case() {
    for (size_t p = 0; p < widths.size(); ++p) {
      std::vector<float>& v = w.emplace_back(widths[p] * K);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float((i + 3 * p) % 11) - 5;
    }
  }

  static std::string name(size_t p) { return std::string(1, static_cast<char>('a' + p)); }
  Shape shape(size_t p) const { return S({{"n", widths[p]}, {"k", K}}, DType::bf16); }
  HostBuffer host(size_t p) const {
    return f32(shape(p).with_dtype(DType::f32), w[p]).convert(DType::bf16);
  }

  Executable compile(Platform& cpu, int64_t m, bool c_elementwise) const {
    std::vector<Tensor> params;
    for (size_t p = 0; p < widths.size(); ++p)
      params.push_back(Tensor::parameter(name(p), shape(p)));
    return prism::compile(cpu,
                          [&](Tensor x) {
                            Tensor xt = x.convert(DType::bf16);
                            std::vector<Tensor> out{xt.dot(params[0], "k"), xt.dot(params[1], "k"),
                                                    xt.dot(params[2], "k")};
                            if (c_elementwise) out.push_back(params[2] + params[2]);
                            return out;
                          },
                          {S({{"m", m}, {"k", K}})});
  }

  std::vector<float> x(int64_t m) const {
    std::vector<float> a(m * K);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (float(i % 7) - 3) * 0.5f;
    return a;
  }

  // Runs `exe` on m rows and checks every product (and c + c where it is an output).
  void check(Platform& cpu, const Executable& exe, const Params& bound, int64_t m) const {
    const std::vector<float> a = x(m);
    std::vector<Buffer> in{cpu.upload(f32(S({{"m", m}, {"k", K}}), a))};
    std::vector<Buffer> got = exe.call(bound, in);
    for (size_t p = 0; p < widths.size(); ++p) {
      SCOPED_TRACE(name(p));
      const int64_t N = widths[p];
      std::vector<double> want(m * N, 0);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k) want[r * N + n] += double(a[r * K + k]) * w[p][n * K + k];
      expect_values(got[p].to_host(), want, 1.0 / 256);
    }
    if (got.size() > widths.size()) {
      std::vector<double> twice;
      for (float v : w[2]) twice.push_back(2.0 * v);
      expect_values(got.back().to_host(), twice, 0);
    }
  }
};

bool blocked(const Buffer& b) { return cpu::blocked_memory(b); }

Params upload(Platform& cpu, const Case& c) {
  Params bound;
  for (size_t p = 0; p < c.widths.size(); ++p) bound.emplace(Case::name(p), cpu.upload(c.host(p)));
  return bound;
}

void expect_as_stored(const Case& c, const Params& bound) {
  for (size_t p = 0; p < c.widths.size(); ++p) {
    SCOPED_TRACE(Case::name(p));
    expect_values(bound.at(Case::name(p)).to_host().convert(DType::f32),
                  c.host(p).convert(DType::f32).to_f64(), 0);
  }
}

TEST(WeightLayout, ProductsReadTheirWeightsBlockedAndOthersSeeThemAsStored) {
  if (!cpu::simd::current().avx512_bf16)
    GTEST_SKIP() << "weights are kept blocked only with AVX-512 BF16";
  Platform& cpu = get_platform("cpu");
  Case c;
  const Params stored = upload(cpu, c);
  // m = 40: oneDNN's slices; m = 1: the matrix-vector kernel, the two products of x as one step.
  Executable prefill = c.compile(cpu, 40, false), decode = c.compile(cpu, 1, false);
  Params bound = decode.prepare(stored);
  for (size_t p = 0; p < c.widths.size(); ++p) {
    EXPECT_TRUE(blocked(bound.at(Case::name(p))));
    EXPECT_FALSE(blocked(stored.at(Case::name(p))));  // what prepare was given is unchanged
  }
  EXPECT_EQ(decode.prepare(bound).at("a").memory(), bound.at("a").memory());  // once is enough
  c.check(cpu, decode, bound, 1);
  c.check(cpu, prefill, bound, 40);
  c.check(cpu, decode, stored, 1);  // unprepared weights give the same results
  expect_as_stored(c, bound);       // read from outside: as stored, and still blocked
  EXPECT_TRUE(blocked(bound.at("a")));

  // An executable that also reads c elementwise reads a copy of it as stored; c stays blocked.
  Executable both = c.compile(cpu, 1, true);
  EXPECT_FALSE(blocked(both.prepare(stored).at("c")));
  c.check(cpu, both, bound, 1);
  EXPECT_TRUE(blocked(bound.at("c")));
  c.check(cpu, decode, bound, 1);

  // Writing into blocked weights writes the layout they were stored in, in pieces too.
  Case written = c;
  written.w[1].assign(c.w[0].begin(), c.w[0].begin() + c.w[1].size());  // b gets a's first rows
  HostBuffer changed = written.host(1);
  const size_t half = changed.size_bytes() / 2;
  cpu.write(bound.at("b"), 0, std::span<const std::byte>(changed.data(), half));
  cpu.write(bound.at("b"), half,
            std::span<const std::byte>(changed.data() + half, changed.size_bytes() - half));
  EXPECT_TRUE(blocked(bound.at("b")));
  written.check(cpu, decode, bound, 1);
  expect_as_stored(written, bound);
  EXPECT_EQ(testing::error_of([&] {
              cpu.write(bound.at("b"), 1, std::span<const std::byte>(changed.data(), 2));
            }),
            "cpu: a write into bf16 weights must cover whole elements (offset 1, 2 bytes)");
}

// Batched decoding's 2-16 rows (AMX tiles where the CPU has them, amx_rows.h; oneDNN
// elsewhere), from blocked and from stored weights, the products of one x as one step too;
// and 17 rows, past what one tile takes.
TEST(WeightLayout, ProductsOfAFewRowsFromEitherLayout) {
  Platform& cpu = get_platform("cpu");
  Case c;
  const Params stored = upload(cpu, c);
  for (int64_t m : {2, 3, 8, 16, 17}) {
    SCOPED_TRACE(m);
    Executable exe = c.compile(cpu, m, false);
    c.check(cpu, exe, exe.prepare(stored), m);
    c.check(cpu, exe, stored, m);
  }
}

// Downloads of weights on one thread while products read them on another: the download makes
// its own copy as stored and the products keep reading the blocked weights as they are.
TEST(WeightLayout, DownloadsDuringProductsOnAnotherThread) {
  if (!cpu::simd::current().avx512_bf16)
    GTEST_SKIP() << "weights are kept blocked only with AVX-512 BF16";
  Platform& cpu = get_platform("cpu");
  Case c;
  Executable prefill = c.compile(cpu, 40, false);
  const Params bound = prefill.prepare(upload(cpu, c));
  std::atomic<bool> done = false;
  std::atomic<int> downloads = 0;
  std::thread reader([&] {
    while (!done) {
      for (size_t p = 0; p < c.widths.size(); ++p) {
        HostBuffer h = bound.at(Case::name(p)).to_host();
        EXPECT_EQ(h.convert(DType::f32).to_f64(), c.host(p).convert(DType::f32).to_f64());
      }
      ++downloads;
    }
  });
  for (int i = 0; i < 20 || downloads < 3; ++i) c.check(cpu, prefill, bound, 40);
  done = true;
  reader.join();
  for (size_t p = 0; p < c.widths.size(); ++p) EXPECT_TRUE(blocked(bound.at(Case::name(p))));
}

// A tied embedding: rows of "a" looked up (the input's tokens) and its products by x (the
// logits). The lookup reads the blocked layout too, so the weights stay blocked and both read
// them so.
TEST(WeightLayout, LookupsOfRowsReadBlockedWeights) {
  if (!cpu::simd::current().avx512_bf16) {
    GTEST_SKIP() << "weights are kept blocked only with AVX-512 BF16";
  }
  Platform& cpu = get_platform("cpu");
  const Case c;
  const Tensor a = Tensor::parameter("a", c.shape(0));
  Executable exe = prism::compile(cpu,
                                  [&](Tensor ids) {
                                    Tensor rows = a.gather("n", ids);  // {t, k}
                                    return std::vector<Tensor>{rows, rows.dot(a, "k")};
                                  },
                                  {S({{"t", 3}}, DType::i32)});
  const Params bound = exe.prepare({{"a", cpu.upload(c.host(0))}});
  EXPECT_TRUE(blocked(bound.at("a")));
  const std::vector<int32_t> ids{0, 191, 70};
  std::vector<Buffer> in{cpu.upload(testing::i32(S({{"t", 3}}), ids))};
  std::vector<Buffer> got = exe.call(bound, in);
  std::vector<double> rows, products;
  for (int32_t i : ids) {
    for (int64_t k = 0; k < Case::K; ++k) rows.push_back(c.w[0][i * Case::K + k]);
  }
  for (int32_t i : ids) {
    for (int64_t n = 0; n < 192; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < Case::K; ++k)
        sum += double(c.w[0][i * Case::K + k]) * c.w[0][n * Case::K + k];
      products.push_back(sum);
    }
  }
  expect_values(got[0].to_host().convert(DType::f32), rows, 0);
  expect_values(got[1].to_host().convert(DType::f32), products, 1.0 / 256);
}

TEST(WeightLayout, WeightsInMemoryNotTheirOwnStayAsStored) {
  // A mapped checkpoint's weights (adopted memory) are never rewritten.
  Platform& cpu = get_platform("cpu");
  Case c;
  std::vector<HostBuffer> hosts;
  hosts.reserve(c.widths.size());  // the buffers point into them
  Params bound;
  for (size_t p = 0; p < c.widths.size(); ++p) {
    const HostBuffer& h = hosts.emplace_back(c.host(p));
    std::optional<Buffer> b = cpu.adopt_host(h.shape(), h.data(), nullptr);
    ASSERT_TRUE(b.has_value());
    bound.emplace(Case::name(p), *b);
  }
  Executable prefill = c.compile(cpu, 40, false), decode = c.compile(cpu, 1, false);
  Params prepared = decode.prepare(bound);
  c.check(cpu, decode, prepared, 1);
  c.check(cpu, prefill, prepared, 40);
  for (size_t p = 0; p < c.widths.size(); ++p) {
    EXPECT_FALSE(blocked(prepared.at(Case::name(p))));
    EXPECT_EQ(prepared.at(Case::name(p)).memory(), bound.at(Case::name(p)).memory());
  }
}

// Weights in Q4_0, Q8_0, Q4_K, Q5_K and Q6_K blocks (u8 {n, row_bytes}, as a GGUF file keeps them)
// that only products and lookups of rows read are kept with each 16 rows' blocks interleaved: the
// products give the bits they give on the weights as stored (any number of rows: 1-16 on
// stored weights take the same integer arithmetic, and each row's result does not depend on
// its batch, so a prefill's rows are compared with decoding's), lookups give the stored rows,
// downloads the stored bytes, writes land where the layout keeps them, and an executable
// that reads the bytes otherwise gets them as stored.
struct QuantCase {
  static constexpr int64_t N = 48;
  quant::GgmlType format;
  int64_t K, row_bytes;  // three blocks a row (Q4_0, Q8_0, Q6_K: a pair and one alone)
  HostBuffer stored;

  explicit QuantCase(quant::GgmlType f, int seed = 0)
      : format(f), K(3 * quant::info(f).block_elements), row_bytes(3 * quant::info(f).block_bytes) {
    if (!quant::can_quantize(f)) {  // Q5_K, Q6_K: random blocks with finite scales
      stored = testing::random_blocks(f, N, 3, static_cast<uint32_t>(seed) + 7, "n", "k");
      return;
    }
    std::vector<float> w(N * K);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 + seed) % 13 - 6) / 4;
    stored = HostBuffer(shape());
    quant::quantize(f, w, stored.bytes());
  }
  Shape shape() const { return S({{"n", N}, {"k", row_bytes}}, DType::u8); }
  Tensor weights() const { return Tensor::parameter("w", shape()).dequantize(format, DType::f32); }

  // x {m, K} . W, and the rows `ids` of W looked up.
  Executable compile(Platform& cpu, int64_t m) const {
    return prism::compile(cpu,
                          [&](Tensor x, Tensor ids) {
                            const Tensor w = weights();
                            return std::vector<Tensor>{x.dot(w, "k"), w.gather("n", ids)};
                          },
                          {S({{"m", m}, {"k", K}}), S({{"t", 3}}, DType::i32)});
  }
  std::vector<float> x(int64_t m) const { return values(m, K); }
  static std::vector<float> values(int64_t m, int64_t k) {
    std::vector<float> a(m * k);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 5) % 17 - 8) / 8;
    return a;
  }
};

bool interleaved(const Buffer& b) { return cpu::interleaved_format(cpu::layout_of(b)).has_value(); }

TEST(WeightLayout, QuantizedWeightsReadInterleaved) {
  // The VNNI kernels, forced where AMX tiles would take batches and keep the weights as stored.
  const testing::ScopedEnv vnni("PRISM_CPU_QUANT_ROWS", "vnni");
  if (!cpu::quant_rows_int8_interleaved_native(quant::GgmlType::Q4_0))
    GTEST_SKIP() << "quantized weights are kept interleaved only with AVX2 or AVX-512 VNNI";
  Platform& cpu = get_platform("cpu");
  for (quant::GgmlType format : {quant::GgmlType::Q4_0, quant::GgmlType::Q8_0,
                                 quant::GgmlType::Q4_K, quant::GgmlType::Q6_K}) {
    // With AVX2 only Q4_0 is kept interleaved (the others as stored, which
    // ProductsReadTheirWeightsBlockedAndOthersSeeThemAsStored and quant_rows_test cover).
    if (!cpu::quant_rows_int8_interleaved_native(format)) continue;
    SCOPED_TRACE(quant::name(format));
    const QuantCase c(format);
    const Params stored{{"w", cpu.upload(c.stored)}};
    Executable one = c.compile(cpu, 1);
    Params bound = one.prepare(stored);
    EXPECT_TRUE(interleaved(bound.at("w")));
    EXPECT_FALSE(blocked(stored.at("w")));
    const std::vector<int32_t> ids{0, 47, 17};
    std::vector<double> rows;  // the looked-up rows, dequantized from the stored blocks
    std::vector<float> all(QuantCase::N * c.K);
    quant::dequantize(format, c.stored.bytes(), all);
    for (int32_t i : ids)
      for (int64_t k = 0; k < c.K; ++k) rows.push_back(all[i * c.K + k]);
    auto run = [&](const Executable& exe, const Params& w, const std::vector<float>& x) {
      const int64_t m = static_cast<int64_t>(x.size()) / c.K;
      std::vector<Buffer> in{cpu.upload(f32(S({{"m", m}, {"k", c.K}}), x)),
                             cpu.upload(testing::i32(S({{"t", 3}}), ids))};
      std::vector<Buffer> out = exe.call(w, in);
      expect_values(out[1].to_host(), rows, 0);
      return out[0].to_host().to_f64();
    };
    for (int64_t m : {1, 5, 16, 40}) {
      SCOPED_TRACE(m);
      const std::vector<float> x = c.x(m);
      const std::vector<double> got = run(c.compile(cpu, m), bound, x);
      for (int64_t i = 0; i < m; ++i) {  // each row alone, on the stored weights
        const std::vector<float> xi(x.begin() + i * c.K, x.begin() + (i + 1) * c.K);
        const std::vector<double> want = run(one, stored, xi);
        for (int64_t r = 0; r < QuantCase::N; ++r)
          ASSERT_EQ(got[i * QuantCase::N + r], want[r]) << "row " << i << ", weight row " << r;
      }
    }
    // Read from outside: the bytes as stored, the buffer still interleaved.
    EXPECT_TRUE(
        bound.at("w").to_host().bytes().size() == c.stored.size_bytes() &&
        std::memcmp(bound.at("w").to_host().data(), c.stored.data(), c.stored.size_bytes()) == 0);
    EXPECT_TRUE(interleaved(bound.at("w")));

    // Written in two pieces: products read the new weights.
    const QuantCase other(format, 5);
    const size_t half = other.stored.size_bytes() / 2 + 3;
    cpu.write(bound.at("w"), 0, other.stored.bytes().first(half));
    cpu.write(bound.at("w"), half, other.stored.bytes().subspan(half));
    EXPECT_TRUE(interleaved(bound.at("w")));
    HostBuffer back = bound.at("w").to_host();
    EXPECT_EQ(0, std::memcmp(back.data(), other.stored.data(), other.stored.size_bytes()));
    const std::vector<float> x = c.x(1);
    Executable fresh = other.compile(cpu, 1);
    const Params other_stored{{"w", cpu.upload(other.stored)}};
    quant::dequantize(format, other.stored.bytes(), all);
    rows.clear();
    for (int32_t i : ids)
      for (int64_t k = 0; k < c.K; ++k) rows.push_back(all[i * c.K + k]);
    EXPECT_EQ(run(one, bound, x), run(fresh, other_stored, x));

    // An executable that also reads the bytes themselves reads a copy as stored.
    Executable bytes = prism::compile(
        cpu,
        [&](Tensor x) {
          return std::vector<Tensor>{Tensor::parameter("w", c.shape()).convert(DType::f32), x};
        },
        {S({{"m", 1}})});
    EXPECT_FALSE(interleaved(bytes.prepare(other_stored).at("w")));
    std::vector<double> want;
    for (std::byte b : other.stored.bytes()) want.push_back(static_cast<double>(b));
    const Buffer one_value = cpu.upload(f32(S({{"m", 1}}), {1.0f}));
    expect_values(bytes.call(bound, std::span<const Buffer>(&one_value, 1))[0].to_host(), want, 0);
    EXPECT_TRUE(interleaved(bound.at("w")));
  }
}

// One step of products by weights kept interleaved and by weights that cannot be (40 rows:
// not whole groups of 16), for 1 and for 40 activation rows: the threads then split the
// interleaved weights' rows anywhere, and each row gets the bits it gets alone (the other
// weights' 40 rows take dequantized panels: their bits as stored).
TEST(WeightLayout, InterleavedWeightsBesideOthersInOneStep) {
  // The VNNI kernels, forced where AMX tiles would take batches and keep the weights as stored.
  const testing::ScopedEnv vnni("PRISM_CPU_QUANT_ROWS", "vnni");
  if (!cpu::quant_rows_int8_interleaved_native(quant::GgmlType::Q4_0))
    GTEST_SKIP() << "quantized weights are kept interleaved only with AVX2 or AVX-512 VNNI";
  Platform& cpu = get_platform("cpu");
  const quant::GgmlType format = quant::GgmlType::Q4_0;
  constexpr int64_t K = 96, rows[] = {48, 40};
  const int64_t row_bytes = K / 32 * 18;
  Params stored;
  std::vector<std::vector<float>> values;
  for (int p = 0; p < 2; ++p) {
    std::vector<float>& w = values.emplace_back(rows[p] * K);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 11 + p) % 15 - 7) / 4;
    HostBuffer h(S({{"n", rows[p]}, {"k", row_bytes}}, DType::u8));
    quant::quantize(format, w, h.bytes());
    stored.emplace(p ? "b" : "a", cpu.upload(h));
  }
  for (DType dtype : {DType::f32, DType::bf16}) {  // results rounded from f32 tiles for bf16
    SCOPED_TRACE(name(dtype));
    auto compile = [&](int64_t m) {
      return prism::compile(
          cpu,
          [&](Tensor x32) {
            const Tensor x = x32.convert(dtype);
            std::vector<Tensor> out;
            for (int p = 0; p < 2; ++p) {
              const Shape shape = S({{"n", rows[p]}, {"k", row_bytes}}, DType::u8);
              out.push_back(
                  x.dot(Tensor::parameter(p ? "b" : "a", shape).dequantize(format, dtype), "k"));
            }
            return out;
          },
          {S({{"m", m}, {"k", K}})});
    };
    Executable one = compile(1);
    const Params bound = one.prepare(stored);
    EXPECT_TRUE(interleaved(bound.at("a")));
    EXPECT_FALSE(blocked(bound.at("b")));
    for (int64_t m : {1, 40}) {
      SCOPED_TRACE(m);
      const std::vector<float> x = QuantCase::values(m, K);
      std::vector<Buffer> in{cpu.upload(f32(S({{"m", m}, {"k", K}}), x))};
      Executable exe = compile(m);
      const std::vector<Buffer> got = exe.call(bound, in);
      EXPECT_EQ(got[1].to_host().to_f64(), exe.call(stored, in)[1].to_host().to_f64());
      for (int64_t i = 0; i < m; ++i) {
        const std::vector<float> xi(x.begin() + i * K, x.begin() + (i + 1) * K);
        std::vector<Buffer> in1{cpu.upload(f32(S({{"m", 1}, {"k", K}}), xi))};
        const std::vector<Buffer> want = one.call(stored, in1);
        for (int p = 0; p < (m <= 16 ? 2 : 1); ++p) {
          const std::vector<double> g = got[p].to_host().to_f64(), w = want[p].to_host().to_f64();
          for (int64_t r = 0; r < rows[p]; ++r)
            ASSERT_EQ(g[i * rows[p] + r], w[r])
                << "product " << p << ", row " << i << ", weight row " << r;
        }
      }
    }
  }
}

// PRISM_CPU_QUANT_LAYOUT=stored keeps quantized weights as stored (the products give the
// same bits for up to 16 rows); another value is refused with one line when a program
// compiles.
TEST(WeightLayout, QuantizedLayoutChosenByTheEnvironment) {
  Platform& cpu = get_platform("cpu");
  const QuantCase c(quant::GgmlType::Q8_0);
  const Params stored{{"w", cpu.upload(c.stored)}};
  const char* before = std::getenv("PRISM_CPU_QUANT_LAYOUT");
  const std::string saved = before ? before : "";
  auto restore = [&] {
    if (before) {
      setenv("PRISM_CPU_QUANT_LAYOUT", saved.c_str(), 1);
    } else {
      unsetenv("PRISM_CPU_QUANT_LAYOUT");
    }
  };
  setenv("PRISM_CPU_QUANT_LAYOUT", "stored", 1);
  Executable plain = c.compile(cpu, 1);
  EXPECT_FALSE(blocked(plain.prepare(stored).at("w")));
  setenv("PRISM_CPU_QUANT_LAYOUT", "sideways", 1);
  const std::string error = testing::error_of([&] { c.compile(cpu, 1); });
  restore();
  EXPECT_EQ(error, "cpu: PRISM_CPU_QUANT_LAYOUT must be interleaved or stored, not 'sideways'");
  Executable kept = c.compile(cpu, 1);
  const Params bound = kept.prepare(stored);
  EXPECT_EQ(interleaved(bound.at("w")),
            cpu::quant_rows_int8_interleaved_native(quant::GgmlType::Q8_0));
  const std::vector<float> x = c.x(1);
  auto run = [&](const Executable& exe, const Params& w) {
    std::vector<Buffer> in{cpu.upload(f32(S({{"m", 1}, {"k", c.K}}), x)),
                           cpu.upload(testing::i32(S({{"t", 3}}), {0, 1, 2}))};
    return exe.call(w, in)[0].to_host().to_f64();
  };
  EXPECT_EQ(run(plain, stored), run(kept, bound));
}

TEST(WeightLayout, PrepareNamesAMissingOrMismatchedParameter) {
  Platform& cpu = get_platform("cpu");
  Case c;
  Executable decode = c.compile(cpu, 1, false);
  Params bound;
  for (size_t p = 0; p < 2; ++p) bound.emplace(Case::name(p), cpu.upload(c.host(p)));
  EXPECT_EQ(testing::error_of([&] { decode.prepare(bound); }),
            "prepare: no buffer for parameter \"c\" (bf16{n=64,k=96})");
  bound.emplace("c", cpu.upload(c.host(0)));  // a's shape
  EXPECT_EQ(testing::error_of([&] { decode.prepare(bound); }),
            "prepare: parameter \"c\" is not the executable's bf16{n=64,k=96} on cpu");
}

}  // namespace
}  // namespace prism
