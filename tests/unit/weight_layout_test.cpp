// Weights of products kept blocked by the CPU executable (prism/backends/cpu/weight_layout.h):
// prepare returns blocked copies and changes nothing it was given, the products give the same
// results from either layout, whoever else reads the weights sees them as stored (while
// products read them on another thread), and a mapped file's weights stay as they are.
#include "prism/backends/cpu/weight_layout.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/registry.h"
#include "prism/runtime/compile.h"
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
