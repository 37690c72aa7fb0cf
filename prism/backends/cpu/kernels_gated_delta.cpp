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
//
// At Qwen3.5-0.8B's shapes (16 heads, 128 x 128 states, chunks of 64) a 512-token layer took
// 8.4 ms on 2 cores of an Intel Xeon (AVX-512), about 30 % of the f32 FMA peak; 5.5 ms after
// the products' broadcasts stopped adding a zero first (Simd::splat), the decays G_i / G_j
// were computed once a chunk in vector code (for the substitution and the scores alike), the
// substitution kept a row of D in registers, K^T was made by transposes in registers and the
// state's K^T D read K as it is.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "prism/backends/cpu/fast_math.h"
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
  // x - 0 is x for every x (0 + x is not, for x = -0), so the compiler drops the subtraction
  // and broadcasts x straight from memory; with `V{} + x` it added a zero, then broadcast,
  // two more instructions per row of a tile on the ports the multiply-adds need.
  static V splat(T x) { return x - V{}; }
};

// A's element (r, p) at a[r * lda + p * ap]: ap = 1 for a row-major A, lda = 1 and ap = the
// rows' length for the transpose of a row-major matrix (read as it is: A's values are only
// ever broadcast, one at a time).
// R rows by NV vectors of C = A B (+ C): R x NV sums stay in registers, and each vector of a
// row of B is loaded once for the R rows of A.
template <typename T, int R, int NV>
void tile(const T* a, int64_t lda, int64_t ap, const T* b, int64_t ldb, T* c, int64_t ldc,
          int64_t k, bool accumulate) {
  using X = Simd<T>;
  typename X::V sum[R][NV] = {};
  for (int64_t p = 0; p < k; ++p) {
    typename X::V row[NV];
    for (int v = 0; v < NV; ++v) row[v] = X::load(b + p * ldb + v * X::W);
    for (int r = 0; r < R; ++r) {
      typename X::V x = X::splat(a[r * lda + p * ap]);
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

// C[m x n] = A[m x k] B[k x n], or C += A B when accumulating; B and C row-major with leading
// dimensions ldb, ldc, A's element (i, p) at a[i * lda + p * ap] (tile).
template <typename T>
void matmul(const T* a, int64_t lda, int64_t ap, const T* b, int64_t ldb, T* c, int64_t ldc,
            int64_t m, int64_t k, int64_t n, bool accumulate) {
  constexpr int R = 4, NV = 4;
  constexpr int64_t W = Simd<T>::W;
  int64_t j = 0;
  auto rows = [&]<int V>(int64_t col) {
    int64_t i = 0;
    for (; i + R <= m; i += R) {
      tile<T, R, V>(a + i * lda, lda, ap, b + col, ldb, c + i * ldc + col, ldc, k, accumulate);
    }
    for (; i < m; ++i) {
      tile<T, 1, V>(a + i * lda, lda, ap, b + col, ldb, c + i * ldc + col, ldc, k, accumulate);
    }
  };
  for (; j + NV * W <= n; j += NV * W) rows.template operator()<NV>(j);
  for (; j + W <= n; j += W) rows.template operator()<1>(j);
  for (; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      T sum = accumulate ? c[i * ldc + j] : T(0);
      for (int64_t p = 0; p < k; ++p) sum += a[i * lda + p * ap] * b[p * ldb + j];
      c[i * ldc + j] = sum;
    }
  }
}

// One round of a transpose in registers: rows r and r + 2^B of a W x W block (r's bit B
// clear) exchange their halves across bit B of the column, swapping that bit of the row and
// of the column; after the rounds for every bit, row r holds column r.
template <typename T, int B, size_t... I>
typename Simd<T>::V swap_low(typename Simd<T>::V a, typename Simd<T>::V b,
                             std::index_sequence<I...>) {
  constexpr int64_t W = Simd<T>::W;
  return __builtin_shufflevector(a, b, (((I >> B) & 1) ? W + I - (1 << B) : I)...);
}
template <typename T, int B, size_t... I>
typename Simd<T>::V swap_high(typename Simd<T>::V a, typename Simd<T>::V b,
                              std::index_sequence<I...>) {
  constexpr int64_t W = Simd<T>::W;
  return __builtin_shufflevector(a, b, (((I >> B) & 1) ? W + I : I + (1 << B))...);
}
template <typename T, int B>
void transpose_round(typename Simd<T>::V* v) {
  constexpr int64_t W = Simd<T>::W;
  if constexpr ((int64_t{1} << B) < W) {
    for (int64_t r = 0; r < W; ++r) {
      if (r & (int64_t{1} << B)) continue;
      const typename Simd<T>::V a = v[r], b = v[r | (int64_t{1} << B)];
      v[r] = swap_low<T, B>(a, b, std::make_index_sequence<W>());
      v[r | (int64_t{1} << B)] = swap_high<T, B>(a, b, std::make_index_sequence<W>());
    }
    transpose_round<T, B + 1>(v);
  }
}

// b[j * ldb + i] = a[i * lda + j] for i < rows, j < cols: blocks of W x W through registers.
template <typename T>
void transpose(const T* a, int64_t lda, int64_t rows, int64_t cols, T* b, int64_t ldb) {
  using X = Simd<T>;
  constexpr int64_t W = X::W;
  const int64_t rows_w = rows / W * W, cols_w = cols / W * W;
  for (int64_t i = 0; i < rows_w; i += W) {
    for (int64_t j = 0; j < cols_w; j += W) {
      typename X::V v[W];
      for (int64_t r = 0; r < W; ++r) v[r] = X::load(a + (i + r) * lda + j);
      transpose_round<T, 0>(v);
      for (int64_t r = 0; r < W; ++r) X::store(b + (j + r) * ldb + i, v[r]);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = i < rows_w ? cols_w : 0; j < cols; ++j) b[j * ldb + i] = a[i * lda + j];
  }
}

// y = exp(x) over n values.
inline void exp_values(const float* x, float* y, int64_t n) { exp_f32_simd(x, y, n); }
inline void exp_values(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

// d_i -= sum_{j<i} a_ij d_j for i < n in turn (forward substitution, rows of d ld apart, a's
// rows lda apart): NV vectors of a row's values at a time stay in registers over the j.
template <typename T, int NV>
void substitute(const T* a, int64_t lda, T* d, int64_t ld, int64_t n, int64_t col) {
  using X = Simd<T>;
  for (int64_t i = 1; i < n; ++i) {
    typename X::V acc[NV];
    T* di = d + i * ld + col;
    for (int v = 0; v < NV; ++v) acc[v] = X::load(di + v * X::W);
    for (int64_t j = 0; j < i; ++j) {
      const typename X::V x = X::splat(a[i * lda + j]);
      const T* dj = d + j * ld + col;
      for (int v = 0; v < NV; ++v) acc[v] -= x * X::load(dj + v * X::W);
    }
    for (int v = 0; v < NV; ++v) X::store(di + v * X::W, acc[v]);
  }
}
template <typename T>
void substitute(const T* a, int64_t lda, T* d, int64_t ld, int64_t n, int64_t width) {
  constexpr int64_t W = Simd<T>::W, NV = 8;
  int64_t e = 0;
  for (; e + NV * W <= width; e += NV * W) substitute<T, NV>(a, lda, d, ld, n, e);
  for (; e + W <= width; e += W) substitute<T, 1>(a, lda, d, ld, n, e);
  for (; e < width; ++e) {
    for (int64_t i = 1; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j) d[i * ld + e] -= a[i * lda + j] * d[j * ld + e];
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
  scratch.resize(c * dv + 3 * c * c + dk * c + 3 * c);
  T* dm = scratch.data();                                  // D, {c, dv}
  T *kk = dm + c * dv, *qk = kk + c * c, *w = qk + c * c;  // K K^T, Q K^T, decays, {c, c}
  T* kt = w + c * c;                                       // K^T, {dk, c}
  T *gc = kt + dk * c, *gi = gc + c, *b = gi + c;
  T* s = h.next;
  if (s != h.state) std::copy(h.state, h.state + dk * dv, s);
  for (int64_t start = 0; start < d.len; start += c) {
    const int64_t n = std::min(c, d.len - start);
    const T *q = h.q + start * dk, *k = h.k + start * dk, *v = h.v + start * dv;
    T* om = h.out + start * dv;  // O, {n, dv}
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc += h.g[start + i];
      gc[i] = acc;
      b[i] = h.beta[start + i];
    }
    exp_values(gc, gi, n);
    // The decays G_i / G_j = exp(g_{j+1} + ... + g_i) for j <= i, 0 above the diagonal.
    for (int64_t i = 0; i < n; ++i) {
      T* wi = w + i * c;
      for (int64_t j = 0; j <= i; ++j) wi[j] = gc[i] - gc[j];
      exp_values(wi, wi, i + 1);
      std::fill(wi + i + 1, wi + n, T(0));
    }
    transpose(k, dk, n, dk, kt, c);
    matmul(k, dk, 1, kt, c, kk, c, n, dk, n, false);    // k_i . k_j
    matmul(q, dk, 1, kt, c, qk, c, n, dk, n, false);    // q_i . k_j
    matmul(k, dk, 1, s, dv, dm, dv, n, dk, dv, false);  // S0^T k_i
    matmul(q, dk, 1, s, dv, om, dv, n, dk, dv, false);  // S0^T q_i
    // Right-hand sides beta_i (v_i - G_i S0^T k_i), then forward substitution:
    // d_i -= beta_i sum_{j<i} (G_i / G_j) (k_i . k_j) d_j.
    for (int64_t i = 0; i < n; ++i) {
      T* di = dm + i * dv;
      for (int64_t e = 0; e < dv; ++e) di[e] = b[i] * (v[i * dv + e] - gi[i] * di[e]);
      for (int64_t j = 0; j < i; ++j) kk[i * c + j] *= b[i] * w[i * c + j];
    }
    substitute(kk, c, dm, dv, n, dv);
    // Outputs G_i S0^T q_i + sum_{j<=i} (G_i / G_j) (q_i . k_j) d_j: the scores masked to
    // j <= i and weighted, times D.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) qk[i * c + j] *= w[i * c + j];
      for (int64_t e = 0; e < dv; ++e) om[i * dv + e] *= gi[i];
    }
    matmul(qk, c, 1, dm, dv, om, dv, n, n, dv, true);
    // State: G_L S0 + sum_j k_j ((G_L / G_j) d_j)^T, K^T read from K as it is.
    const T gl = gi[n - 1];
    for (int64_t j = 0; j < n; ++j) {
      const T wj = w[(n - 1) * c + j];
      for (int64_t e = 0; e < dv; ++e) dm[j * dv + e] *= wj;
    }
    for (int64_t i = 0; i < dk * dv; ++i) s[i] *= gl;
    matmul(k, 1, dk, dm, dv, s, dv, dk, n, dv, true);
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
