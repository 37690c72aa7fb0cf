// Reductions, arg-reductions, cumulative sums and sorting along axes. For floating-point
// values the loops are in reduce_rows.cpp, compiled per SIMD target; integers (and cumulative
// sums along the innermost axis) take the plain loops here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/reduce_rows.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

using ir::Op;

namespace {

// Accumulator: double for floats, int64_t for integers (sums of i8/u8 do not overflow).
template <typename S>
using Acc = std::conditional_t<std::is_integral_v<S>, int64_t, double>;

template <typename A>
A initial(Op op) {
  switch (op) {
    case Op::reduce_sum:
      return 0;
    case Op::reduce_prod:
      return 1;
    case Op::reduce_max:
      return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::lowest();
    default:
      return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::max();
  }
}

template <typename A>
A combine(Op op, A acc, A v) {
  switch (op) {
    case Op::reduce_sum:
      return acc + v;
    case Op::reduce_prod:
      return acc * v;
    case Op::reduce_max:
      if constexpr (std::is_floating_point_v<A>) {
        if (std::isnan(v) || std::isnan(acc)) return std::numeric_limits<A>::quiet_NaN();
      }
      return std::max(acc, v);
    default:
      if constexpr (std::is_floating_point_v<A>) {
        if (std::isnan(v) || std::isnan(acc)) return std::numeric_limits<A>::quiet_NaN();
      }
      return std::min(acc, v);
  }
}

Reduction reduction(Op op) {
  switch (op) {
    case Op::reduce_sum:
      return Reduction::sum;
    case Op::reduce_prod:
      return Reduction::prod;
    case Op::reduce_max:
      return Reduction::max;
    default:
      return Reduction::min;
  }
}

// A reduction of floating-point values laid out as [outer, middle, inner], over middle:
// whole rows at a time when inner is 1, else a step per middle index over all inner lanes.
// store(o, value) receives each result.
template <typename Store>
void reduce_floats(Op op, DType t, const Split3& s, const std::byte* x, Store&& store,
                   ThreadPool& pool) {
  const ReduceRowKernels kernels = reduce_row_kernels();
  const Reduction r = reduction(op);
  const int64_t elem = size_of(t);
  pool.parallel_for(s.outer, 1, [&](int64_t o0, int64_t o1) {
    if (s.inner == 1) {
      std::vector<double> results(o1 - o0);
      kernels.rows(r, t, x + o0 * s.middle * elem, o1 - o0, s.middle, results.data());
      for (int64_t o = o0; o < o1; ++o) store(o, results[o - o0]);
      return;
    }
    std::vector<double> acc(s.inner);
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(acc.begin(), acc.end(), initial<double>(op));
      for (int64_t m = 0; m < s.middle; ++m) {
        kernels.accumulate(r, t, x + (o * s.middle + m) * s.inner * elem, s.inner, acc.data());
      }
      for (int64_t i = 0; i < s.inner; ++i) store(o * s.inner + i, acc[i]);
    }
  });
}

Kernel reduce(const ir::Graph& g, const ir::Node& n) {
  Shape x = g.node(n.inputs[0]).shape;
  const auto& axes = n.attr<ir::AxesAttrs>().axes;
  Op op = n.op;
  // Reduced axes moved last (a transpose, when they are not already a contiguous run), then
  // each output element reduces a [middle, inner] block.
  bool contiguous = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
  std::vector<int> perm;
  for (int i = 0; i < x.rank(); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) perm.push_back(i);
  perm.insert(perm.end(), axes.begin(), axes.end());
  Shape moved = x;
  std::array<int64_t, kMaxRank> moved_src{};
  if (!contiguous) {
    std::vector<Dim> dims;
    auto xs = x.strides();
    for (size_t i = 0; i < perm.size(); ++i) {
      dims.push_back(x.dim(perm[i]));
      moved_src[i] = xs[perm[i]];
    }
    moved = Shape(x.dtype(), dims);
  }
  int first = contiguous ? (axes.empty() ? x.rank() : axes.front()) : x.rank() - int(axes.size());
  int last = contiguous ? (axes.empty() ? x.rank() : axes.back() + 1) : x.rank();
  Split3 s = split3(moved, first, last);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    const std::byte* src = in[0];
    std::unique_ptr<std::byte[]> scratch;
    if (!contiguous) {
      scratch = std::make_unique<std::byte[]>(x.bytes());
      strided_copy(moved, size_of(x.dtype()), in[0], 0, moved_src, scratch.get(), 0,
                   moved.strides(), pool);
      src = scratch.get();
    }
    visit_storage(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      const S* xp = reinterpret_cast<const S*>(src);
      S* y = reinterpret_cast<S*>(out);
      if (is_float(x.dtype())) {  // the loops of the SIMD target in use
        reduce_floats(
            op, x.dtype(), s, src, [&](int64_t o, double v) { y[o] = to_storage<S>(v); }, pool);
        return;
      }
      pool.parallel_for(s.outer, 1, [&](int64_t o0, int64_t o1) {
        std::vector<A> acc(s.inner);
        for (int64_t o = o0; o < o1; ++o) {
          std::fill(acc.begin(), acc.end(), initial<A>(op));
          for (int64_t m = 0; m < s.middle; ++m) {
            const S* row = xp + (o * s.middle + m) * s.inner;
            for (int64_t i = 0; i < s.inner; ++i) {
              acc[i] = combine(op, acc[i], to_compute<A>(row[i]));
            }
          }
          for (int64_t i = 0; i < s.inner; ++i) y[o * s.inner + i] = to_storage<S>(acc[i]);
        }
      });
    });
  };
}

// The same for arg_reduce, into indices of dtype out_dtype.
void arg_reduce_floats(bool is_max, DType t, const Split3& s, const std::byte* x, DType out_dtype,
                       std::byte* out) {
  const ReduceRowKernels kernels = reduce_row_kernels();
  const int64_t elem = size_of(t);
  std::vector<int64_t> index(s.outer * s.inner, 0);
  if (s.inner == 1) {
    for (int64_t o = 0; o < s.outer; ++o) {
      index[o] = kernels.arg(is_max, t, x + o * s.middle * elem, s.middle);
    }
  } else {
    std::vector<double> best(s.inner);
    for (int64_t o = 0; o < s.outer; ++o) {
      std::fill(best.begin(), best.end(),
                initial<double>(is_max ? Op::reduce_max : Op::reduce_min));
      for (int64_t m = 0; m < s.middle; ++m) {
        kernels.arg_accumulate(is_max, t, x + (o * s.middle + m) * s.inner * elem, s.inner, m,
                               best.data(), index.data() + o * s.inner);
      }
    }
  }
  visit_storage(out_dtype, [&](auto otag) {
    using O = decltype(otag);
    for (size_t i = 0; i < index.size(); ++i)
      reinterpret_cast<O*>(out)[i] = to_storage<O>(index[i]);
  });
}

Kernel arg_reduce(const ir::Graph& g, const ir::Node& n) {
  Shape x = g.node(n.inputs[0]).shape;
  int axis = n.attr<ir::AxisAttrs>().axis;
  bool is_max = n.op == Op::argmax;
  DType out_dtype = n.shape.dtype();
  Split3 s = split3(x, axis, axis + 1);
  return [=](auto in, std::byte* out, ThreadPool&) {
    if (is_float(x.dtype())) {  // the loops of the SIMD target in use
      arg_reduce_floats(is_max, x.dtype(), s, in[0], out_dtype, out);
      return;
    }
    visit_storage(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      const S* xp = reinterpret_cast<const S*>(in[0]);
      for (int64_t o = 0; o < s.outer; ++o) {
        for (int64_t i = 0; i < s.inner; ++i) {
          int64_t best = 0;
          double best_v = to_compute<double>(xp[o * s.middle * s.inner + i]);
          for (int64_t m = 1; m < s.middle; ++m) {
            double v = to_compute<double>(xp[(o * s.middle + m) * s.inner + i]);
            if (std::isnan(best_v)) break;  // the first NaN wins
            if (std::isnan(v) || (is_max ? v > best_v : v < best_v)) {
              best = m;
              best_v = v;
            }
          }
          visit_storage(out_dtype, [&](auto otag) {
            using O = decltype(otag);
            reinterpret_cast<O*>(out)[o * s.inner + i] = to_storage<O>(best);
          });
        }
      }
    });
  };
}

Kernel cumsum(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::AxisAttrs>();
  Shape x = n.shape;
  Split3 s = split3(x, a.axis, a.axis + 1);
  return [=](auto in, std::byte* out, ThreadPool&) {
    if (is_float(x.dtype()) && s.inner > 1) {
      // Along an outer axis: a step per index over all inner lanes, with the loops of the
      // SIMD target in use. (Along the innermost axis each sum waits for the one before: the
      // plain loop below.)
      const ReduceRowKernels kernels = reduce_row_kernels();
      const int64_t elem = size_of(x.dtype());
      std::vector<double> acc(s.inner);
      for (int64_t o = 0; o < s.outer; ++o) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k = 0; k < s.middle; ++k) {
          int64_t at = (o * s.middle + (a.reverse ? s.middle - 1 - k : k)) * s.inner * elem;
          kernels.cumsum_accumulate(x.dtype(), in[0] + at, s.inner, a.exclusive, acc.data(),
                                    out + at);
        }
      }
      return;
    }
    visit_storage(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      const S* xp = reinterpret_cast<const S*>(in[0]);
      S* y = reinterpret_cast<S*>(out);
      for (int64_t o = 0; o < s.outer; ++o) {
        for (int64_t i = 0; i < s.inner; ++i) {
          A acc = 0;
          for (int64_t k = 0; k < s.middle; ++k) {
            int64_t m = a.reverse ? s.middle - 1 - k : k;
            int64_t at = (o * s.middle + m) * s.inner + i;
            A v = to_compute<A>(xp[at]);
            if (a.exclusive) {
              y[at] = to_storage<S>(acc);
              acc += v;
            } else {
              acc += v;
              y[at] = to_storage<S>(acc);
            }
          }
        }
      }
    });
  };
}

Kernel argsort(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::ArgsortAttrs>();
  Shape x = g.node(n.inputs[0]).shape;
  DType out_dtype = n.shape.dtype();
  Split3 s = split3(x, a.axis, a.axis + 1);
  return [=](auto in, std::byte* out, ThreadPool&) {
    std::vector<double> v(s.middle);
    std::vector<int64_t> order(s.middle);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        for (int64_t m = 0; m < s.middle; ++m) {
          v[m] = load_f64(x.dtype(), in[0], (o * s.middle + m) * s.inner + i);
        }
        std::iota(order.begin(), order.end(), 0);
        // Ties go to the lower index; NaN counts as the largest value.
        auto before = [&](int64_t p, int64_t q) {
          double vp = v[p], vq = v[q];
          bool np = std::isnan(vp), nq = std::isnan(vq);
          if (np || nq) {
            if (np && nq) return p < q;
            return a.descending ? np : nq;
          }
          if (vp != vq) return a.descending ? vp > vq : vp < vq;
          return p < q;
        };
        std::partial_sort(order.begin(), order.begin() + a.k, order.end(), before);
        for (int64_t k = 0; k < a.k; ++k) {
          visit_storage(out_dtype, [&](auto otag) {
            using O = decltype(otag);
            reinterpret_cast<O*>(out)[(o * a.k + k) * s.inner + i] = to_storage<O>(order[k]);
          });
        }
      }
    }
  };
}

}  // namespace

Kernel make_reduce_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::reduce_sum:
    case Op::reduce_max:
    case Op::reduce_min:
    case Op::reduce_prod:
      return reduce(g, n);
    case Op::argmax:
    case Op::argmin:
      return arg_reduce(g, n);
    case Op::cumsum:
      return cumsum(g, n);
    case Op::argsort:
      return argsort(g, n);
    default:
      return nullptr;
  }
}

}  // namespace prism::cpu
