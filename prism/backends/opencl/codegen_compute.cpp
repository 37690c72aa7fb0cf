// OpenCL C for scans, sorting, matrix products and convolutions (reductions are kernel IR).
// Float sums are compensated (Kahan), the kernel IR's accumulation rule.
#include <fmt/format.h>

#include <algorithm>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/kernel_text.h"
#include "prism/core/error.h"

namespace prism::opencl {

using ir::Op;
using ir::ValueId;

namespace {

// Statements adding `v` to `acc` (with compensation `comp` for float sums).
std::string accumulate(Class c, const std::string& v) {
  if (c != Class::f32) return fmt::format("acc += {};", v);
  return fmt::format(
      "{{ float y = ({}) - comp, t = acc + y; comp = isfinite(t) ? (t - acc) - y : 0.0f; "
      "acc = t; }}",
      v);
}

// x viewed as {outer, middle (the axis), inner}.
struct Split3 {
  int64_t outer = 1, middle = 1, inner = 1;
};
Split3 split_at(const Shape& s, int axis) {
  Split3 r;
  for (int i = 0; i < s.rank(); ++i)
    (i < axis ? r.outer : i == axis ? r.middle : r.inner) *= s.size(i);
  return r;
}

KernelSource cumsum(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::AxisAttrs>();
  Split3 s = split_at(n.shape, a.axis);
  DType t = n.shape.dtype();
  Class c = class_of(t);
  std::string code = head(k, g, t, s.outer * s.inner);
  code += fmt::format("  long o = gid / {0}L, i = gid % {0}L;\n", std::max<int64_t>(s.inner, 1));
  code += fmt::format("  {} acc = 0, comp = 0;\n", ctype(c));
  code += fmt::format("  for (long q = 0; q < {}L; ++q) {{\n", s.middle);
  code += fmt::format("    long m = {};\n", a.reverse ? fmt::format("{}L - 1 - q", s.middle) : "q");
  code += fmt::format("    long at = (o * {}L + m) * {}L + i;\n", s.middle, s.inner);
  code += fmt::format("    {} v = {};\n", ctype(c), load(t, "in0", "at"));
  std::string put = fmt::format("out[at] = {};", store(t, c, "acc"));
  code += a.exclusive ? "    " + put + "\n    " + accumulate(c, "v") + "\n"
                      : "    " + accumulate(c, "v") + "\n    " + put + "\n";
  code += "  }\n  (void)comp;\n";
  return finish(std::move(k), code, s.outer * s.inner);
}

// One work item per element: its rank is the number of elements that sort before it (a strict
// total order: ties go to the lower index, NaN is the largest), and it is written if < k.
KernelSource argsort(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::ArgsortAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  Split3 s = split_at(x, a.axis);
  Class c = class_of(x.dtype());
  bool f = c != Class::i64;
  int64_t items = s.outer * s.middle * s.inner;
  std::string code = head(k, g, n.shape.dtype(), items);
  code += fmt::format("  long q = gid % {0}L, row = gid / {0}L;\n", std::max<int64_t>(s.middle, 1));
  code += fmt::format("  long i = row % {0}L, o = row / {0}L;\n", std::max<int64_t>(s.inner, 1));
  code += fmt::format("  long base = o * {}L + i;\n", s.middle * s.inner);
  code += fmt::format("  {} vq = {};\n", ctype(c),
                      load(x.dtype(), "in0", fmt::format("base + q * {}L", s.inner)));
  code += "  long rank = 0;\n";
  code += fmt::format("  for (long p = 0; p < {}L; ++p) {{\n", s.middle);
  code += fmt::format("    {} vp = {};\n", ctype(c),
                      load(x.dtype(), "in0", fmt::format("base + p * {}L", s.inner)));
  code += "    bool before;\n";
  if (f) {
    code += "    bool np = isnan(vp), nq = isnan(vq);\n";
    code += fmt::format("    if (np || nq) before = (np && nq) ? p < q : {};\n    else ",
                        a.descending ? "np" : "nq");
  } else {
    code += "    ";
  }
  code += fmt::format("before = vp != vq ? ({}) : p < q;\n", a.descending ? "vp > vq" : "vp < vq");
  code += "    rank += before ? 1 : 0;\n  }\n";
  code += fmt::format("  if (rank < {}L) out[(o * {}L + rank) * {}L + i] = {};\n", a.k, a.k,
                      s.inner, store(n.shape.dtype(), Class::i64, "q"));
  return finish(std::move(k), code, items);
}

KernelSource dot(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  auto lst = ls.strides(), rst = rs.strides();
  auto contains = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<int> lfree, rfree;
  for (int i = 0; i < ls.rank(); ++i)
    if (!contains(a.lhs_batch, i) && !contains(a.lhs_contract, i)) lfree.push_back(i);
  for (int i = 0; i < rs.rank(); ++i)
    if (!contains(a.rhs_batch, i) && !contains(a.rhs_contract, i)) rfree.push_back(i);
  Class c = class_of(ls.dtype());
  std::string code = head(k, g, n.shape.dtype(), n.shape.numel()) + unflatten(n.shape, "gid", "o");
  std::string lbase = "0", rbase = "0";
  int axis = 0;
  for (size_t b = 0; b < a.lhs_batch.size(); ++b, ++axis) {
    lbase += fmt::format(" + o{} * {}L", axis, lst[a.lhs_batch[b]]);
    rbase += fmt::format(" + o{} * {}L", axis, rst[a.rhs_batch[b]]);
  }
  for (int l : lfree) lbase += fmt::format(" + o{} * {}L", axis++, lst[l]);
  for (int r : rfree) rbase += fmt::format(" + o{} * {}L", axis++, rst[r]);
  code += fmt::format("  long lb = {}, rb = {};\n  {} acc = 0;\n", lbase, rbase, ctype(c));
  std::string loff, roff;
  for (size_t i = 0; i < a.lhs_contract.size(); ++i) {
    code += fmt::format("  for (long c{0} = 0; c{0} < {1}L; ++c{0}) {{\n", i,
                        ls.size(a.lhs_contract[i]));
    loff += fmt::format(" + c{} * {}L", i, lst[a.lhs_contract[i]]);
    roff += fmt::format(" + c{} * {}L", i, rst[a.rhs_contract[i]]);
  }
  code += fmt::format("    acc += {} * {};\n", load(ls.dtype(), "in0", "lb" + loff),
                      load(rs.dtype(), "in1", "rb" + roff));
  for (size_t i = 0; i < a.lhs_contract.size(); ++i) code += "  }\n";
  code += fmt::format("  out[gid] = {};\n", store(n.shape.dtype(), c, "acc"));
  return finish(std::move(k), code, n.shape.numel());
}

KernelSource convolution(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::ConvAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& w = g.node(n.inputs[1]).shape;
  const Shape& y = n.shape;
  int sp = x.rank() - 2;
  auto xs = x.strides(), ws = w.strides();
  int64_t og = w.size(0) / a.groups, cg = w.size(1);
  const char* A = x.dtype() == DType::f64 ? "double" : "float";
  std::string code = head(k, g, y.dtype(), y.numel()) + unflatten(y, "gid", "o");
  code += fmt::format("  long group = o1 / {}L;\n  {} acc = 0;\n", std::max<int64_t>(og, 1), A);
  code += fmt::format("  for (long c = 0; c < {}L; ++c) {{\n", cg);
  code +=
      fmt::format("    long xb = o0 * {}L + (group * {}L + c) * {}L, wb = o1 * {}L + c * {}L;\n",
                  xs[0], cg, xs[1], ws[0], ws[1]);
  std::string xoff, woff;
  for (int i = 0; i < sp; ++i) {
    code += fmt::format("    for (long k{0} = 0; k{0} < {1}L; ++k{0}) {{\n", i, w.size(2 + i));
    code += fmt::format("      long p{0} = o{1} * {2}L - {3}L + k{0} * {4}L;\n", i, 2 + i,
                        a.strides[i], a.pad_low[i], a.dilations[i]);
    code += fmt::format("      if (p{0} < 0 || p{0} >= {1}L) continue;\n", i, x.size(2 + i));
    xoff += fmt::format(" + p{} * {}L", i, xs[2 + i]);
    woff += fmt::format(" + k{} * {}L", i, ws[2 + i]);
  }
  code += fmt::format("    acc += ({}){} * ({}){};\n", A, load(x.dtype(), "in0", "xb" + xoff), A,
                      load(w.dtype(), "in1", "wb" + woff));
  for (int i = 0; i < sp; ++i) code += "    }\n";
  code += "  }\n";
  code += fmt::format("  out[gid] = {};\n",
                      store(y.dtype(), x.dtype() == DType::f64 ? Class::f64 : Class::f32, "acc"));
  return finish(std::move(k), code, y.numel());
}

}  // namespace

KernelSource compute_kernel(const ir::Graph& g, ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::cumsum:
      return cumsum(g, n, std::move(k));
    case Op::argsort:
      return argsort(g, n, std::move(k));
    case Op::dot:
      if (auto fast = matmul_kernel(g, id, k)) return std::move(*fast);
      return dot(g, n, std::move(k));
    case Op::convolution:
      return convolution(g, n, std::move(k));
    default:
      fail("opencl: {} is not a compute op", ir::op_name(n.op));
  }
}

}  // namespace prism::opencl
