// Data movement: iota, broadcast, reshape, transpose, slices, concatenate, gather, scatter, pad.
#include <algorithm>
#include <cstring>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"
#include "prism/backends/cpu/weight_layout.h"

namespace prism::cpu {

using ir::Op;

Split3 split3(const Shape& s, int first, int last) {
  Split3 r;
  for (int i = 0; i < s.rank(); ++i) {
    (i < first ? r.outer : i < last ? r.middle : r.inner) *= s.size(i);
  }
  return r;
}

namespace {

// n elements of `elem` bytes from src to dst, each `*_stride` elements apart: typed loads and
// stores for the usual sizes (a memcpy call per element costs several times the copy: a
// transpose with a short inner dim, like a convolution's {channels, taps} weight, ran at
// 2.5 ns an element).
template <typename T>
void copy_strided_row_as(const std::byte* src, int64_t src_stride, std::byte* dst,
                         int64_t dst_stride, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
}

void copy_strided_row(int elem, const std::byte* src, int64_t src_stride, std::byte* dst,
                      int64_t dst_stride, int64_t n) {
  switch (elem) {
    case 1:
      return copy_strided_row_as<uint8_t>(src, src_stride, dst, dst_stride, n);
    case 2:
      return copy_strided_row_as<uint16_t>(src, src_stride, dst, dst_stride, n);
    case 4:
      return copy_strided_row_as<uint32_t>(src, src_stride, dst, dst_stride, n);
    case 8:
      return copy_strided_row_as<uint64_t>(src, src_stride, dst, dst_stride, n);
    default:
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * dst_stride * elem, src + i * src_stride * elem, elem);
      }
  }
}

}  // namespace

void strided_copy(const Shape& shape, int elem, const std::byte* src, int64_t src_offset,
                  const std::array<int64_t, kMaxRank>& src_stride, std::byte* dst,
                  int64_t dst_offset, const std::array<int64_t, kMaxRank>& dst_stride,
                  ThreadPool& pool) {
  int rank = shape.rank();
  if (shape.numel() == 0) return;
  if (rank == 0) {
    std::memcpy(dst + dst_offset * elem, src + src_offset * elem, elem);
    return;
  }
  int last = rank - 1;
  int64_t inner = shape.size(last), rows = shape.numel() / inner;
  bool contiguous_rows = src_stride[last] == 1 && dst_stride[last] == 1;
  pool.parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        int64_t rest = r, so = src_offset, d = dst_offset;
                        for (int a = last - 1; a >= 0; --a) {
                          int64_t i = rest % shape.size(a);
                          rest /= shape.size(a);
                          so += i * src_stride[a];
                          d += i * dst_stride[a];
                        }
                        if (contiguous_rows) {
                          std::memcpy(dst + d * elem, src + so * elem, inner * elem);
                        } else {
                          copy_strided_row(elem, src + so * elem, src_stride[last], dst + d * elem,
                                           dst_stride[last], inner);
                        }
                      }
                    });
}

namespace {

std::array<int64_t, kMaxRank> strides_of(const Shape& s) { return s.strides(); }

Kernel iota(const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Split3 s = split3(n.shape, axis, axis + 1);
  return [=](auto, std::byte* out, ThreadPool&) {
    visit_storage(n.shape.dtype(), [&](auto tag) {
      using S = decltype(tag);
      S* y = reinterpret_cast<S*>(out);
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t m = 0; m < s.middle; ++m)
          for (int64_t i = 0; i < s.inner; ++i)
            y[(o * s.middle + m) * s.inner + i] = to_storage<S>(static_cast<double>(m));
    });
  };
}

Kernel broadcast(const ir::Graph& g, const ir::Node& n) {
  const Shape& in = g.node(n.inputs[0]).shape;
  const auto& dims = n.attr<ir::AxesAttrs>().axes;
  std::array<int64_t, kMaxRank> src{}, is = strides_of(in);
  for (int i = 0; i < in.rank(); ++i) {
    if (in.size(i) == n.shape.size(dims[i])) src[dims[i]] = is[i];
  }
  Shape shape = n.shape;
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    strided_copy(shape, size_of(shape.dtype()), in_ptrs[0], 0, src, out, 0, strides_of(shape),
                 pool);
  };
}

Kernel transpose(const ir::Graph& g, const ir::Node& n) {
  const Shape& in = g.node(n.inputs[0]).shape;
  const auto& perm = n.attr<ir::AxesAttrs>().axes;
  std::array<int64_t, kMaxRank> src{}, is = strides_of(in);
  for (int i = 0; i < n.shape.rank(); ++i) src[i] = is[perm[i]];
  Shape shape = n.shape;
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    strided_copy(shape, size_of(shape.dtype()), in_ptrs[0], 0, src, out, 0, strides_of(shape),
                 pool);
  };
}

Kernel slice(const ir::Graph& g, const ir::Node& n) {
  const Shape& in = g.node(n.inputs[0]).shape;
  const auto& a = n.attr<ir::SliceAttrs>();
  std::array<int64_t, kMaxRank> src{}, is = strides_of(in);
  int64_t base = 0;
  for (int i = 0; i < in.rank(); ++i) {
    src[i] = is[i] * a.strides[i];
    base += a.starts[i] * is[i];
  }
  Shape shape = n.shape;
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    strided_copy(shape, size_of(shape.dtype()), in_ptrs[0], base, src, out, 0, strides_of(shape),
                 pool);
  };
}

// Start indices clamped so that the window fits, as StableHLO does. The indices are the
// scalar operands from `first` on, of dtypes `dtypes`.
std::array<int64_t, kMaxRank> clamped_starts(std::span<const std::byte* const> in, int first,
                                             const std::vector<DType>& dtypes, const Shape& operand,
                                             const Shape& window) {
  std::array<int64_t, kMaxRank> start{};
  for (int i = 0; i < operand.rank(); ++i) {
    int64_t s = load_index(dtypes[i], in[first + i], 0);
    start[i] = std::clamp<int64_t>(s, 0, operand.size(i) - window.size(i));
  }
  return start;
}

std::vector<DType> index_dtypes(const ir::Graph& g, const ir::Node& n, int first) {
  std::vector<DType> t;
  for (size_t i = first; i < n.inputs.size(); ++i) t.push_back(g.node(n.inputs[i]).shape.dtype());
  return t;
}

Kernel dynamic_slice(const ir::Graph& g, const ir::Node& n) {
  Shape in = g.node(n.inputs[0]).shape, shape = n.shape;
  std::vector<DType> dtypes = index_dtypes(g, n, 1);
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    auto start = clamped_starts(in_ptrs, 1, dtypes, in, shape);
    auto is = strides_of(in);
    int64_t base = 0;
    for (int i = 0; i < in.rank(); ++i) base += start[i] * is[i];
    strided_copy(shape, size_of(shape.dtype()), in_ptrs[0], base, is, out, 0, strides_of(shape),
                 pool);
  };
}

Kernel dynamic_update_slice(const ir::Graph& g, const ir::Node& n) {
  Shape shape = n.shape, update = g.node(n.inputs[1]).shape;
  std::vector<DType> dtypes = index_dtypes(g, n, 2);
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    int elem = size_of(shape.dtype());
    if (out != in_ptrs[0]) std::memcpy(out, in_ptrs[0], shape.bytes());  // else in place
    auto start = clamped_starts(in_ptrs, 2, dtypes, shape, update);
    auto os = strides_of(shape);
    int64_t base = 0;
    for (int i = 0; i < shape.rank(); ++i) base += start[i] * os[i];
    strided_copy(update, elem, in_ptrs[1], 0, strides_of(update), out, base, os, pool);
  };
}

Kernel concatenate(const ir::Graph& g, const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  std::vector<Shape> parts;
  for (ir::ValueId in : n.inputs) parts.push_back(g.node(in).shape);
  Shape shape = n.shape;
  return [=](auto in_ptrs, std::byte* out, ThreadPool& pool) {
    auto os = strides_of(shape);
    int64_t at = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      strided_copy(parts[k], size_of(shape.dtype()), in_ptrs[k], 0, strides_of(parts[k]), out,
                   at * os[axis], os, pool);
      at += parts[k].size(axis);
    }
  };
}

Kernel gather(const ir::Graph& g, const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Shape x = g.node(n.inputs[0]).shape, idx = g.node(n.inputs[1]).shape;
  Split3 s = split3(x, axis, axis + 1);
  int elem = size_of(x.dtype());
  const bool rows_of_weights = gather_reads_blockable_weights(g, n);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    int64_t count = idx.numel(), row = s.inner * elem;
    const WeightLayout layout = rows_of_weights ? layout_of(in[0]) : WeightLayout::stored;
    if (std::optional<quant::GgmlType> format = interleaved_format(layout)) {
      // rows of quantized weights kept interleaved: block by block from their groups
      pool.parallel_for(count, 16, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t i = load_index(idx.dtype(), in[1], t);
          if (i < 0) i += s.middle;
          i = std::clamp<int64_t>(i, 0, s.middle - 1);
          const std::byte* group = in[0] + i / kQuantGroupRows * kQuantGroupRows * row;
          interleaved_row(group, i % kQuantGroupRows, row, *format, out + t * row);
        }
      });
      return;
    }
    if (layout == WeightLayout::bf16_blocks) {  // rows of weights kept blocked: value by value
      const auto* w = reinterpret_cast<const uint16_t*>(in[0]);
      auto* o = reinterpret_cast<uint16_t*>(out);
      const int64_t k = s.inner;
      pool.parallel_for(count, 16, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t i = load_index(idx.dtype(), in[1], t);
          if (i < 0) i += s.middle;
          i = std::clamp<int64_t>(i, 0, s.middle - 1);
          for (int64_t c = 0; c < k; ++c) o[t * k + c] = w[blocked_index(i, c, k)];
        }
      });
      return;
    }
    pool.parallel_for(s.outer * count, 64, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / count, j = t % count;
        int64_t i = load_index(idx.dtype(), in[1], j);
        if (i < 0) i += s.middle;
        i = std::clamp<int64_t>(i, 0, s.middle - 1);
        std::memcpy(out + t * row, in[0] + (o * s.middle + i) * row, row);
      }
    });
  };
}

}  // namespace

bool gather_reads_blockable_weights(const ir::Graph& g, const ir::Node& n) {
  const Shape& x = g.node(n.inputs[0]).shape;
  // (bf16 weights, or rows of blocks: the executable interleaves Q4_0's, Q8_0's, K-quants')
  return n.op == Op::gather && n.attr<ir::AxisAttrs>().axis == 0 &&
         (blockable(x) || (x.dtype() == DType::u8 && x.rank() == 2));
}

namespace {

// For each element of `idx_shape`: (flat index in idx, flat index in x with axis replaced).
template <typename F>
void for_each_along(const Shape& idx_shape, const Shape& x, int axis, const std::byte* idx, F&& f) {
  auto xs = x.strides();
  int rank = idx_shape.rank();
  std::array<int64_t, kMaxRank> index{};
  for (int64_t t = 0; t < idx_shape.numel(); ++t) {
    int64_t rest = t, off = 0;
    for (int a = rank - 1; a >= 0; --a) {
      index[a] = rest % idx_shape.size(a);
      rest /= idx_shape.size(a);
    }
    int64_t i = load_index(idx_shape.dtype(), idx, t);
    if (i < 0) i += x.size(axis);
    i = std::clamp<int64_t>(i, 0, x.size(axis) - 1);
    for (int a = 0; a < rank; ++a) off += (a == axis ? i : index[a]) * xs[a];
    f(t, off);
  }
}

Kernel take_along(const ir::Graph& g, const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Shape x = g.node(n.inputs[0]).shape, idx = g.node(n.inputs[1]).shape;
  int elem = size_of(x.dtype());
  return [=](auto in, std::byte* out, ThreadPool&) {
    for_each_along(idx, x, axis, in[1], [&](int64_t t, int64_t off) {
      std::memcpy(out + t * elem, in[0] + off * elem, elem);
    });
  };
}

Kernel scatter(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::ScatterAttrs>();
  Shape x = n.shape, idx = g.node(n.inputs[1]).shape;
  return [=](auto in, std::byte* out, ThreadPool&) {
    if (out != in[0]) std::memcpy(out, in[0], x.bytes());
    visit_storage(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      S* y = reinterpret_cast<S*>(out);
      const S* u = reinterpret_cast<const S*>(in[2]);
      for_each_along(idx, x, a.axis, in[1], [&](int64_t t, int64_t off) {
        double old = to_compute<double>(y[off]), upd = to_compute<double>(u[t]);
        switch (a.reduce) {
          case ir::ScatterReduce::none:
            y[off] = u[t];
            return;
          case ir::ScatterReduce::add:
            y[off] = to_storage<S>(old + upd);
            return;
          case ir::ScatterReduce::mul:
            y[off] = to_storage<S>(old * upd);
            return;
          case ir::ScatterReduce::max:
            y[off] = to_storage<S>(std::max(old, upd));
            return;
          case ir::ScatterReduce::min:
            y[off] = to_storage<S>(std::min(old, upd));
            return;
        }
      });
    });
  };
}

Kernel pad(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::PadAttrs>();
  Shape x = g.node(n.inputs[0]).shape, shape = n.shape;
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    int elem = size_of(shape.dtype()), rank = shape.rank();
    auto xs = x.strides(), os = shape.strides();
    if (a.mode == ir::PadMode::constant) {
      for (int64_t t = 0; t < shape.numel(); ++t) std::memcpy(out + t * elem, in[1], elem);
      // The part of x that lands inside the output (negative padding crops).
      std::vector<Dim> dims;
      int64_t src = 0, dst = 0;
      for (int i = 0; i < rank; ++i) {
        int64_t lo = std::max<int64_t>(0, -a.low[i]);
        int64_t hi = std::min<int64_t>(x.size(i), shape.size(i) - a.low[i]);
        dims.push_back({Tag(), std::max<int64_t>(0, hi - lo)});
        src += lo * xs[i];
        dst += (lo + a.low[i]) * os[i];
      }
      Shape region(shape.dtype(), dims);
      if (region.numel() > 0) strided_copy(region, elem, in[0], src, xs, out, dst, os, pool);
      return;
    }
    for (int64_t t = 0; t < shape.numel(); ++t) {
      int64_t rest = t, off = 0;
      for (int i = rank - 1; i >= 0; --i) {
        int64_t j = rest % shape.size(i) - a.low[i], size = x.size(i);
        rest /= shape.size(i);
        if (a.mode == ir::PadMode::edge) {
          j = std::clamp<int64_t>(j, 0, size - 1);
        } else {  // reflect, without repeating the edge
          if (j < 0) j = -j;
          if (j >= size) j = 2 * (size - 1) - j;
        }
        off += j * xs[i];
      }
      std::memcpy(out + t * elem, in[0] + off * elem, elem);
    }
  };
}

}  // namespace

Kernel make_data_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::iota:
      return iota(n);
    case Op::broadcast:
      return broadcast(g, n);
    case Op::reshape: {
      int64_t bytes = n.shape.bytes();
      return [bytes](auto in, std::byte* out, ThreadPool&) {
        if (out != in[0]) std::memcpy(out, in[0], bytes);
      };
    }
    case Op::transpose:
      return transpose(g, n);
    case Op::slice:
      return slice(g, n);
    case Op::dynamic_slice:
      return dynamic_slice(g, n);
    case Op::dynamic_update_slice:
      return dynamic_update_slice(g, n);
    case Op::concatenate:
      return concatenate(g, n);
    case Op::gather:
      return gather(g, n);
    case Op::take_along:
      return take_along(g, n);
    case Op::scatter:
      return scatter(g, n);
    case Op::pad:
      return pad(g, n);
    default:
      return nullptr;
  }
}

}  // namespace prism::cpu
