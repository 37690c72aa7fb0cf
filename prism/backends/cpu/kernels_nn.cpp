// The composites as single kernels: softmax, log_softmax, rms_norm, layer_norm and rope
// (attention has its own file). Their row loops are in nn_rows.cpp, compiled per SIMD target;
// here is how the rows are found and shared among threads. Halves compute in f32.
#include <algorithm>
#include <cstring>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/nn_rows.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

using ir::Op;

namespace {

void require_float(Op op, DType t) {
  if (!is_float(t)) fail("cpu: {} needs a floating-point dtype, got {}", ir::op_name(op), name(t));
}

// Calls fn(row) for every lane along the middle axis of `s`, in parallel, with the lane's
// values contiguous at `row` (elem bytes each): in place when the axis is innermost, else
// gathered into a per-thread copy, which is scattered into `out` after fn (which may write
// the copy).
template <typename F>
void for_each_lane(const Split3& s, int elem, const std::byte* in, std::byte* out, ThreadPool& pool,
                   F&& fn) {
  pool.parallel_for(s.outer * s.inner, 8, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<std::byte> lane;
    for (int64_t t = t0; t < t1; ++t) {
      int64_t base = t / s.inner * s.middle * s.inner + t % s.inner;
      if (s.inner == 1) {
        fn(in + base * elem, out + base * elem);
        continue;
      }
      lane.resize(s.middle * elem);
      for (int64_t m = 0; m < s.middle; ++m) {
        std::memcpy(lane.data() + m * elem, in + (base + m * s.inner) * elem, elem);
      }
      fn(lane.data(), lane.data());
      for (int64_t m = 0; m < s.middle; ++m) {
        std::memcpy(out + (base + m * s.inner) * elem, lane.data() + m * elem, elem);
      }
    }
  });
}

Kernel softmax(const ir::Node& n) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Shape x = n.shape;
  Op op = n.op;
  Split3 s = split3(x, axis, axis + 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    require_float(op, x.dtype());
    NnRowKernels rows = nn_row_kernels();
    for_each_lane(s, size_of(x.dtype()), in[0], out, pool, [&](const std::byte* row, std::byte* y) {
      rows.softmax(x.dtype(), row, y, s.middle, op == Op::log_softmax);
    });
  };
}

Kernel norm(const ir::Node& n) {
  const auto a = n.attr<ir::NormAttrs>();
  Shape x = n.shape;
  Op op = n.op;
  Split3 s = split3(x, a.axes.front(), a.axes.back() + 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    require_float(op, x.dtype());
    NnRowKernels rows = nn_row_kernels();
    for_each_lane(s, size_of(x.dtype()), in[0], out, pool, [&](const std::byte* row, std::byte* y) {
      rows.norm(x.dtype(), row, y, s.middle, op == Op::layer_norm, a.eps);
    });
  };
}

Kernel rope(const ir::Node& n) {
  bool interleaved = n.attr<ir::RopeAttrs>().interleaved;
  Shape x = n.shape;
  int64_t d = x.size(x.rank() - 1), half = d / 2, rows = x.numel() / std::max<int64_t>(d, 1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    require_float(Op::rope, x.dtype());
    NnRowKernels kernels = nn_row_kernels();
    int elem = size_of(x.dtype());
    pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
      kernels.rope(x.dtype(), interleaved, in[0] + r0 * d * elem, in[1] + r0 * half * elem,
                   in[2] + r0 * half * elem, out + r0 * d * elem, r1 - r0, d);
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
       {make_data_kernel, make_reduce_kernel, make_quant_kernel, make_dot_kernel, make_conv_kernel,
        make_nn_kernel, make_attention_kernel, make_short_conv_kernel, make_gated_delta_kernel}) {
    if (Kernel k = make(g, id)) return k;
  }
  fail("cpu: no kernel for {}", ir::print(g, id));
}

}  // namespace prism::cpu
