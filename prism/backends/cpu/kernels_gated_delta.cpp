// The gated delta rule as one CPU kernel, each value head on its own, heads in parallel.
//
// Decode (the recurrent form, token by token) is bound by the f32 state {dk, dv} of each head:
// one pass reads it for S^T k and S^T q, from which the correction delta = beta (v - G S^T k)
// and the output o = G S^T q + (k . q) delta follow; a second pass, over the rows still in
// cache, writes the next state G S + k delta^T. The state crosses memory once each way.
//
// Prefill (the chunked form) is bound by arithmetic. Within a chunk of L tokens starting from
// state S0, with G_i = exp(g_1 + ... + g_i) and the corrections d_i = beta_i (v_i - G_i S0^T
// k_i - sum_{j<i} (G_i / G_j) (k_i . k_j) d_j) found by forward substitution, the outputs are
// o_i = G_i S0^T q_i + sum_{j<=i} (G_i / G_j) (q_i . k_j) d_j and the state after the chunk
// is G_L S0 + sum_j (G_L / G_j) k_j d_j^T: the recurrence, regrouped into products of small
// matrices (K S0, Q S0, K K^T, Q K^T, the masked scores times D, K^T D), each computed by a
// register-blocked kernel. Halves compute in f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"
#include "prism/core/error.h"

namespace prism::cpu {
namespace {

// 64-byte vectors of T through the compilers' vector extensions: one AVX-512 register where
// the CPU has them, two or four narrower ones elsewhere. Loads and stores need no alignment.
template <typename T>
struct Simd {
  typedef T V __attribute__((vector_size(64)));
  static constexpr int64_t W = 64 / sizeof(T);
  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V splat(T x) { return V{} + x; }
};

// R rows by NV vectors of C = A B (+ C): R x NV sums stay in registers, and each vector of a
// row of B is loaded once for the R rows of A.
template <typename T, int R, int NV>
void tile(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t k,
          bool accumulate) {
  using X = Simd<T>;
  typename X::V sum[R][NV] = {};
  for (int64_t p = 0; p < k; ++p) {
    typename X::V row[NV];
    for (int v = 0; v < NV; ++v) row[v] = X::load(b + p * ldb + v * X::W);
    for (int r = 0; r < R; ++r) {
      typename X::V x = X::splat(a[r * lda + p]);
      for (int v = 0; v < NV; ++v) sum[r][v] += x * row[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) {
      T* out = c + r * ldc + v * X::W;
      X::store(out, accumulate ? X::load(out) + sum[r][v] : sum[r][v]);
    }
  }
}

// C[m x n] = A[m x k] B[k x n], or C += A B when accumulating; all row-major, with leading
// dimensions lda, ldb, ldc.
template <typename T>
void matmul(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t m,
            int64_t k, int64_t n, bool accumulate) {
  constexpr int R = 4, NV = 4;
  constexpr int64_t W = Simd<T>::W;
  int64_t j = 0;
  auto rows = [&]<int V>(int64_t col) {
    int64_t i = 0;
    for (; i + R <= m; i += R) {
      tile<T, R, V>(a + i * lda, lda, b + col, ldb, c + i * ldc + col, ldc, k, accumulate);
    }
    for (; i < m; ++i) {
      tile<T, 1, V>(a + i * lda, lda, b + col, ldb, c + i * ldc + col, ldc, k, accumulate);
    }
  };
  for (; j + NV * W <= n; j += NV * W) rows.template operator()<NV>(j);
  for (; j + W <= n; j += W) rows.template operator()<1>(j);
  for (; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      T sum = accumulate ? c[i * ldc + j] : T(0);
      for (int64_t p = 0; p < k; ++p) sum += a[i * lda + p] * b[p * ldb + j];
      c[i * ldc + j] = sum;
    }
  }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// sk = S^T k and sq = S^T q over NV vectors of columns of S (rows of ld values).
template <typename T, int NV>
void project(const T* s, int64_t ld, int64_t rows, const T* k, const T* q, T* sk, T* sq) {
  using X = Simd<T>;
  typename X::V ak[NV] = {}, aq[NV] = {};
  for (int64_t i = 0; i < rows; ++i) {
    typename X::V ki = X::splat(k[i]), qi = X::splat(q[i]);
    for (int v = 0; v < NV; ++v) {
      typename X::V x = X::load(s + i * ld + v * X::W);
      ak[v] += ki * x;
      aq[v] += qi * x;
    }
  }
  for (int v = 0; v < NV; ++v) X::store(sk + v * X::W, ak[v]), X::store(sq + v * X::W, aq[v]);
}

struct Dims {
  int64_t batch, heads, key_heads, len, dk, dv;
};

// One value head's operands in the compute type: q, k {len, dk}, v {len, dv}, g, beta {len},
// the state {dk, dv}; writes out {len, dv} and next {dk, dv}.
template <typename T>
struct Head {
  const T *q, *k, *v, *g, *beta, *state;
  T *out, *next;
};

// Token by token; `next` may be `state`.
template <typename T>
void recurrent(const Dims& d, const Head<T>& h, std::vector<T>& scratch) {
  const int64_t dk = d.dk, dv = d.dv;
  constexpr int64_t W = Simd<T>::W, NV = 8;
  scratch.resize(3 * dv);
  T *sk = scratch.data(), *sq = sk + dv, *delta = sq + dv;
  const T* s = h.state;
  for (int64_t t = 0; t < d.len; ++t) {
    const T *q = h.q + t * dk, *k = h.k + t * dk, *v = h.v + t * dv;
    int64_t j = 0;
    for (; j + NV * W <= dv; j += NV * W) project<T, NV>(s + j, dv, dk, k, q, sk + j, sq + j);
    for (; j + W <= dv; j += W) project<T, 1>(s + j, dv, dk, k, q, sk + j, sq + j);
    for (; j < dv; ++j) {
      sk[j] = sq[j] = 0;
      for (int64_t i = 0; i < dk; ++i) sk[j] += k[i] * s[i * dv + j], sq[j] += q[i] * s[i * dv + j];
    }
    const T decay = std::exp(h.g[t]), beta = h.beta[t], kq = dot(k, q, dk);
    T* o = h.out + t * dv;
    for (int64_t e = 0; e < dv; ++e) {
      delta[e] = beta * (v[e] - decay * sk[e]);
      o[e] = decay * sq[e] + kq * delta[e];
    }
    for (int64_t i = 0; i < dk; ++i) {
      const T* from = s + i * dv;
      T* to = h.next + i * dv;
      const T ki = k[i];
      for (int64_t e = 0; e < dv; ++e) to[e] = decay * from[e] + ki * delta[e];
    }
    s = h.next;
  }
  if (d.len == 0 && h.next != h.state) std::copy(h.state, h.state + dk * dv, h.next);
}

// Chunk by chunk, the state updated in `next`.
template <typename T>
void chunked(const Dims& d, const Head<T>& h, int64_t chunk, std::vector<T>& scratch) {
  const int64_t dk = d.dk, dv = d.dv, c = chunk;
  scratch.resize(2 * c * dv + 2 * c * c + dk * c + 3 * c);
  T *dm = scratch.data(), *om = dm + c * dv;  // D and O, {c, dv}
  T *kk = om + c * dv, *qk = kk + c * c;      // K K^T, Q K^T, {c, c}
  T* kt = qk + c * c;                         // K^T, {dk, c}
  T *gc = kt + dk * c, *gi = gc + c, *b = gi + c;
  T* s = h.next;
  if (s != h.state) std::copy(h.state, h.state + dk * dv, s);
  for (int64_t start = 0; start < d.len; start += c) {
    const int64_t n = std::min(c, d.len - start);
    const T *q = h.q + start * dk, *k = h.k + start * dk, *v = h.v + start * dv;
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc += h.g[start + i];
      gc[i] = acc;
      gi[i] = std::exp(acc);
      b[i] = h.beta[start + i];
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < dk; ++r) kt[r * c + i] = k[i * dk + r];
    }
    matmul(k, dk, kt, c, kk, c, n, dk, n, false);    // k_i . k_j
    matmul(q, dk, kt, c, qk, c, n, dk, n, false);    // q_i . k_j
    matmul(k, dk, s, dv, dm, dv, n, dk, dv, false);  // S0^T k_i
    matmul(q, dk, s, dv, om, dv, n, dk, dv, false);  // S0^T q_i
    // Right-hand sides beta_i (v_i - G_i S0^T k_i), then forward substitution:
    // d_i -= beta_i sum_{j<i} (G_i / G_j) (k_i . k_j) d_j.
    for (int64_t i = 0; i < n; ++i) {
      T* di = dm + i * dv;
      for (int64_t e = 0; e < dv; ++e) di[e] = b[i] * (v[i * dv + e] - gi[i] * di[e]);
      for (int64_t j = 0; j < i; ++j) {
        const T a = b[i] * std::exp(gc[i] - gc[j]) * kk[i * c + j];
        const T* dj = dm + j * dv;
        for (int64_t e = 0; e < dv; ++e) di[e] -= a * dj[e];
      }
    }
    // Outputs G_i S0^T q_i + sum_{j<=i} (G_i / G_j) (q_i . k_j) d_j: the scores masked to
    // j <= i and weighted, times D.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        qk[i * c + j] = j <= i ? std::exp(gc[i] - gc[j]) * qk[i * c + j] : T(0);
      }
      for (int64_t e = 0; e < dv; ++e) om[i * dv + e] *= gi[i];
    }
    matmul(qk, c, dm, dv, om, dv, n, n, dv, true);
    std::copy(om, om + n * dv, h.out + start * dv);
    // State: G_L S0 + sum_j (G_L / G_j) k_j d_j^T.
    const T last = gc[n - 1], gl = gi[n - 1];
    for (int64_t j = 0; j < n; ++j) {
      const T w = std::exp(last - gc[j]);
      for (int64_t r = 0; r < dk; ++r) kt[r * c + j] *= w;
    }
    for (int64_t i = 0; i < dk * dv; ++i) s[i] *= gl;
    matmul(kt, c, dm, dv, s, dv, dk, n, dv, true);
  }
}

// Runs one head with storage type S: straight on the buffers when S is the compute type, else
// through copies converted to it.
template <typename S, typename T>
class HeadRunner {
 public:
  HeadRunner(const Dims& d, int64_t chunk) : d_(d), chunk_(chunk) {}

  void run(const S* q, const S* k, const S* v, const S* g, const S* beta, const S* state, S* y) {
    const int64_t len = d_.len, dk = d_.dk, dv = d_.dv;
    Head<T> h;
    if constexpr (std::is_same_v<S, T>) {
      h = {q, k, v, g, beta, state, y, y + len * dv};
    } else {
      copies_.resize(2 * len * dk + 2 * len * dv + 2 * len + 2 * dk * dv);
      T* p = copies_.data();
      auto take = [&](const S* from, int64_t n) {
        T* at = p;
        for (int64_t i = 0; i < n; ++i) at[i] = to_compute<T>(from[i]);
        p += n;
        return at;
      };
      h.q = take(q, len * dk);
      h.k = take(k, len * dk);
      h.v = take(v, len * dv);
      h.g = take(g, len);
      h.beta = take(beta, len);
      T* st = take(state, dk * dv);
      h.state = h.next = st;
      h.out = p;
    }
    chunk_ > 0 ? chunked(d_, h, chunk_, scratch_) : recurrent(d_, h, scratch_);
    if constexpr (!std::is_same_v<S, T>) {
      for (int64_t i = 0; i < len * dv; ++i) y[i] = to_storage<S>(h.out[i]);
      for (int64_t i = 0; i < dk * dv; ++i) y[len * dv + i] = to_storage<S>(h.next[i]);
    }
  }

 private:
  Dims d_;
  int64_t chunk_;
  std::vector<T> copies_, scratch_;
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
          HeadRunner<S, T> runner(d, chunk);
          for (int64_t bh = h0; bh < h1; ++bh) {
            int64_t b = bh / d.heads, kh = b * d.key_heads + (bh % d.heads) / rep;
            runner.run(qp + kh * d.len * d.dk, kp + kh * d.len * d.dk, vp + bh * d.len * d.dv,
                       gp + bh * d.len, bp + bh * d.len, sp + bh * d.dk * d.dv,
                       y + bh * (d.len + d.dk) * d.dv);
          }
        });
      } else {
        fail("cpu: gated_delta_rule needs a floating-point dtype, got {}", name(dtype));
      }
    });
  };
}

}  // namespace prism::cpu
