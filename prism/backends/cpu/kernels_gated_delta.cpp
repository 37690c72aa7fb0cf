// The gated delta rule as one CPU kernel, per value head in parallel: token by token
// (decode), or chunk by chunk (prefill). Within a chunk of L tokens starting from state S0,
// with G_i = exp(g_1 + ... + g_i) and the corrections d_i = beta_i (v_i - G_i S0^T k_i -
// sum_{j<i} (G_i / G_j) (k_i . k_j) d_j) found by forward substitution, the outputs are
// o_i = G_i S0^T q_i + sum_{j<=i} (G_i / G_j) (q_i . k_j) d_j and the state after the chunk
// is G_L S0 + sum_j (G_L / G_j) k_j d_j^T: the recurrence, regrouped so that the work is
// products of small matrices. Halves compute in f32.
#include <cmath>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"
#include "prism/core/error.h"

namespace prism::cpu {
namespace {

struct Dims {
  int64_t batch, heads, key_heads, len, dk, dv;
};

// One value head: reads q, k (its key head), v, g, beta and the state; writes len output rows
// and then dk state rows to y.
template <typename S, typename T>
class HeadRule {
 public:
  HeadRule(const Dims& d, const S* q, const S* k, const S* v, const S* g, const S* beta,
           const S* state, S* y)
      : d_(d), q_(q), k_(k), v_(v), g_(g), beta_(beta), y_(y), s_(d.dk * d.dv) {
    for (int64_t i = 0; i < d.dk * d.dv; ++i) s_[i] = to_compute<T>(state[i]);
  }

  void recurrent() {
    const int64_t dk = d_.dk, dv = d_.dv;
    std::vector<T> qt(dk), kt(dk), delta(dv), o(dv);
    for (int64_t t = 0; t < d_.len; ++t) {
      load(q_ + t * dk, qt.data(), dk);
      load(k_ + t * dk, kt.data(), dk);
      T decay = std::exp(to_compute<T>(g_[t])), b = to_compute<T>(beta_[t]);
      for (T& x : s_) x *= decay;
      for (int64_t e = 0; e < dv; ++e) delta[e] = to_compute<T>(v_[t * dv + e]);
      for (int64_t i = 0; i < dk; ++i) {  // delta = beta (v - S^T k)
        const T* row = &s_[i * dv];
        for (int64_t e = 0; e < dv; ++e) delta[e] -= kt[i] * row[e];
      }
      for (T& x : delta) x *= b;
      std::fill(o.begin(), o.end(), T(0));
      for (int64_t i = 0; i < dk; ++i) {  // S += k delta^T; o = S^T q
        T* row = &s_[i * dv];
        for (int64_t e = 0; e < dv; ++e) {
          row[e] += kt[i] * delta[e];
          o[e] += qt[i] * row[e];
        }
      }
      store(o.data(), y_ + t * dv, dv);
    }
    store(s_.data(), y_ + d_.len * dv, dk * dv);
  }

  void chunked(int64_t chunk) {
    const int64_t dk = d_.dk, dv = d_.dv;
    std::vector<T> q(chunk * dk), k(chunk * dk), delta(chunk * dv), o(chunk * dv);
    std::vector<T> gc(chunk), b(chunk), kk(chunk * chunk);
    for (int64_t start = 0; start < d_.len; start += chunk) {
      const int64_t n = std::min(chunk, d_.len - start);
      load(q_ + start * dk, q.data(), n * dk);
      load(k_ + start * dk, k.data(), n * dk);
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc += to_compute<T>(g_[start + i]);
        gc[i] = acc;
        b[i] = to_compute<T>(beta_[start + i]);
      }
      // Right-hand sides beta_i (v_i - G_i S0^T k_i) and the reads G_i S0^T q_i.
      for (int64_t i = 0; i < n; ++i) {
        T* di = &delta[i * dv];
        T* oi = &o[i * dv];
        for (int64_t e = 0; e < dv; ++e) di[e] = 0, oi[e] = 0;
        for (int64_t r = 0; r < dk; ++r) {
          const T* row = &s_[r * dv];
          T kr = k[i * dk + r], qr = q[i * dk + r];
          for (int64_t e = 0; e < dv; ++e) di[e] += kr * row[e], oi[e] += qr * row[e];
        }
        T gi = std::exp(gc[i]);
        for (int64_t e = 0; e < dv; ++e) {
          di[e] = b[i] * (to_compute<T>(v_[(start + i) * dv + e]) - gi * di[e]);
          oi[e] *= gi;
        }
      }
      // Forward substitution: d_i -= beta_i sum_{j<i} (G_i / G_j) (k_i . k_j) d_j.
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < i; ++j) {
          kk[i * chunk + j] = std::exp(gc[i] - gc[j]) * dot(&k[i * dk], &k[j * dk], dk);
        }
        T* di = &delta[i * dv];
        for (int64_t j = 0; j < i; ++j) {
          T a = b[i] * kk[i * chunk + j];
          const T* dj = &delta[j * dv];
          for (int64_t e = 0; e < dv; ++e) di[e] -= a * dj[e];
        }
      }
      // Outputs: o_i += sum_{j<=i} (G_i / G_j) (q_i . k_j) d_j.
      for (int64_t i = 0; i < n; ++i) {
        T* oi = &o[i * dv];
        for (int64_t j = 0; j <= i; ++j) {
          T a = std::exp(gc[i] - gc[j]) * dot(&q[i * dk], &k[j * dk], dk);
          const T* dj = &delta[j * dv];
          for (int64_t e = 0; e < dv; ++e) oi[e] += a * dj[e];
        }
      }
      store(o.data(), y_ + start * dv, n * dv);
      // State: G_L S0 + sum_j (G_L / G_j) k_j d_j^T.
      T last = gc[n - 1], gl = std::exp(last);
      for (T& x : s_) x *= gl;
      for (int64_t j = 0; j < n; ++j) {
        T w = std::exp(last - gc[j]);
        const T* dj = &delta[j * dv];
        for (int64_t r = 0; r < dk; ++r) {
          T a = w * k[j * dk + r];
          T* row = &s_[r * dv];
          for (int64_t e = 0; e < dv; ++e) row[e] += a * dj[e];
        }
      }
    }
    store(s_.data(), y_ + d_.len * dv, dk * dv);
  }

 private:
  static void load(const S* from, T* to, int64_t n) {
    for (int64_t i = 0; i < n; ++i) to[i] = to_compute<T>(from[i]);
  }
  static void store(const T* from, S* to, int64_t n) {
    for (int64_t i = 0; i < n; ++i) to[i] = to_storage<S>(from[i]);
  }
  static T dot(const T* a, const T* b, int64_t n) {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
  }

  Dims d_;
  const S *q_, *k_, *v_, *g_, *beta_;
  S* y_;
  std::vector<T> s_;
};

}  // namespace

Kernel make_gated_delta_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::gated_delta_rule) return nullptr;
  const Shape& q = g.node(n.inputs[0]).shape;
  const Shape& v = g.node(n.inputs[2]).shape;
  const Dims d{v.size(0), v.size(1), q.size(1), v.size(2), q.size(3), v.size(3)};
  const int64_t chunk = n.attr<ir::GatedDeltaRuleAttrs>().chunk;
  const DType dtype = n.shape.dtype();
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    visit_storage(dtype, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, double> || std::is_same_v<S, float> ||
                    std::is_same_v<S, F16> || std::is_same_v<S, BF16>) {
        using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
        const S* qp = reinterpret_cast<const S*>(in[0]);
        const S* kp = reinterpret_cast<const S*>(in[1]);
        const S* vp = reinterpret_cast<const S*>(in[2]);
        const S* gp = reinterpret_cast<const S*>(in[3]);
        const S* bp = reinterpret_cast<const S*>(in[4]);
        const S* sp = reinterpret_cast<const S*>(in[5]);
        S* y = reinterpret_cast<S*>(out);
        const int64_t rep = d.heads / d.key_heads;
        pool.parallel_for(d.batch * d.heads, 1, [&](int64_t h0, int64_t h1) {
          for (int64_t bh = h0; bh < h1; ++bh) {
            int64_t b = bh / d.heads, kh = b * d.key_heads + (bh % d.heads) / rep;
            HeadRule<S, T> head(d, qp + kh * d.len * d.dk, kp + kh * d.len * d.dk,
                                vp + bh * d.len * d.dv, gp + bh * d.len, bp + bh * d.len,
                                sp + bh * d.dk * d.dv, y + bh * (d.len + d.dk) * d.dv);
            chunk > 0 ? head.chunked(chunk) : head.recurrent();
          }
        });
      } else {
        fail("cpu: gated_delta_rule needs a floating-point dtype, got {}", name(dtype));
      }
    });
  };
}

}  // namespace prism::cpu
