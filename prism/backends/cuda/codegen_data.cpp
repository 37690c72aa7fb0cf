// Data movement as gathers: each thread computes one output element's source offset from its
// coordinates (iota, broadcast, transpose, slices, concatenate, gather, take_along, pad), plus
// the two ops that write into a copy of their first operand (dynamic_update_slice, scatter),
// which get a variant that runs in place on a donated or dying operand.
#include <algorithm>

#include "prism/backends/cuda/codegen.h"
#include "prism/core/error.h"

namespace prism::cuda::detail {

using ir::Op;

namespace {

std::vector<DType> dtypes_of(const ir::Graph& g, const ir::Node& n) {
  std::vector<DType> t;
  for (ir::ValueId in : n.inputs) t.push_back(g.node(in).shape.dtype());
  return t;
}

KernelCode kernel(const std::string& name, const std::string& sig, int64_t n,
                  const std::string& body, InPlace when = InPlace::always) {
  KernelCode k;
  k.name = name;
  k.work = n;
  k.when = when;
  k.source = sig + grid_stride(n, body) + "}\n";
  return k;
}

std::string or_zero(const std::string& offset) {
  return offset.empty() ? std::string("0") : offset;
}

// sum_a prefix_a * strides[a], skipping zero strides; "0" when empty.
std::string offset(const std::string& prefix, int rank, const std::array<int64_t, kMaxRank>& s,
                   int64_t base = 0) {
  std::string e = base ? fmt::format("{}LL", base) : "";
  for (int a = 0; a < rank; ++a) {
    if (s[a] == 0) continue;
    e += fmt::format("{}{}{} * {}LL", e.empty() ? "" : " + ", prefix, a, s[a]);
  }
  return e.empty() ? "0" : e;
}

// out[i] = in0[base + sum_a c_a * src_stride[a]]: broadcast, transpose, slice.
KernelCode strided_copy(const std::string& name, const ir::Node& n, DType in_dtype,
                        const std::array<int64_t, kMaxRank>& src, int64_t base) {
  std::string body = coords(n.shape, "i", "c");
  body += fmt::format("    out[i] = in0[{}];\n", offset("c", n.shape.rank(), src, base));
  return kernel(name, signature(name, n.shape.dtype(), {in_dtype}), n.shape.numel(), body);
}

// Declares s0..s{rank-1}: start indices read from inputs `first`.., clamped so that a window
// of `window` fits in `operand`, as StableHLO does.
std::string clamped_starts(const ir::Graph& g, const ir::Node& n, int first, const Shape& operand,
                           const Shape& window) {
  std::string s;
  for (int a = 0; a < operand.rank(); ++a) {
    DType t = g.node(n.inputs[first + a]).shape.dtype();
    s += fmt::format("    i64 s{0} = {1}; s{0} = s{0} < 0 ? 0 : (s{0} > {2}LL ? {2}LL : s{0});\n",
                     a, load_index(t, fmt::format("in{}", first + a)),
                     operand.size(a) - window.size(a));
  }
  return s;
}

// An index read from `ptr[at]`, negative counting from the end, clamped into [0, size).
std::string wrapped_index(DType t, const std::string& ptr, const std::string& at, int64_t size,
                          const std::string& var) {
  return fmt::format(
      "    i64 {0} = {1}; if ({0} < 0) {0} += {2}LL; {0} = {0} < 0 ? 0 : ({0} > {3}LL ? {3}LL : "
      "{0});\n",
      var, load_index(t, ptr, at), size, size - 1);
}

std::vector<KernelCode> dynamic_update_slice(const ir::Graph& g, const ir::Node& n,
                                             const std::string& name) {
  const Shape& shape = n.shape;
  const Shape& update = g.node(n.inputs[1]).shape;
  std::vector<DType> t = dtypes_of(g, n);
  auto os = shape.strides(), us = update.strides();
  int rank = shape.rank();
  // Out of place: every output element from the operand or the update.
  std::string full = coords(shape, "i", "c") + clamped_starts(g, n, 2, shape, update);
  std::string inside = "true", uoff;
  for (int a = 0; a < rank; ++a) {
    inside += fmt::format(" && c{0} >= s{0} && c{0} < s{0} + {1}LL", a, update.size(a));
    uoff += fmt::format("{}(c{} - s{}) * {}LL", uoff.empty() ? "" : " + ", a, a, us[a]);
  }
  full += fmt::format("    out[i] = ({}) ? in1[{}] : in0[i];\n", inside, or_zero(uoff));
  // In place: only the window.
  std::string window = coords(update, "i", "u") + clamped_starts(g, n, 2, shape, update);
  std::string ooff;
  for (int a = 0; a < rank; ++a) {
    ooff += fmt::format("{}(u{} + s{}) * {}LL", ooff.empty() ? "" : " + ", a, a, os[a]);
  }
  window += fmt::format("    out[{}] = in1[i];\n", or_zero(ooff));
  return {kernel(name + "_copy", signature(name + "_copy", shape.dtype(), t), shape.numel(), full,
                 InPlace::when_not_in_place),
          kernel(name + "_window", signature(name + "_window", shape.dtype(), t), update.numel(),
                 window, InPlace::when_in_place)};
}

std::vector<KernelCode> scatter(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::ScatterAttrs>();
  const Shape& x = n.shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  std::vector<DType> t = dtypes_of(g, n);
  std::string copy_body = "    out[i] = in0[i];\n";
  // One thread per lane of idx along the axis walks it in order, so that repeated indices
  // combine in the order the CPU applies them.
  int64_t along = idx.size(a.axis), lanes = along ? idx.numel() / along : 0;
  std::vector<Dim> lane_dims;
  for (int i = 0; i < idx.rank(); ++i) {
    if (i != a.axis) lane_dims.push_back(idx.dim(i));
  }
  Shape lane_shape(idx.dtype(), lane_dims);
  auto is = idx.strides(), xs = x.strides();
  std::string body = coords(lane_shape, "i", "l");
  std::string base_idx, base_x;
  for (int i = 0, l = 0; i < idx.rank(); ++i) {
    if (i == a.axis) continue;
    base_idx += fmt::format(" + l{} * {}LL", l, is[i]);
    base_x += fmt::format(" + l{} * {}LL", l, xs[i]);
    ++l;
  }
  body += fmt::format("    for (i64 k = 0; k < {}LL; ++k) {{\n", along);
  body += fmt::format("    i64 t = k * {}LL{};\n", is[a.axis], base_idx);
  body += wrapped_index(idx.dtype(), "in1", "t", x.size(a.axis), "j");
  body += fmt::format("    i64 at = j * {}LL{};\n", xs[a.axis], base_x);
  std::string L = ld(x.dtype()), S = st(x.dtype());
  switch (a.reduce) {
    case ir::ScatterReduce::none:
      body += "    out[at] = in2[t];\n";
      break;
    case ir::ScatterReduce::add:
      body += fmt::format("    out[at] = {}((double){}(out[at]) + (double){}(in2[t]));\n", S, L, L);
      break;
    case ir::ScatterReduce::mul:
      body += fmt::format("    out[at] = {}((double){}(out[at]) * (double){}(in2[t]));\n", S, L, L);
      break;
    case ir::ScatterReduce::max:
    case ir::ScatterReduce::min:
      body += fmt::format(
          "    double o = (double){}(out[at]), u = (double){}(in2[t]);\n"
          "    out[at] = {}({});\n",
          L, L, S, a.reduce == ir::ScatterReduce::max ? "o < u ? u : o" : "u < o ? u : o");
      break;
  }
  body += "    }\n";
  return {kernel(name + "_copy", signature(name + "_copy", x.dtype(), t), x.numel(), copy_body,
                 InPlace::when_not_in_place),
          kernel(name + "_scatter", signature(name + "_scatter", x.dtype(), t), lanes, body)};
}

KernelCode pad(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::PadAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  auto xs = x.strides();
  std::string body = coords(n.shape, "i", "c"), off, inside = "true";
  for (int i = 0; i < x.rank(); ++i) {
    body += fmt::format("    i64 j{0} = c{0} - ({1}LL);\n", i, a.low[i]);
    if (a.mode == ir::PadMode::edge) {
      body += fmt::format("    j{0} = j{0} < 0 ? 0 : (j{0} > {1}LL ? {1}LL : j{0});\n", i,
                          x.size(i) - 1);
    } else if (a.mode == ir::PadMode::reflect) {  // without repeating the edge
      body += fmt::format(
          "    if (j{0} < 0) j{0} = -j{0};\n    if (j{0} >= {1}LL) j{0} = {2}LL - j{0};\n", i,
          x.size(i), 2 * (x.size(i) - 1));
    } else {
      inside += fmt::format(" && j{0} >= 0 && j{0} < {1}LL", i, x.size(i));
    }
    off += fmt::format("{}j{} * {}LL", off.empty() ? "" : " + ", i, xs[i]);
  }
  if (a.mode == ir::PadMode::constant) {
    body += fmt::format("    out[i] = ({}) ? in0[{}] : in1[0];\n", inside, or_zero(off));
  } else {
    body += fmt::format("    out[i] = in0[{}];\n", or_zero(off));
  }
  return kernel(name, signature(name, n.shape.dtype(), dtypes_of(g, n)), n.shape.numel(), body);
}

}  // namespace

std::vector<KernelCode> generate_data(const ir::Graph& g, ir::ValueId id, const std::string& name) {
  const ir::Node& n = g.node(id);
  const Shape& shape = n.shape;
  int rank = shape.rank();
  switch (n.op) {
    case Op::iota: {
      int axis = n.attr<ir::AxisAttrs>().axis;
      std::string body = coords(shape, "i", "c");
      body += fmt::format("    out[i] = {}((double)c{});\n", st(shape.dtype()), axis);
      return {kernel(name, signature(name, shape.dtype(), {}), shape.numel(), body)};
    }
    case Op::broadcast: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& dims = n.attr<ir::AxesAttrs>().axes;
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      for (int i = 0; i < in.rank(); ++i) {
        if (in.size(i) == shape.size(dims[i])) src[dims[i]] = is[i];
      }
      return {strided_copy(name, n, in.dtype(), src, 0)};
    }
    case Op::reshape:  // only when the executable cannot alias it: a plain copy
      return {kernel(name, signature(name, shape.dtype(), {shape.dtype()}), shape.numel(),
                     "    out[i] = in0[i];\n")};
    case Op::transpose: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& perm = n.attr<ir::AxesAttrs>().axes;
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      for (int i = 0; i < rank; ++i) src[i] = is[perm[i]];
      return {strided_copy(name, n, in.dtype(), src, 0)};
    }
    case Op::slice: {
      const Shape& in = g.node(n.inputs[0]).shape;
      const auto& a = n.attr<ir::SliceAttrs>();
      std::array<int64_t, kMaxRank> src{}, is = in.strides();
      int64_t base = 0;
      for (int i = 0; i < rank; ++i) {
        src[i] = is[i] * a.strides[i];
        base += a.starts[i] * is[i];
      }
      return {strided_copy(name, n, in.dtype(), src, base)};
    }
    case Op::dynamic_slice: {
      const Shape& in = g.node(n.inputs[0]).shape;
      auto is = in.strides();
      std::string body = coords(shape, "i", "c") + clamped_starts(g, n, 1, in, shape), off;
      for (int a = 0; a < rank; ++a) {
        off += fmt::format("{}(c{} + s{}) * {}LL", off.empty() ? "" : " + ", a, a, is[a]);
      }
      body += fmt::format("    out[i] = in0[{}];\n", off.empty() ? "0" : off);
      return {kernel(name, signature(name, shape.dtype(), dtypes_of(g, n)), shape.numel(), body)};
    }
    case Op::dynamic_update_slice:
      return dynamic_update_slice(g, n, name);
    case Op::concatenate: {
      int axis = n.attr<ir::AxisAttrs>().axis;
      std::string body = coords(shape, "i", "c");
      int64_t at = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const Shape& part = g.node(n.inputs[k]).shape;
        auto ps = part.strides();
        std::string off;
        for (int a = 0; a < rank; ++a) {
          std::string c = a == axis ? fmt::format("(c{} - {}LL)", a, at) : fmt::format("c{}", a);
          off += fmt::format("{}{} * {}LL", off.empty() ? "" : " + ", c, ps[a]);
        }
        body += fmt::format("    {}if (c{} < {}LL) out[i] = in{}[{}];\n", k ? "else " : "", axis,
                            at + part.size(axis), k, off.empty() ? "0" : off);
        at += part.size(axis);
      }
      return {kernel(name, signature(name, shape.dtype(), dtypes_of(g, n)), shape.numel(), body)};
    }
    case Op::gather: {
      int axis = n.attr<ir::AxisAttrs>().axis;
      const Shape& x = g.node(n.inputs[0]).shape;
      const Shape& idx = g.node(n.inputs[1]).shape;
      int64_t inner = 1, middle = x.size(axis), count = idx.numel();
      for (int a = axis + 1; a < x.rank(); ++a) inner *= x.size(a);
      std::string body = fmt::format(
          "    i64 r = i % {0}LL, t = i / {0}LL, o = t / {1}LL, q = t % {1}LL;\n", inner, count);
      body += wrapped_index(idx.dtype(), "in1", "q", middle, "j");
      body += fmt::format("    out[i] = in0[(o * {}LL + j) * {}LL + r];\n", middle, inner);
      return {kernel(name, signature(name, shape.dtype(), dtypes_of(g, n)), shape.numel(), body)};
    }
    case Op::take_along: {
      int axis = n.attr<ir::AxisAttrs>().axis;
      const Shape& x = g.node(n.inputs[0]).shape;
      const Shape& idx = g.node(n.inputs[1]).shape;
      auto xs = x.strides();
      std::string body = coords(idx, "i", "c");
      body += wrapped_index(idx.dtype(), "in1", "i", x.size(axis), "j");
      std::string off;
      for (int a = 0; a < idx.rank(); ++a) {
        off += fmt::format("{}{} * {}LL", off.empty() ? "" : " + ",
                           a == axis ? "j" : fmt::format("c{}", a), xs[a]);
      }
      body += fmt::format("    out[i] = in0[{}];\n", off.empty() ? "0" : off);
      return {kernel(name, signature(name, shape.dtype(), dtypes_of(g, n)), idx.numel(), body)};
    }
    case Op::scatter:
      return scatter(g, n, name);
    case Op::pad:
      return {pad(g, n, name)};
    default:
      return {};
  }
}

}  // namespace prism::cuda::detail
