// Attention as one kernel: softmax(q.k * scale + mask) . v, causal or not, grouped-query,
// with a sliding window, a mask and a query offset (a KV cache). q {B,H,Sq,D}, k {B,G,Sk,D},
// v {B,G,Sk,E}, mask {B,H,Sq,Sk}, output {B,H,Sq,E}; halves compute in f32.
//
// A work item is a block of query rows of one batch and key/value head: the rows of every
// query head that reads that key head (grouped-query attention), at up to kQueryBlock
// positions. It reads only the keys some of its rows can see (a causal row at position p sees
// keys up to p, so a KV cache's unwritten tail is never touched), converts them once into f32
// tiles, keys transposed (D x keys) so that a row's scores come out 16 keys at a time from
// plain multiply-adds, no horizontal sums; then each row's softmax runs over its visible
// range only, and its output sums the value rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "prism/backends/cpu/fast_math.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

using ir::Op;

namespace {

constexpr int64_t kQueryBlock = 16;  // query positions per work item
constexpr int64_t kLanes = 16;       // keys scored at once

template <typename S>
using Compute = std::conditional_t<std::is_same_v<S, double>, double, float>;

inline void exp_inplace(float* x, int64_t n) { exp_f32_simd(x, x, n); }
inline void exp_inplace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

struct Geometry {
  int64_t B, H, Sq, D, G, Sk, E, rep;
  int64_t offset;  // position of query row 0
  bool causal;
  int64_t window;

  // The keys row i can see: [first, last).
  int64_t first(int64_t i) const {
    return window > 0 ? std::clamp(offset + i - window + 1, int64_t{0}, Sk) : 0;
  }
  int64_t last(int64_t i) const { return causal ? std::clamp(offset + i + 1, int64_t{0}, Sk) : Sk; }
};

// Per thread: the block's keys (transposed) and values in the compute type, one row's scores
// and output sums.
template <typename T>
struct Scratch {
  std::vector<T> keys, values, scores, acc, q;
};

template <typename S, typename T>
void attend_block(const Geometry& g, const ir::AttentionAttrs& a,
                  std::span<const std::byte* const> in, DType mask_dtype, S* y, int64_t b,
                  int64_t gk, int64_t i0, int64_t i1, Scratch<T>& w) {
  const int64_t D = g.D, E = g.E;
  int64_t lo = g.Sk, hi = 0;  // the keys some row of the block sees
  for (int64_t i = i0; i < i1; ++i) {
    if (g.first(i) < g.last(i)) {
      lo = std::min(lo, g.first(i));
      hi = std::max(hi, g.last(i));
    }
  }
  const int64_t n = std::max<int64_t>(hi - lo, 0);
  const int64_t padded = (n + kLanes - 1) / kLanes * kLanes;
  const S* kp = reinterpret_cast<const S*>(in[1]) + ((b * g.G + gk) * g.Sk + lo) * D;
  const S* vp = reinterpret_cast<const S*>(in[2]) + ((b * g.G + gk) * g.Sk + lo) * E;
  w.keys.resize(static_cast<size_t>(D * padded));
  for (int64_t t = 0; t < padded; t += kLanes) {  // a tile of keys, transposed
    const int64_t keys = std::min(kLanes, n - t);
    for (int64_t d = 0; d < D; ++d) {
      T* to = w.keys.data() + d * padded + t;
      for (int64_t x = 0; x < keys; ++x) to[x] = to_compute<T>(kp[(t + x) * D + d]);
      for (int64_t x = keys; x < kLanes; ++x) to[x] = T(0);
    }
  }
  w.values.resize(static_cast<size_t>(n * E));
  for (int64_t x = 0; x < n * E; ++x) w.values[x] = to_compute<T>(vp[x]);
  w.scores.resize(static_cast<size_t>(padded));
  w.acc.resize(static_cast<size_t>(E));
  w.q.resize(static_cast<size_t>(D));

  const T scale = static_cast<T>(a.scale);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (int64_t h = gk * g.rep; h < (gk + 1) * g.rep; ++h) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = (b * g.H + h) * g.Sq + i;
      S* yr = y + row * E;
      // The row's visible keys, as indices into the block's tiles.
      const int64_t f = g.first(i) - lo, l = g.last(i) - lo;
      if (f >= l) {  // sees nothing: 0/0, as the softmax over no finite score gives
        std::fill(yr, yr + E, to_storage<S>(std::numeric_limits<T>::quiet_NaN()));
        continue;
      }
      const S* qr = reinterpret_cast<const S*>(in[0]) + row * D;
      for (int64_t d = 0; d < D; ++d) w.q[d] = to_compute<T>(qr[d]);
      // Scores of 16 keys at a time, from the tile aligned below f.
      const int64_t t0 = f / kLanes * kLanes;
      for (int64_t t = t0; t < l; t += kLanes) {
        T lanes[kLanes] = {};
        for (int64_t d = 0; d < D; ++d) {
          const T qd = w.q[d];
          const T* kd = w.keys.data() + d * padded + t;
          for (int64_t x = 0; x < kLanes; ++x) lanes[x] += qd * kd[x];
        }
        for (int64_t x = 0; x < kLanes; ++x) w.scores[t + x] = lanes[x] * scale;
      }
      T* s = w.scores.data() + f;
      const int64_t m = l - f;
      if (a.has_mask) {
        const int64_t at = row * g.Sk + lo + f;
        for (int64_t j = 0; j < m; ++j) {
          if (mask_dtype == DType::boolean) {
            if (!reinterpret_cast<const uint8_t*>(in[3])[at + j]) s[j] = minus_inf;
          } else {
            s[j] += static_cast<T>(load_f64(mask_dtype, in[3], at + j));
          }
        }
      }
      T mx = minus_inf;
      for (int64_t j = 0; j < m; ++j) mx = std::max(mx, s[j]);
      for (int64_t j = 0; j < m; ++j) s[j] -= mx;
      exp_inplace(s, m);
      T sum = 0;
      for (int64_t j = 0; j < m; ++j) sum += s[j];
      std::fill(w.acc.begin(), w.acc.end(), T(0));
      for (int64_t j = 0; j < m; ++j) {
        if (s[j] == 0) continue;
        const T p = s[j] / sum;
        const T* vr = w.values.data() + (f + j) * E;
        for (int64_t e = 0; e < E; ++e) w.acc[e] += p * vr[e];
      }
      for (int64_t e = 0; e < E; ++e) yr[e] = to_storage<S>(w.acc[e]);
    }
  }
}

}  // namespace

Kernel make_attention_kernel(const ir::Graph& graph, ir::ValueId id) {
  const ir::Node& n = graph.node(id);
  if (n.op != Op::attention) return nullptr;
  const auto a = n.attr<ir::AttentionAttrs>();
  Shape q = graph.node(n.inputs[0]).shape, k = graph.node(n.inputs[1]).shape;
  Shape v = graph.node(n.inputs[2]).shape;
  DType mask_dtype = a.has_mask ? graph.node(n.inputs[3]).shape.dtype() : DType::boolean;
  DType offset_dtype = a.has_offset ? graph.node(n.inputs.back()).shape.dtype() : DType::i64;
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    Geometry g{q.size(0), q.size(1), q.size(2), q.size(3),
               k.size(1), k.size(2), v.size(3), q.size(1) / k.size(1),
               0,         a.causal,  a.window};
    g.offset = a.has_offset ? load_index(offset_dtype, in.back(), 0) : g.Sk - g.Sq;
    const int64_t blocks = (g.Sq + kQueryBlock - 1) / kQueryBlock;
    visit_storage(q.dtype(), [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, double> || std::is_same_v<S, float> ||
                    std::is_same_v<S, F16> || std::is_same_v<S, BF16>) {
        using T = Compute<S>;
        S* y = reinterpret_cast<S*>(out);
        // Later query blocks see more keys: hand them out first.
        pool.parallel_for(g.B * g.G * blocks, 1, [&](int64_t t0, int64_t t1) {
          thread_local Scratch<T> scratch;
          for (int64_t t = t0; t < t1; ++t) {
            int64_t block = blocks - 1 - t % blocks, gk = (t / blocks) % g.G,
                    b = t / (blocks * g.G);
            int64_t i0 = block * kQueryBlock, i1 = std::min(g.Sq, i0 + kQueryBlock);
            attend_block<S, T>(g, a, in, mask_dtype, y, b, gk, i0, i1, scratch);
          }
        });
      } else {
        fail("cpu: attention needs a floating-point dtype, got {}", name(q.dtype()));
      }
    });
  };
}

}  // namespace prism::cpu
