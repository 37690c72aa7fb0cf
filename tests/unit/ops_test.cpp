// Every primitive op, checked against hand-computed values on the CPU and compared across
// platforms (today: the CPU with composites decomposed).
#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <string>

#include "prism/backends/registry.h"
#include "prism/nn/nn.h"
#include "tests/unit/platforms.h"

namespace prism {
namespace {

using testing::check_platforms;
using testing::error_of;
using testing::expect_values;
using testing::f32;
using testing::i32;
using testing::run1;
using testing::S;

TEST(Ops, UnaryFloat) {
  auto x = f32(S({{"n", 4}}), {-1.5f, -0.25f, 0.5f, 2.5f});
  struct Case {
    Tensor (Tensor::*op)() const;
    double (*ref)(double);
  };
  const Case cases[] = {
      {&Tensor::neg, [](double v) { return -v; }},
      {&Tensor::abs, [](double v) { return std::abs(v); }},
      {&Tensor::exp, [](double v) { return std::exp(v); }},
      {&Tensor::tanh, [](double v) { return std::tanh(v); }},
      {&Tensor::logistic, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {&Tensor::sin, [](double v) { return std::sin(v); }},
      {&Tensor::cos, [](double v) { return std::cos(v); }},
      {&Tensor::erf, [](double v) { return std::erf(v); }},
      {&Tensor::floor, [](double v) { return std::floor(v); }},
      {&Tensor::ceil, [](double v) { return std::ceil(v); }},
      {&Tensor::round, [](double v) { return std::nearbyint(v); }},
      {&Tensor::sign, [](double v) { return double((v > 0) - (v < 0)); }},
  };
  std::vector<double> in = x.to_f64();
  for (const Case& c : cases) {
    std::vector<double> want;
    for (double v : in) want.push_back(c.ref(v));
    auto op = c.op;
    expect_values(check_platforms([op](Tensor t) { return (t.*op)(); }, {x})[0], want, 1e-6);
  }
  auto p = f32(S({{"n", 3}}), {0.25f, 1, 4});
  expect_values(run1([](Tensor t) { return t.log(); }, {p}), {std::log(0.25), 0, std::log(4)});
  expect_values(run1([](Tensor t) { return t.log1p(); }, {p}),
                {std::log1p(0.25), std::log1p(1), std::log1p(4)});
  expect_values(run1([](Tensor t) { return t.sqrt(); }, {p}), {0.5, 1, 2});
  expect_values(run1([](Tensor t) { return t.rsqrt(); }, {p}), {2, 1, 0.5});
  // round is half to even
  expect_values(
      run1([](Tensor t) { return t.round(); }, {f32(S({{"n", 4}}), {0.5, 1.5, 2.5, -0.5})}),
      {0, 2, 2, -0});
}

TEST(Ops, UnaryRejectsIntegersWhereUndefined) {
  EXPECT_EQ(error_of([] {
              run1([](Tensor t) { return t.exp(); }, {i32(S({{"n", 1}}), {1})});
            }),
            "exp: needs a floating-point operand, got i32{n=1}");
}

TEST(Ops, BinaryFloat) {
  auto a = f32(S({{"n", 4}}), {1, -2, 3, 7});
  auto b = f32(S({{"n", 4}}), {2, 4, -1, 2});
  expect_values(check_platforms([](Tensor a, Tensor b) { return a - b; }, {a, b})[0],
                {-1, -6, 4, 5});
  expect_values(run1([](Tensor a, Tensor b) { return a / b; }, {a, b}), {0.5, -0.5, -3, 3.5});
  expect_values(run1([](Tensor a, Tensor b) { return pow(a, b); }, {a, b}), {1, 16, 1.0 / 3, 49});
  expect_values(run1([](Tensor a, Tensor b) { return maximum(a, b); }, {a, b}), {2, 4, 3, 7});
  expect_values(run1([](Tensor a, Tensor b) { return minimum(a, b); }, {a, b}), {1, -2, -1, 2});
  expect_values(run1([](Tensor a, Tensor b) { return rem(a, b); }, {a, b}), {1, -2, 0, 1});
  expect_values(run1([](Tensor a, Tensor b) { return atan2(a, b); }, {a, b}),
                {std::atan2(1, 2), std::atan2(-2, 4), std::atan2(3, -1), std::atan2(7, 2)});
}

TEST(Ops, BinaryIntegerAndComparisons) {
  auto a = i32(S({{"n", 4}}), {7, -7, 3, 0});
  auto b = i32(S({{"n", 4}}), {2, 2, 3, 5});
  expect_values(run1([](Tensor a, Tensor b) { return a / b; }, {a, b}), {3, -3, 1, 0});
  expect_values(run1([](Tensor a, Tensor b) { return rem(a, b); }, {a, b}), {1, -1, 0, 0});
  expect_values(run1([](Tensor a, Tensor b) { return pow(a, b); }, {a, b}), {49, 49, 27, 0});
  expect_values(run1([](Tensor a, Tensor b) { return lt(a, b); }, {a, b}), {0, 1, 0, 1});
  expect_values(run1([](Tensor a, Tensor b) { return ge(a, b); }, {a, b}), {1, 0, 1, 0});
  expect_values(run1([](Tensor a, Tensor b) { return eq(a, b); }, {a, b}), {0, 0, 1, 0});
  expect_values(run1([](Tensor a, Tensor b) { return ne(a, b); }, {a, b}), {1, 1, 0, 1});
  auto logic = run1(
      [](Tensor a, Tensor b) {
        Tensor p = gt(a, b), q = gt(b, a);
        return concat({logical_and(p, q), logical_or(p, q), logical_xor(p, q), p.logical_not()},
                      "n");
      },
      {a, b});
  expect_values(logic, {0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 1});
}

TEST(Ops, SelectAndConvert) {
  auto c = HostBuffer::from<bool>(S({{"n", 3}}, DType::boolean), {true, false, true});
  auto a = f32(S({{"n", 3}}), {1, 2, 3});
  auto b = f32(S({{"n", 3}}), {-1, -2, -3});
  expect_values(
      check_platforms([](Tensor c, Tensor a, Tensor b) { return select(c, a, b); }, {c, a, b})[0],
      {1, -2, 3});
  auto x = f32(S({{"n", 4}}), {1.7f, -1.7f, 300.f, 1.00390625f});
  expect_values(run1([](Tensor x) { return x.convert(DType::i32); }, {x}), {1, -1, 300, 1});
  expect_values(run1([](Tensor x) { return x.convert(DType::i8); }, {x}), {1, -1, 127, 1});
  // bf16 keeps 8 bits of mantissa: 1 + 2^-8 rounds to even (1).
  expect_values(run1([](Tensor x) { return x.convert(DType::bf16).convert(DType::f32); }, {x}),
                {1.703125, -1.703125, 300, 1});
  expect_values(run1([](Tensor x) { return x.convert(DType::f16); }, {x}),
                {1.7001953125, -1.7001953125, 300, 1.00390625});
  auto nan = f32(S({{"n", 2}}), {std::nanf(""), 1});
  expect_values(run1([](Tensor x) { return x.is_nan(); }, {nan}), {1, 0});
}

TEST(Ops, HalfPrecisionElementwiseRoundsEachOp) {
  // In bf16, 256 + 1 = 256 (the 1 is lost), then - 256 = 0; in f32 it would be 1.
  auto x = f32(S({{"n", 1}}), {256});
  auto y = run1(
      [](Tensor x) {
        Tensor h = x.convert(DType::bf16);
        return ((h + 1.0) - h).convert(DType::f32);
      },
      {x});
  expect_values(y, {0});
}

TEST(Ops, IotaAndConstants) {
  auto y = run1(
      [](Tensor) {
        return Tensor::iota(S({{"a", 2}, {"b", 3}}, DType::i32), "b") +
               Tensor::full(S({{"b", 3}}, DType::i32), 10);
      },
      {f32(S({{"n", 1}}), {0})});
  expect_values(y, {10, 11, 12, 10, 11, 12});
  auto c = run1(
      [](Tensor x) {
        return x + Tensor::constant(f32(S({{"n", 2}}), {5, 6}));
      },
      {f32(S({{"n", 2}}), {1, 2})});
  expect_values(c, {6, 8});
}

TEST(Ops, ReduceAnyAxes) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = float(i);
  auto x = f32(S({{"a", 2}, {"b", 3}, {"c", 4}}), v);
  // Non-adjacent axes a and c: sum over them leaves b.
  expect_values(check_platforms(
                    [](Tensor x) {
                      return x.sum({"a", "c"});
                    },
                    {x})[0],
                {0 + 1 + 2 + 3 + 12 + 13 + 14 + 15, 4 + 5 + 6 + 7 + 16 + 17 + 18 + 19,
                 8 + 9 + 10 + 11 + 20 + 21 + 22 + 23});
  expect_values(run1([](Tensor x) { return x.min("b"); }, {x}), {0, 1, 2, 3, 12, 13, 14, 15});
  expect_values(run1([](Tensor x) { return x.argmin("c", DType::i64); }, {x}), {0, 0, 0, 0, 0, 0});
  auto r = run1([](Tensor x) { return x.sum({"a", "b", "c"}); }, {x});
  EXPECT_EQ(r.shape().rank(), 0);
  expect_values(r, {276});
}

TEST(Ops, DotLayouts) {
  // Every arrangement of the operands in memory gives the same product.
  std::vector<float> a(6), b(12);
  for (int i = 0; i < 6; ++i) a[i] = float(i + 1);
  for (int i = 0; i < 12; ++i) b[i] = float(i % 5) - 2;
  auto A = f32(S({{"m", 2}, {"k", 3}}), a);
  auto B = f32(S({{"k", 3}, {"n", 4}}), b);
  auto ref = run1([](Tensor a, Tensor b) { return a.dot(b, "k"); }, {A, B});
  auto t1 = run1([](Tensor a, Tensor b) { return a.transpose({"k", "m"}).dot(b, "k"); }, {A, B});
  auto t2 = run1([](Tensor a, Tensor b) { return a.dot(b.transpose({"n", "k"}), "k"); }, {A, B});
  expect_values(t1, ref.to_f64());
  expect_values(t2, ref.to_f64());
  // hand-checked first row: [1 2 3] . columns of B
  std::vector<double> r = ref.to_f64();
  EXPECT_DOUBLE_EQ(r[0], 1 * -2 + 2 * 2 + 3 * 1);
  // f64, i32 and bf16 take the other paths.
  auto d =
      run1([](Tensor a, Tensor b) { return a.convert(DType::f64).dot(b.convert(DType::f64), "k"); },
           {A, B});
  expect_values(d, ref.to_f64());
  auto i =
      run1([](Tensor a, Tensor b) { return a.convert(DType::i32).dot(b.convert(DType::i32), "k"); },
           {A, B});
  expect_values(i, ref.to_f64());
  auto h = run1(
      [](Tensor a, Tensor b) {
        return a.convert(DType::bf16).dot(b.convert(DType::bf16), "k").convert(DType::f32);
      },
      {A, B});
  expect_values(h, ref.to_f64(), 1e-2);
}

// Decoding-sized operands, x {m=3, k=70} and W {n=11, k=70} stored {n, k} or {k, n}, of
// small integers and halves: every product and sum is exact in f32. `want` is the exact
// product. k = 70 leaves a tail after the kernels' 32-wide steps and groups of four rows;
// n = 11 does not split into groups of four.
struct MatrixVector {
  HostBuffer x, w;
  std::vector<double> want;
};

MatrixVector matrix_vector(bool w_stored_nk) {
  const int64_t M = 3, K = 70, N = 11;
  std::vector<float> a(M * K), w(N * K);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (float(i % 7) - 3) * 0.5f;
  // Periods 7 and 11: with periods dividing k, every row of x would have the same dot with
  // every row of W (zero, for these).
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 11) - 5;
  std::vector<double> want(M * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        want[m * N + n] += double(a[m * K + k]) * w[w_stored_nk ? n * K + k : k * N + n];
  return {f32(S({{"m", M}, {"k", K}}), a),
          f32(w_stored_nk ? S({{"n", N}, {"k", K}}) : S({{"k", K}, {"n", N}}), w), want};
}

// x . W in bf16, back in f32.
HostBuffer dot_in_bf16(const MatrixVector& c) {
  return run1(
      [](Tensor a, Tensor w) {
        return a.convert(DType::bf16).dot(w.convert(DType::bf16), "k").convert(DType::f32);
      },
      {c.x, c.w});
}

TEST(Ops, DotBf16MatrixVector) {
  // Decoding's path: a few rows times weights stored {n, k} in bf16, four weight rows at a
  // time; the result is the exact sum rounded once to bf16.
  MatrixVector c = matrix_vector(true);
  HostBuffer got = dot_in_bf16(c);
  EXPECT_EQ(got.shape().str(), "f32{m=3,n=11}");
  expect_values(got, c.want, 1.0 / 256);
}

TEST(Ops, DotMatrixVectorWithWeightsStoredKN) {
  // Decoding's path for weights stored {k, n}: rows of W scaled and added, four at a time and
  // then the two left over; exact in f32, rounded once in bf16.
  MatrixVector c = matrix_vector(false);
  expect_values(run1([](Tensor a, Tensor w) { return a.dot(w, "k"); }, {c.x, c.w}), c.want, 0);
  HostBuffer got = dot_in_bf16(c);
  EXPECT_EQ(got.shape().str(), "f32{m=3,n=11}");
  expect_values(got, c.want, 1.0 / 256);
}

TEST(Ops, DotSplitsOutputColumnsAcrossThreads) {
  // Enough rows for the matrix-matrix path and columns for several slices (of 512 or more):
  // 2048 gives equal slices that share one oneDNN primitive, run at once on two threads (the
  // case that needs a scratchpad per thread); 700, a partial slice. Without a batch tag each
  // slice goes through the thread's staging block (rows as wide as the slice, copied into
  // place); with one, oneDNN writes the columns in place. Weights stored {n, k} and {k, n}, f32
  // and bf16. Small integers and halves: f32 sums are exact.
  const int64_t M = 40, K = 2048;
  for (auto [B, N] : {std::pair<int64_t, int64_t>{1, 2048}, {1, 700}, {2, 700}}) {
    std::vector<float> a(B * M * K), w(B * N * K);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (float(i % 7) - 3) * 0.5f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 5) - 2;
    auto A = f32(S({{"b", B}, {"m", M}, {"k", K}}), a);
    auto W = f32(S({{"b", B}, {"n", N}, {"k", K}}), w);
    std::vector<double> want(B * M * N, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k)
            want[(b * M + m) * N + n] += double(a[(b * M + m) * K + k]) * w[(b * N + n) * K + k];
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(name(t)) + ", b " + std::to_string(B) + ", n " + std::to_string(N));
      auto stored_nk =
          run1([&](Tensor a,
                   Tensor w) { return a.convert(t).dot(w.convert(t), "k").convert(DType::f32); },
               {A, W});
      auto stored_kn = run1(
          [&](Tensor a, Tensor w) {
            Tensor wt = w.transpose({"b", "k", "n"});  // a copy in that order
            return a.convert(t).dot(wt.convert(t), "k").convert(DType::f32);
          },
          {A, W});
      EXPECT_EQ(stored_nk.shape().str(), fmt::format("f32{{b={},m={},n={}}}", B, M, N));
      expect_values(stored_nk, want, t == DType::bf16 ? 1.0 / 256 : 0);
      expect_values(stored_kn, want, t == DType::bf16 ? 1.0 / 256 : 0);
    }
  }
}

TEST(Ops, DotsOfTheSameActivationsByParameterWeights) {
  // A layer's q, k and v projections: products of one x by three parameter matrices, moved
  // next to each other (an elementwise step comes between the first and the others in graph
  // order), which the CPU runs as one step, over the columns of all three (the
  // few-rows path with m = 1, oneDNN's slices with m = 40). A fourth product of another x and
  // a product by weights computed in the graph are left as they are. The third weights are
  // stored {k, n}, the others {n, k}: with k = 128 the bf16 kernel for the others reads x as
  // it is, the one for the third needs it widened. Small integers and halves (periods 7 and
  // 11, so that the dots differ): exact in f32, rounded once in bf16.
  Platform& cpu = get_platform("cpu");
  const std::vector<int64_t> widths = {130, 11, 37};
  for (auto [M, K] : {std::pair<int64_t, int64_t>{1, 70}, {1, 128}, {40, 70}}) {
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{}, m {}, k {}", name(t), M, K));
      std::vector<float> a(M * K);
      for (size_t i = 0; i < a.size(); ++i) a[i] = (float(i % 7) - 3) * 0.5f;
      std::vector<std::vector<float>> w;
      std::vector<Tensor> params;
      std::map<std::string, Buffer, std::less<>> bound;
      for (size_t p = 0; p < widths.size(); ++p) {
        Shape ws = p == 2 ? S({{"k", K}, {"n", widths[p]}}, t) : S({{"n", widths[p]}, {"k", K}}, t);
        std::vector<float>& v = w.emplace_back(widths[p] * K);
        for (size_t i = 0; i < v.size(); ++i) v[i] = float((i + 3 * p) % 11) - 5;
        std::string name = fmt::format("w{}", p);
        params.push_back(Tensor::parameter(name, ws));
        bound.emplace(name, cpu.upload(f32(ws.with_dtype(DType::f32), v).convert(t)));
      }
      Executable exe = compile(cpu,
                               [&](Tensor x) {
                                 Tensor xt = x.convert(t);
                                 std::vector<Tensor> out;
                                 // A step between the first product and the others:
                                 // they are moved next to it.
                                 Tensor first = xt.dot(params[0], "k");
                                 Tensor between = first * 2.0;
                                 out.push_back(first);
                                 out.push_back(xt.dot(params[1], "k"));
                                 out.push_back(xt.dot(params[2], "k"));
                                 out.push_back((xt * 2.0).dot(params[1], "k"));
                                 out.push_back(xt.dot(params[2] + 1.0, "k"));
                                 out.push_back(between);
                                 return out;
                               },
                               {S({{"m", M}, {"k", K}})});
      std::vector<Buffer> in{cpu.upload(f32(S({{"m", M}, {"k", K}}), a))};
      std::vector<Buffer> got = exe.call(bound, in);
      ASSERT_EQ(got.size(), 6u);
      auto want = [&](size_t p, double scale, double add) {
        const std::vector<float>& wp = w[p];
        const int64_t N = widths[p];
        auto at = [&](int64_t n, int64_t k) { return p == 2 ? wp[k * N + n] : wp[n * K + k]; };
        std::vector<double> r(M * N, 0);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) r[m * N + n] += scale * a[m * K + k] * (at(n, k) + add);
        return r;
      };
      const double tol = t == DType::bf16 ? 1.0 / 256 : 0;
      for (size_t p = 0; p < widths.size(); ++p) {
        expect_values(got[p].to_host(), want(p, 1, 0), tol);
      }
      expect_values(got[3].to_host(), want(1, 2, 0), tol);
      expect_values(got[4].to_host(), want(2, 1, 1), tol);
      expect_values(got[5].to_host(), want(0, 2, 0), tol);
    }
  }
}

TEST(Ops, DotMultipleContractingAndBatchTags) {
  std::vector<float> a(2 * 2 * 3), b(2 * 2 * 3 * 2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 7) - 3;
  auto A = f32(S({{"h", 2}, {"x", 2}, {"y", 3}}), a);
  auto B = f32(S({{"y", 3}, {"h", 2}, {"o", 2}, {"x", 2}}), b);
  auto got = run1([](Tensor a, Tensor b) { return a.dot(b, {"x", "y"}); }, {A, B});
  EXPECT_EQ(got.shape().str(), "f32{h=2,o=2}");
  std::vector<double> want(4, 0);
  for (int h = 0; h < 2; ++h)
    for (int o = 0; o < 2; ++o)
      for (int x = 0; x < 2; ++x)
        for (int y = 0; y < 3; ++y)
          want[h * 2 + o] += a[(h * 2 + x) * 3 + y] * b[((y * 2 + h) * 2 + o) * 2 + x];
  expect_values(got, want);
}

TEST(Ops, BroadcastTransposeSlice) {
  auto x = f32(S({{"a", 2}, {"b", 3}}), {0, 1, 2, 3, 4, 5});
  auto y = check_platforms(
      [](Tensor x) {
        return x.broadcast_to(S({{"b", 3}, {"c", 2}, {"a", 2}}));
      },
      {x})[0];
  EXPECT_EQ(y.shape().str(), "f32{b=3,c=2,a=2}");
  expect_values(y, {0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
  expect_values(run1([](Tensor x) { return x.slice("b", 1, 2); }, {x}), {1, 2, 4, 5});
  expect_values(run1([](Tensor x) { return x.slice("b", 0, 2, 2); }, {x}), {0, 2, 3, 5});
  EXPECT_EQ(error_of([&] { run1([](Tensor x) { return x.slice("b", 2, 2); }, {x}); }),
            "slice: [2, +2 step 1) is out of bounds for tag \"b\" of size 3 in {a=2,b=3}");
}

TEST(Ops, DynamicSliceAndUpdate) {
  auto x = f32(S({{"a", 2}, {"b", 4}}), {0, 1, 2, 3, 4, 5, 6, 7});
  auto start = HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {1});
  expect_values(
      check_platforms([](Tensor x, Tensor s) { return x.dynamic_slice("b", s, 2); }, {x, start})[0],
      {1, 2, 5, 6});
  // Out-of-range starts clamp so the window fits.
  auto far = HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {9});
  expect_values(run1([](Tensor x, Tensor s) { return x.dynamic_slice("b", s, 2); }, {x, far}),
                {2, 3, 6, 7});
  auto u = f32(S({{"a", 2}, {"b", 1}}), {-1, -2});
  expect_values(run1(
                    [](Tensor x, Tensor u, Tensor s) {
                      return x.dynamic_update_slice(u, {{"b", s}});
                    },
                    {x, u, start}),
                {0, -1, 2, 3, 4, -2, 6, 7});
}

// Every platform: the CPU and those the harness compares with it.
std::vector<Platform*> all_platforms() {
  std::vector<Platform*> all{&get_platform("cpu")};
  for (Platform* p : testing::platforms_to_compare()) all.push_back(p);
  return all;
}

TEST(Ops, DonatedInputIsUpdatedInPlace) {
  for (Platform* platform : all_platforms()) {
    SCOPED_TRACE(std::string(platform->name()));
    Shape cache_shape = S({{"s", 4}, {"d", 2}});
    Executable exe =
        compile(*platform,
                [](Tensor cache, Tensor row, Tensor pos) {
                  return cache.dynamic_update_slice(row, {{"s", pos}});
                },
                {cache_shape, S({{"s", 1}, {"d", 2}}), Shape::scalar(DType::i32)}, {.donate = {0}});
    Buffer cache = platform->upload(HostBuffer(cache_shape));
    for (int step = 0; step < 4; ++step) {
      std::vector<Buffer> in{
          cache, platform->upload(f32(S({{"s", 1}, {"d", 2}}), {float(step), 1})),
          platform->upload(HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {step}))};
      Buffer out = exe.call(std::span<const Buffer>{}, in)[0];
      EXPECT_EQ(out.memory(), cache.memory()) << "the cache is updated where it is";
      cache = out;
    }
    expect_values(cache.to_host(), {0, 1, 1, 1, 2, 1, 3, 1});
  }
}

// Outputs copied in after the last step (here one zero constant, which the compiler makes one
// value for both) land in the donated inputs of their shape: resetting states keeps their
// buffers, on every platform.
TEST(Ops, ConstantOutputsFillTheirDonatedInputs) {
  for (Platform* platform : all_platforms()) {
    SCOPED_TRACE(std::string(platform->name()));
    Shape shape = S({{"h", 2}, {"d", 3}});
    Executable exe =
        compile(*platform,
                [](Tensor a, Tensor b) {
                  return std::vector<Tensor>{Tensor::zeros(a.shape()), Tensor::zeros(b.shape())};
                },
                {shape, shape}, {.donate = {0, 1}});
    std::vector<Buffer> in{platform->upload(f32(shape, {1, 2, 3, 4, 5, 6})),
                           platform->upload(f32(shape, {7, 8, 9, 10, 11, 12}))};
    std::vector<Buffer> out = exe.call(std::span<const Buffer>{}, in);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(out[k].memory(), in[k].memory()) << "output " << k;
      expect_values(out[k].to_host(), {0, 0, 0, 0, 0, 0});
    }
  }
}

// A state computed anew from the old one each step (a recurrent state) is written into the
// donated input's memory once nothing reads the input any more.
TEST(Ops, DonatedStateIsRewrittenInItsOwnMemory) {
  for (Platform* platform : all_platforms()) {
    SCOPED_TRACE(std::string(platform->name()));
    Shape state_shape = S({{"h", 2}, {"d", 3}});
    // Outputs: a readout of the old state, then the new state 0.5 * state + x.
    Executable exe = compile(*platform,
                             [](Tensor state, Tensor x) {
                               return std::vector<Tensor>{state.sum("d"), state * 0.5 + x};
                             },
                             {state_shape, state_shape}, {.donate = {0}});
    Buffer state = platform->upload(f32(state_shape, {2, 4, 6, 8, 10, 12}));
    Buffer x = platform->upload(f32(state_shape, {1, 1, 1, 1, 1, 1}));
    std::vector<Buffer> out = exe.call(std::span<const Buffer>{}, std::vector<Buffer>{state, x});
    EXPECT_EQ(out[1].memory(), state.memory()) << "the new state takes the donated memory";
    expect_values(out[0].to_host(), {12, 30});
    expect_values(out[1].to_host(), {2, 3, 4, 5, 6, 7});
    // Not donated: the input stays as it was, the output has its own memory.
    Executable kept = compile(*platform, [](Tensor state, Tensor x) { return state * 0.5 + x; },
                              {state_shape, state_shape});
    Buffer fresh = kept.call(std::span<const Buffer>{}, std::vector<Buffer>{out[1], x})[0];
    EXPECT_NE(fresh.memory(), out[1].memory());
    expect_values(out[1].to_host(), {2, 3, 4, 5, 6, 7});
    expect_values(fresh.to_host(), {2, 2.5, 3, 3.5, 4, 4.5});
  }
}

// The donated memory is not reused while a later step still reads the input: here the new
// state is written before the readout of the old one.
TEST(Ops, DonatedInputReadLateIsNotOverwritten) {
  for (Platform* platform : all_platforms()) {
    SCOPED_TRACE(std::string(platform->name()));
    Shape state_shape = S({{"d", 4}});
    Executable exe =
        compile(*platform,
                [](Tensor state) {
                  Tensor next = state + 1.0;
                  // Reads the old state after `next` is computed, through a broadcast.
                  Tensor wide = state.broadcast_to(Shape(DType::f32, {{"e", 2}, {"d", 4}}));
                  Tensor late = (wide * next.sum("d")).sum("d").sum("e");
                  return std::vector<Tensor>{next, late};
                },
                {state_shape}, {.donate = {0}});
    Buffer state = platform->upload(f32(state_shape, {1, 2, 3, 4}));
    std::vector<Buffer> out = exe.call(std::span<const Buffer>{}, std::vector<Buffer>{state});
    // prism's schedule gives `next` other memory; a PJRT plugin may alias it with the state,
    // its compiler copying the old value for the late read.
    if (!testing::is_pjrt(platform->name())) {
      EXPECT_NE(out[0].memory(), state.memory());
    }
    expect_values(out[0].to_host(), {2, 3, 4, 5});
    expect_values(out[1].to_host(), {280});  // 2 * 14 * (1 + 2 + 3 + 4)
  }
}

TEST(Ops, ConcatGatherTakeAlongScatter) {
  auto a = f32(S({{"a", 2}, {"b", 2}}), {0, 1, 2, 3});
  auto b = f32(S({{"b", 1}, {"a", 2}}), {8, 9});  // other tag order: aligned by name
  expect_values(check_platforms(
                    [](Tensor a, Tensor b) {
                      return concat({a, b}, "b");
                    },
                    {a, b})[0],
                {0, 1, 8, 2, 3, 9});
  auto table = f32(S({{"voc", 3}, {"d", 2}}), {0, 1, 10, 11, 20, 21});
  auto ids = i32(S({{"s", 4}}), {2, 0, 2, -1});
  auto emb =
      check_platforms([](Tensor t, Tensor i) { return t.gather("voc", i); }, {table, ids})[0];
  EXPECT_EQ(emb.shape().str(), "f32{s=4,d=2}");
  expect_values(emb, {20, 21, 0, 1, 20, 21, 20, 21});
  auto idx = i32(S({{"a", 2}, {"b", 2}}), {1, 1, 0, 1});
  expect_values(run1([](Tensor x, Tensor i) { return x.take_along("b", i); }, {a, idx}),
                {1, 1, 2, 3});
  auto upd = f32(S({{"a", 2}, {"b", 2}}), {5, 6, 7, 8});
  expect_values(
      run1([](Tensor x, Tensor i, Tensor u) { return x.scatter("b", i, u); }, {a, idx, upd}),
      {0, 6, 7, 8});
  expect_values(run1([](Tensor x, Tensor i,
                        Tensor u) { return x.scatter("b", i, u, ir::ScatterReduce::add); },
                     {a, idx, upd}),
                {0, 12, 9, 11});
}

TEST(Ops, PadModes) {
  auto x = f32(S({{"n", 3}}), {1, 2, 3});
  expect_values(check_platforms([](Tensor x) { return x.pad("n", 2, 1, -1); }, {x})[0],
                {-1, -1, 1, 2, 3, -1});
  expect_values(run1([](Tensor x) { return x.pad("n", -1, 1); }, {x}), {2, 3, 0});
  expect_values(run1([](Tensor x) { return x.pad("n", 2, 2, 0, ir::PadMode::edge); }, {x}),
                {1, 1, 1, 2, 3, 3, 3});
  expect_values(run1([](Tensor x) { return x.pad("n", 2, 2, 0, ir::PadMode::reflect); }, {x}),
                {3, 2, 1, 2, 3, 2, 1});
}

TEST(Ops, CumsumAndTopK) {
  auto x = f32(S({{"n", 5}}), {3, 1, 4, 1, 5});
  expect_values(check_platforms([](Tensor x) { return x.cumsum("n"); }, {x})[0], {3, 4, 8, 9, 14});
  expect_values(run1([](Tensor x) { return x.cumsum("n", true); }, {x}), {0, 3, 4, 8, 9});
  expect_values(run1([](Tensor x) { return x.cumsum("n", false, true); }, {x}), {14, 11, 10, 6, 5});
  auto top = run(
      [](Tensor x) {
        auto [v, i] = x.top_k("n", 3);
        return std::vector<Tensor>{v, i};
      },
      {x});
  expect_values(top[0], {5, 4, 3});
  expect_values(top[1], {4, 2, 0});
  auto low = run1([](Tensor x) { return x.top_k("n", 2, false).second; }, {x});
  expect_values(low, {1, 3});  // ties: the lower index first
}

TEST(Ops, Convolution) {
  // 1 image, 1 channel, 3x3, kernel 2x2 of ones, stride 1, no padding: sums of 2x2 windows.
  auto x = f32(S({{"b", 1}, {"c", 1}, {"h", 3}, {"w", 3}}), {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto k = f32(S({{"o", 1}, {"c", 1}, {"h", 2}, {"w", 2}}), {1, 1, 1, 1});
  ConvOptions o{.spatial = {"h", "w"}};
  auto y = check_platforms([&](Tensor x, Tensor k) { return conv(x, k, o); }, {x, k})[0];
  EXPECT_EQ(y.shape().str(), "f32{b=1,o=1,h=2,w=2}");
  expect_values(y, {12, 16, 24, 28});
  ConvOptions padded{
      .spatial = {"h", "w"}, .strides = {2, 2}, .pad_low = {1, 1}, .pad_high = {1, 1}};
  expect_values(run1([&](Tensor x, Tensor k) { return conv(x, k, padded); }, {x, k}),
                {1, 5, 11, 28});
  // f64 takes the direct loop instead of oneDNN: same answers.
  expect_values(
      run1([&](Tensor x,
               Tensor k) { return conv(x.convert(DType::f64), k.convert(DType::f64), padded); },
           {x, k}),
      {1, 5, 11, 28});
  // Two groups over 2 channels of 1-D signals.
  auto x1 = f32(S({{"b", 1}, {"c", 2}, {"t", 3}}), {1, 2, 3, 10, 20, 30});
  auto k1 = f32(S({{"o", 2}, {"c", 1}, {"t", 2}}), {1, -1, 1, 1});
  ConvOptions grouped{.spatial = {"t"}, .groups = 2};
  expect_values(run1([&](Tensor x, Tensor k) { return conv(x, k, grouped); }, {x1, k1}),
                {-1, -1, 30, 50});
  expect_values(
      run1([&](Tensor x,
               Tensor k) { return conv(x.convert(DType::f64), k.convert(DType::f64), grouped); },
           {x1, k1}),
      {-1, -1, 30, 50});
}

TEST(Ops, Activations) {
  auto x = f32(S({{"n", 3}}), {-1, 0, 2});
  expect_values(run1([](Tensor x) { return x.relu(); }, {x}), {0, 0, 2});
  expect_values(run1([](Tensor x) { return x.silu(); }, {x}),
                {-1 / (1 + std::exp(1.0)), 0, 2 / (1 + std::exp(-2.0))});
  expect_values(run1([](Tensor x) { return x.gelu(); }, {x}),
                {-0.5 * (1 + std::erf(-1 / std::numbers::sqrt2)), 0,
                 2 * 0.5 * (1 + std::erf(2 / std::numbers::sqrt2))});
}

}  // namespace
}  // namespace prism
