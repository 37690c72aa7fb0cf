// The composites as single kernels: softmax, log_softmax, rms_norm, layer_norm and rope
// (attention has its own file). Halves compute in f32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "prism/backends/cpu/fast_math.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

using ir::Op;

namespace {

template <typename F>
void visit_float(DType t, F&& f) {
  visit_storage(t, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, double> || std::is_same_v<S, float> || std::is_same_v<S, F16> ||
                  std::is_same_v<S, BF16>) {
      f(s);
    } else {
      fail("cpu: {} needs a floating-point dtype", name(t));
    }
  });
}

template <typename S>
using Compute = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Calls fn(base) for every lane along the middle axis of `s` (its elements are at
// base + m * s.inner), in parallel.
template <typename F>
void for_each_lane(const Split3& s, ThreadPool& pool, F&& fn) {
  pool.parallel_for(s.outer * s.inner, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) fn(t / s.inner * s.middle * s.inner + t % s.inner);
  });
}

inline void exp_row(const float* x, float* y, int64_t n) { exp_f32_simd(x, y, n); }
inline void exp_row(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

Kernel softmax(const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Shape x = n.shape;
  bool log = n.op == Op::log_softmax;
  Split3 s = split3(x, axis, axis + 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    visit_float(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using T = Compute<S>;
      const S* xp = reinterpret_cast<const S*>(in[0]);
      S* y = reinterpret_cast<S*>(out);
      for_each_lane(s, pool, [&](int64_t base) {
        thread_local std::vector<T> row, ex;
        row.resize(s.middle);
        ex.resize(s.middle);
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t m = 0; m < s.middle; ++m) {
          row[m] = to_compute<T>(xp[base + m * s.inner]);
          mx = std::max(mx, row[m]);
        }
        for (int64_t m = 0; m < s.middle; ++m) row[m] -= mx;
        exp_row(row.data(), ex.data(), s.middle);
        T sum = 0;
        for (int64_t m = 0; m < s.middle; ++m) sum += ex[m];
        T lsum = std::log(sum), inv = T(1) / sum;
        for (int64_t m = 0; m < s.middle; ++m) {
          T v = log ? row[m] - lsum : ex[m] * inv;
          y[base + m * s.inner] = to_storage<S>(v);
        }
      });
    });
  };
}

Kernel norm(const ir::Node& n) {
  const auto a = n.attr<ir::NormAttrs>();
  Shape x = n.shape;
  bool center = n.op == Op::layer_norm;
  Split3 s = split3(x, a.axes.front(), a.axes.back() + 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    visit_float(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using T = Compute<S>;
      const S* xp = reinterpret_cast<const S*>(in[0]);
      S* y = reinterpret_cast<S*>(out);
      for_each_lane(s, pool, [&](int64_t base) {
        double mean = 0, sq = 0;
        if (center) {
          for (int64_t m = 0; m < s.middle; ++m) mean += to_compute<T>(xp[base + m * s.inner]);
          mean /= double(s.middle);
        }
        for (int64_t m = 0; m < s.middle; ++m) {
          double d = to_compute<T>(xp[base + m * s.inner]) - mean;
          sq += d * d;
        }
        T scale = static_cast<T>(1.0 / std::sqrt(sq / double(s.middle) + a.eps));
        for (int64_t m = 0; m < s.middle; ++m) {
          T v = (to_compute<T>(xp[base + m * s.inner]) - static_cast<T>(mean)) * scale;
          y[base + m * s.inner] = to_storage<S>(v);
        }
      });
    });
  };
}

Kernel rope(const ir::Node& n) {
  bool interleaved = n.attr<ir::RopeAttrs>().interleaved;
  Shape x = n.shape;
  int64_t d = x.size(x.rank() - 1), half = d / 2, rows = x.numel() / std::max<int64_t>(d, 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    visit_float(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using T = Compute<S>;
      const S* xp = reinterpret_cast<const S*>(in[0]);
      const S* cp = reinterpret_cast<const S*>(in[1]);
      const S* sp = reinterpret_cast<const S*>(in[2]);
      S* y = reinterpret_cast<S*>(out);
      pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const S* xr = xp + r * d;
          S* yr = y + r * d;
          for (int64_t i = 0; i < half; ++i) {
            T c = to_compute<T>(cp[r * half + i]), s = to_compute<T>(sp[r * half + i]);
            int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + half;
            T a = to_compute<T>(xr[p]), b = to_compute<T>(xr[q]);
            yr[p] = to_storage<S>(a * c - b * s);
            yr[q] = to_storage<S>(b * c + a * s);
          }
        }
      });
    });
  };
}

}  // namespace

bool cpu_supports(const ir::Node& n) {
  if (n.op == Op::rms_norm || n.op == Op::layer_norm) {  // one contiguous run of axes
    const auto& axes = n.attr<ir::NormAttrs>().axes;
    return !axes.empty() && axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
  }
  return true;
}

Kernel make_nn_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::softmax:
    case Op::log_softmax:
      return softmax(n);
    case Op::rms_norm:
    case Op::layer_norm:
      return norm(n);
    case Op::rope:
      return rope(n);
    default:
      return nullptr;
  }
}

Kernel make_kernel(const ir::Graph& g, ir::ValueId id) {
  for (auto make :
       {make_data_kernel, make_reduce_kernel, make_dot_kernel, make_conv_kernel, make_nn_kernel,
        make_attention_kernel, make_short_conv_kernel, make_gated_delta_kernel}) {
    if (Kernel k = make(g, id)) return k;
  }
  fail("cpu: no kernel for {}", ir::print(g, id));
}

}  // namespace prism::cpu
