// OpenCL C for the non-elementwise ops: data movement (one work item per output element,
// which reads its source element), reductions, sorting, products and convolutions.
#include <fmt/format.h>

#include <algorithm>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/kernel_text.h"
#include "prism/core/error.h"

namespace prism::opencl {

using ir::Op;
using ir::ValueId;

namespace {

// A scalar index operand (any dtype) as long, truncating floats as the CPU does.
std::string index_load(DType t, const std::string& ptr, const std::string& at) {
  return fmt::format("(long)({})", load(t, ptr, at));
}

std::string sum_of(const std::vector<std::string>& terms) {
  std::string s;
  for (const std::string& t : terms) s += (s.empty() ? "" : " + ") + t;
  return s.empty() ? "0" : s;
}

struct Split3 {
  int64_t outer = 1, middle = 1, inner = 1;
};
Split3 split3(const Shape& s, int first, int last) {
  Split3 r;
  for (int i = 0; i < s.rank(); ++i)
    (i < first ? r.outer : i < last ? r.middle : r.inner) *= s.size(i);
  return r;
}

KernelSource gather_style(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const Shape& out = n.shape;
  const Shape& x = g.node(n.inputs[0]).shape;
  auto xs = x.strides();
  std::string c = head(k, g, out.dtype(), out.numel()) + unflatten(out, "gid", "i");
  std::vector<std::string> src;
  switch (n.op) {
    case Op::broadcast: {
      const auto& dims = n.attr<ir::AxesAttrs>().axes;
      for (int i = 0; i < x.rank(); ++i) {
        if (x.size(i) == out.size(dims[i])) src.push_back(fmt::format("i{} * {}L", dims[i], xs[i]));
      }
      break;
    }
    case Op::transpose: {
      const auto& perm = n.attr<ir::AxesAttrs>().axes;
      for (int i = 0; i < out.rank(); ++i) src.push_back(fmt::format("i{} * {}L", i, xs[perm[i]]));
      break;
    }
    case Op::slice: {
      const auto& a = n.attr<ir::SliceAttrs>();
      for (int i = 0; i < x.rank(); ++i) {
        src.push_back(fmt::format("({}L + i{} * {}L) * {}L", a.starts[i], i, a.strides[i], xs[i]));
      }
      break;
    }
    case Op::dynamic_slice:
      for (int i = 0; i < x.rank(); ++i) {
        c += fmt::format(
            "  long s{} = clamp({}, 0L, {}L);\n", i,
            index_load(g.node(n.inputs[1 + i]).shape.dtype(), fmt::format("in{}", 1 + i), "0"),
            x.size(i) - out.size(i));
        src.push_back(fmt::format("(s{0} + i{0}) * {1}L", i, xs[i]));
      }
      break;
    default:
      fail("opencl: {} is not a gather-style op", ir::op_name(n.op));
  }
  return finish(std::move(k), c + fmt::format("  out[gid] = in0[{}];\n", sum_of(src)), out.numel());
}

KernelSource pad(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::PadAttrs>();
  const Shape& out = n.shape;
  const Shape& x = g.node(n.inputs[0]).shape;
  auto xs = x.strides();
  std::string c = head(k, g, out.dtype(), out.numel()) + unflatten(out, "gid", "i");
  c += "  bool inside = true;\n  long src = 0;\n";
  for (int i = 0; i < out.rank(); ++i) {
    int64_t size = x.size(i);
    c += fmt::format("  {{ long j = i{} - {}L;\n", i, a.low[i]);
    if (a.mode == ir::PadMode::constant) {
      c += fmt::format("    inside = inside && j >= 0 && j < {}L;\n", size);
    } else if (a.mode == ir::PadMode::edge) {
      c += fmt::format("    j = clamp(j, 0L, {}L);\n", size - 1);
    } else {  // reflect, without repeating the edge
      c +=
          fmt::format("    if (j < 0) j = -j;\n    if (j >= {0}L) j = 2 * ({0}L - 1) - j;\n", size);
    }
    c += fmt::format("    src += j * {}L; }}\n", xs[i]);
  }
  c += a.mode == ir::PadMode::constant ? "  out[gid] = inside ? in0[src] : in1[0];\n"
                                       : "  out[gid] = in0[src];\n";
  return finish(std::move(k), c, out.numel());
}

KernelSource concatenate(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& out = n.shape;
  std::string c = head(k, g, out.dtype(), out.numel()) + unflatten(out, "gid", "i");
  int64_t at = 0;
  for (size_t p = 0; p < n.inputs.size(); ++p) {
    const Shape& part = g.node(n.inputs[p]).shape;
    auto ps = part.strides();
    std::vector<std::string> src;
    for (int i = 0; i < out.rank(); ++i) {
      src.push_back(i == axis ? fmt::format("(i{} - {}L) * {}L", i, at, ps[i])
                              : fmt::format("i{} * {}L", i, ps[i]));
    }
    at += part.size(axis);
    c += fmt::format("  {}if (i{} < {}L) out[gid] = in{}[{}];\n", p ? "else " : "", axis, at, p,
                     sum_of(src));
  }
  return finish(std::move(k), c, out.numel());
}

KernelSource gather(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  Split3 s = split3(x, axis, axis + 1);
  std::string c = head(k, g, n.shape.dtype(), n.shape.numel());
  c += fmt::format("  long inner = gid % {0}L, t = gid / {0}L;\n", std::max<int64_t>(s.inner, 1));
  c += fmt::format("  long j = t % {0}L, o = t / {0}L;\n", std::max<int64_t>(idx.numel(), 1));
  c += fmt::format("  long i = {};\n  if (i < 0) i += {}L;\n  i = clamp(i, 0L, {}L);\n",
                   index_load(idx.dtype(), "in1", "j"), s.middle, s.middle - 1);
  c += fmt::format("  out[gid] = in0[(o * {}L + i) * {}L + inner];\n", s.middle, s.inner);
  return finish(std::move(k), c, n.shape.numel());
}

// `long off`: the element of x that index element `t` (multi-index i0..) addresses along axis.
std::string along(const Shape& idx, const Shape& x, int axis, const std::string& t) {
  auto xs = x.strides();
  std::string c = unflatten(idx, t, "i");
  c += fmt::format("  long j = {};\n  if (j < 0) j += {}L;\n  j = clamp(j, 0L, {}L);\n",
                   index_load(idx.dtype(), "in1", t), x.size(axis), x.size(axis) - 1);
  std::vector<std::string> terms;
  for (int a = 0; a < idx.rank(); ++a) {
    terms.push_back(fmt::format("{} * {}L", a == axis ? "j" : fmt::format("i{}", a), xs[a]));
  }
  return c + fmt::format("  long off = {};\n", sum_of(terms));
}

KernelSource take_along(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const Shape& idx = g.node(n.inputs[1]).shape;
  std::string c = head(k, g, n.shape.dtype(), idx.numel());
  c += along(idx, g.node(n.inputs[0]).shape, n.attr<ir::AxisAttrs>().axis, "gid");
  return finish(std::move(k), c + "  out[gid] = in0[off];\n", idx.numel());
}

// Scatter applies its updates in order (duplicates included), so one work item runs them.
KernelSource scatter(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::ScatterAttrs>();
  const Shape& x = n.shape;
  const Shape& idx = g.node(n.inputs[1]).shape;
  DType t = x.dtype();
  Class cls = class_of(t);
  k.starts_as_operand = true;
  std::string c = head(k, g, t, 1);
  c += fmt::format("  for (long t = 0; t < {}L; ++t) {{\n", idx.numel());
  c += along(idx, x, a.axis, "t");
  std::string old = load(t, "out", "off"), upd = load(t, "in2", "t");
  switch (a.reduce) {
    case ir::ScatterReduce::none:
      c += "  out[off] = in2[t];\n";
      break;
    case ir::ScatterReduce::add:
      c += fmt::format("  out[off] = {};\n", store(t, cls, old + " + " + upd));
      break;
    case ir::ScatterReduce::mul:
      c += fmt::format("  out[off] = {};\n", store(t, cls, old + " * " + upd));
      break;
    case ir::ScatterReduce::max:
      c += fmt::format("  {{ {0} o = {1}, u = {2}; out[off] = {3}; }}\n", ctype(cls), old, upd,
                       store(t, cls, "(o < u) ? u : o"));
      break;
    case ir::ScatterReduce::min:
      c += fmt::format("  {{ {0} o = {1}, u = {2}; out[off] = {3}; }}\n", ctype(cls), old, upd,
                       store(t, cls, "(u < o) ? u : o"));
      break;
  }
  return finish(std::move(k), c + "  }\n", 1);
}

KernelSource dynamic_update_slice(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const Shape& x = n.shape;
  const Shape& update = g.node(n.inputs[1]).shape;
  auto xs = x.strides();
  k.starts_as_operand = true;
  std::string c = head(k, g, x.dtype(), update.numel()) + unflatten(update, "gid", "u");
  std::vector<std::string> dst;
  for (int i = 0; i < x.rank(); ++i) {
    c += fmt::format(
        "  long s{} = clamp({}, 0L, {}L);\n", i,
        index_load(g.node(n.inputs[2 + i]).shape.dtype(), fmt::format("in{}", 2 + i), "0"),
        x.size(i) - update.size(i));
    dst.push_back(fmt::format("(s{0} + u{0}) * {1}L", i, xs[i]));
  }
  return finish(std::move(k), c + fmt::format("  out[{}] = in1[gid];\n", sum_of(dst)),
                update.numel());
}

KernelSource iota(const ir::Node& n, KernelSource k, const ir::Graph& g) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  Split3 s = split3(n.shape, axis, axis + 1);
  std::string c = head(k, g, n.shape.dtype(), n.shape.numel());
  c += fmt::format("  long m = (gid / {}L) % {}L;\n  out[gid] = {};\n",
                   std::max<int64_t>(s.inner, 1), std::max<int64_t>(s.middle, 1),
                   store(n.shape.dtype(), Class::i64, "m"));
  return finish(std::move(k), c, n.shape.numel());
}

}  // namespace

KernelSource data_kernel(const ir::Graph& g, ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::iota:
      return iota(n, std::move(k), g);
    case Op::broadcast:
    case Op::transpose:
    case Op::slice:
    case Op::dynamic_slice:
      return gather_style(g, n, std::move(k));
    case Op::reshape: {
      std::string c = head(k, g, n.shape.dtype(), n.shape.numel()) + "  out[gid] = in0[gid];\n";
      return finish(std::move(k), c, n.shape.numel());
    }
    case Op::dynamic_update_slice:
      return dynamic_update_slice(g, n, std::move(k));
    case Op::concatenate:
      return concatenate(g, n, std::move(k));
    case Op::gather:
      return gather(g, n, std::move(k));
    case Op::take_along:
      return take_along(g, n, std::move(k));
    case Op::scatter:
      return scatter(g, n, std::move(k));
    case Op::pad:
      return pad(g, n, std::move(k));
    default:
      fail("opencl: {} is not a data movement op", ir::op_name(n.op));
  }
}

}  // namespace prism::opencl
