// The composite ops: each kernel against a direct reference computation, and against its own
// decomposition into primitives (check_platforms runs both).
#include <cmath>
#include <random>

#include "prism/backends/cpu/simd.h"
#include "prism/nn/nn.h"
#include "tests/unit/platforms.h"

namespace prism {
namespace {

using testing::check_platforms;
using testing::expect_values;
using testing::f32;
using testing::run1;
using testing::S;

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(Composites, SoftmaxAndLogSoftmax) {
  auto x = f32(S({{"r", 2}, {"k", 3}}), {1, 2, 3, -1, 0, 1000});
  double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), z = e1 + e2 + e3;
  auto y = check_platforms([](Tensor x) { return x.softmax("k"); }, {x})[0];
  expect_values(y, {e1 / z, e2 / z, e3 / z, 0, 0, 1});
  auto l = check_platforms([](Tensor x) { return x.log_softmax("k"); }, {x})[0];
  expect_values(l, {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -1001, -1000, 0});
  // Over a leading tag.
  auto c = check_platforms([](Tensor x) { return x.softmax("r"); }, {x})[0];
  double big = 1 / (1 + std::exp(-2.0)), small = 1 - big;
  expect_values(c, {big, big, 0, small, small, 1});
}

TEST(Composites, Norms) {
  auto x = f32(S({{"s", 2}, {"d", 4}}), {1, 2, 3, 4, -1, 0, 1, 10});
  auto rms = check_platforms([](Tensor x) { return x.rms_norm("d", 1e-6); }, {x})[0];
  std::vector<double> v = x.to_f64(), want;
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int i = 0; i < 4; ++i) ms += v[r * 4 + i] * v[r * 4 + i] / 4;
    for (int i = 0; i < 4; ++i) want.push_back(v[r * 4 + i] / std::sqrt(ms + 1e-6));
  }
  expect_values(rms, want);
  auto ln = check_platforms([](Tensor x) { return x.layer_norm("d", 1e-5); }, {x})[0];
  want.clear();
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += v[r * 4 + i] / 4;
    for (int i = 0; i < 4; ++i) var += (v[r * 4 + i] - mean) * (v[r * 4 + i] - mean) / 4;
    for (int i = 0; i < 4; ++i) want.push_back((v[r * 4 + i] - mean) / std::sqrt(var + 1e-5));
  }
  expect_values(ln, want);
  // bf16 input: computed in f32, rounded once.
  auto h = run1([](Tensor x) { return x.convert(DType::bf16).rms_norm("d", 1e-6); }, {x});
  expect_values(h, rms.to_f64(), 1e-2);
  // Normalizing over non-adjacent tags is decomposed on the CPU too.
  auto x3 = f32(S({{"a", 2}, {"b", 2}, {"c", 2}}), random_values(8, 3));
  check_platforms([](Tensor x) { return x.layer_norm({"a", "c"}, 1e-5); }, {x3});
}

TEST(Composites, RopeBothConventions) {
  const int64_t s = 3, h = 2, d = 4;
  auto x = f32(S({{"s", s}, {"h", h}, {"hd", d}}), random_values(s * h * d, 1));
  auto pos = HostBuffer::from<int32_t>(S({{"s", s}}, DType::i32), {0, 5, 9});
  std::vector<double> inv = nn::rope_inv_freq(d, 10000);
  for (bool interleaved : {false, true}) {
    auto y = check_platforms(
        [&](Tensor x, Tensor p) {
          auto [cos, sin] = nn::rope_tables(p, inv);
          return nn::rope(x, cos, sin, "hd", interleaved);
        },
        {x, pos})[0];
    std::vector<double> xv = x.to_f64(), want(xv.size());
    const int positions[] = {0, 5, 9};
    for (int si = 0; si < s; ++si) {
      for (int hi = 0; hi < h; ++hi) {
        const double* xr = &xv[(si * h + hi) * d];
        double* yr = &want[(si * h + hi) * d];
        for (int i = 0; i < d / 2; ++i) {
          double angle = float(positions[si]) * float(inv[i]);
          double c = std::cos(angle), sn = std::sin(angle);
          int p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + d / 2;
          yr[p] = xr[p] * c - xr[q] * sn;
          yr[q] = xr[q] * c + xr[p] * sn;
        }
      }
    }
    expect_values(y, want, 1e-5);
  }
}

// softmax(q.k * scale + mask) . v computed directly; GQA maps query head h to kv head h / rep.
std::vector<double> reference_attention(const HostBuffer& q, const HostBuffer& k,
                                        const HostBuffer& v, int64_t H, int64_t G, int64_t Sq,
                                        int64_t Sk, int64_t D, bool causal, int64_t window,
                                        int64_t offset) {
  std::vector<double> qv = q.to_f64(), kv = k.to_f64(), vv = v.to_f64(), out(H * Sq * D);
  double scale = 1 / std::sqrt(double(D));
  for (int64_t h = 0; h < H; ++h) {
    int64_t g = h / (H / G);
    for (int64_t i = 0; i < Sq; ++i) {
      std::vector<double> w(Sk, 0);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < Sk; ++j) {
        int64_t qpos = offset + i;
        bool ok = (!causal || j <= qpos) && (window == 0 || j > qpos - window);
        if (!ok) {
          w[j] = -INFINITY;
          continue;
        }
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qv[(h * Sq + i) * D + d] * kv[(g * Sk + j) * D + d];
        w[j] = dot * scale;
        mx = std::max(mx, w[j]);
      }
      for (double& x : w) sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < Sk; ++j) acc += w[j] / sum * vv[(g * Sk + j) * D + d];
        out[(h * Sq + i) * D + d] = acc;
      }
    }
  }
  return out;
}

TEST(Composites, AttentionCausalGroupedQuery) {
  const int64_t H = 4, G = 2, Sq = 3, Sk = 5, D = 8;
  auto q = f32(S({{"h", H}, {"q", Sq}, {"hd", D}}), random_values(H * Sq * D, 10));
  auto k = f32(S({{"h", G}, {"k", Sk}, {"hd", D}}), random_values(G * Sk * D, 11));
  auto v = f32(S({{"h", G}, {"k", Sk}, {"hd", D}}), random_values(G * Sk * D, 12));
  nn::AttentionOptions o{.causal = true};
  auto y = check_platforms([&](Tensor q, Tensor k, Tensor v) { return nn::attention(q, k, v, o); },
                           {q, k, v})[0];
  EXPECT_EQ(y.shape().str(), "f32{h=4,q=3,hd=8}");
  expect_values(y, reference_attention(q, k, v, H, G, Sq, Sk, D, true, 0, Sk - Sq), 1e-5);

  // Sliding window and an explicit offset (a cache filled to position 1).
  auto offset = HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {1});
  auto w = check_platforms(
      [&](Tensor q, Tensor k, Tensor v, Tensor off) {
        nn::AttentionOptions opts{.causal = true, .window = 2, .offset = off};
        return nn::attention(q, k, v, opts);
      },
      {q, k, v, offset})[0];
  expect_values(w, reference_attention(q, k, v, H, G, Sq, Sk, D, true, 2, 1), 1e-5);
}

// Long enough for every path of the CPU kernel: blocks of many query rows (keys transposed
// into tiles, or with AMX-BF16 and a head size that is a multiple of 32, bf16 rows on AMX tiles,
// the last block's rows padded) and a single decoding position (keys as they are), several
// chunks of the online softmax, a head size that is no multiple of the vector length (72) and
// one that is (64: a bf16 decoding step then reads keys and values as they are, with AVX-512
// BF16), a sliding window; f32 and bf16; under every SIMD target this CPU runs, against the
// double-precision reference.
// Causal attention of q, k and v (f32) in `dtype` with a sliding `window` (0: none) under
// every SIMD target, each result against `want` within `tol`.
void expect_attention_on_every_target(const HostBuffer& q, const HostBuffer& k, const HostBuffer& v,
                                      DType dtype, int64_t window, const std::vector<double>& want,
                                      double tol) {
  const cpu::simd::Target before = cpu::simd::current();
  for (const cpu::simd::Target& target : cpu::simd::available()) {
    SCOPED_TRACE("SIMD target " + target.name());
    cpu::simd::use(target);
    auto y = run1(
        [&](Tensor q, Tensor k, Tensor v) {
          nn::AttentionOptions o;
          o.causal = true;
          o.window = window;
          return nn::attention(q.convert(dtype), k.convert(dtype), v.convert(dtype), o)
              .convert(DType::f32);
        },
        {q, k, v});
    expect_values(y, want, tol);
  }
  cpu::simd::use(before);
}

TEST(Composites, AttentionLongCacheUnderEverySimdTarget) {
  const int64_t H = 8, G = 2, Sk = 600;
  for (auto [Sq, D] : {std::pair<int64_t, int64_t>{1, 72}, {37, 72}, {1, 64}, {37, 64}}) {
    for (int64_t window : {0, 100}) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(::testing::Message()
                     << "Sq " << Sq << ", D " << D << ", window " << window << ", " << name(dtype));
        auto q = f32(S({{"h", H}, {"q", Sq}, {"hd", D}}), random_values(H * Sq * D, 30));
        auto k = f32(S({{"h", G}, {"k", Sk}, {"hd", D}}), random_values(G * Sk * D, 31));
        auto v = f32(S({{"h", G}, {"k", Sk}, {"hd", D}}), random_values(G * Sk * D, 32));
        auto in_dtype = [&](const HostBuffer& x) {
          return run1([&](Tensor t) { return t.convert(dtype).convert(DType::f32); }, {x});
        };
        std::vector<double> want = reference_attention(in_dtype(q), in_dtype(k), in_dtype(v), H, G,
                                                       Sq, Sk, D, true, window, Sk - Sq);
        expect_attention_on_every_target(q, k, v, dtype, window, want,
                                         dtype == DType::f32 ? 1e-5 : 1e-2);
      }
    }
  }
}

// A prompt's blocks of rows in bf16, which take AMX tiles where the CPU has them (keys and
// values regrouped once for every block that reads them, in chunks of 512 keys): two batches,
// three chunks of keys (the last partial), blocks of rows whose first and last visible keys
// fall inside chunks (a window), and the last block of rows short. Under every SIMD target, so
// the vector path is checked against the same reference.
TEST(Composites, AttentionPromptBlocksInChunksOfKeys) {
  const int64_t B = 2, H = 8, G = 2, Sq = 150, Sk = 1300, D = 64;
  for (int64_t window : {0, 700}) {
    SCOPED_TRACE(::testing::Message() << "window " << window);
    auto bf16 = [&](std::initializer_list<Dim> dims, uint32_t seed) {
      const Shape shape = S(dims);
      return run1([](Tensor t) { return t.convert(DType::bf16).convert(DType::f32); },
                  {f32(shape, random_values(shape.numel(), seed))});
    };
    auto q = bf16({{"b", B}, {"h", H}, {"q", Sq}, {"hd", D}}, 40);
    auto k = bf16({{"b", B}, {"h", G}, {"k", Sk}, {"hd", D}}, 41);
    auto v = bf16({{"b", B}, {"h", G}, {"k", Sk}, {"hd", D}}, 42);
    std::vector<double> want;
    for (int64_t b = 0; b < B; ++b) {  // batch b of each, as its own buffer
      auto part = [&](const HostBuffer& x, int64_t heads, int64_t rows) {
        const std::vector<double> all = x.to_f64();
        const int64_t n = heads * rows * D;
        return f32(S({{"h", heads}, {"q", rows}, {"hd", D}}),
                   std::vector<float>(all.begin() + b * n, all.begin() + (b + 1) * n));
      };
      std::vector<double> y = reference_attention(part(q, H, Sq), part(k, G, Sk), part(v, G, Sk), H,
                                                  G, Sq, Sk, D, true, window, Sk - Sq);
      want.insert(want.end(), y.begin(), y.end());
    }
    expect_attention_on_every_target(q, k, v, DType::bf16, window, want, 1e-2);
  }
}

TEST(Composites, AttentionWithMaskAndBatchTags) {
  const int64_t B = 2, H = 2, Sq = 2, Sk = 3, D = 4;
  auto q = f32(S({{"b", B}, {"q", Sq}, {"h", H}, {"hd", D}}), random_values(B * H * Sq * D, 20));
  auto k = f32(S({{"b", B}, {"k", Sk}, {"h", H}, {"hd", D}}), random_values(B * H * Sk * D, 21));
  auto v = f32(S({{"b", B}, {"k", Sk}, {"h", H}, {"hd", D}}), random_values(B * H * Sk * D, 22));
  // Batch 1 cannot see key 0.
  auto mask = HostBuffer::from<bool>(S({{"b", B}, {"k", Sk}}, DType::boolean),
                                     {true, true, true, false, true, true});
  auto y = check_platforms(
      [&](Tensor q, Tensor k, Tensor v, Tensor m) { return nn::attention(q, k, v, {.mask = m}); },
      {q, k, v, mask})[0];
  EXPECT_EQ(y.shape().str(), "f32{b=2,q=2,h=2,hd=4}");
  // Batch 1 equals attention over keys 1..2 only.
  auto y1 = run1(
      [&](Tensor q, Tensor k, Tensor v) {
        return nn::attention(q.slice("b", 1, 1), k.slice("b", 1, 1).slice("k", 1, 2),
                             v.slice("b", 1, 1).slice("k", 1, 2), {});
      },
      {q, k, v});
  std::vector<double> all = y.to_f64(), second(all.begin() + all.size() / 2, all.end());
  expect_values(y1, second, 1e-5);
}

}  // namespace
}  // namespace prism
