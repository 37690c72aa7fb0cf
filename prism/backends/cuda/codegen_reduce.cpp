// Cumulative sums, top-k sorting, dot_general and convolution as generic kernels: one thread
// per output element (or per lane along the scanned axis). Reductions are kernel IR
// (prism/compiler/kernel_ir.h).
// Matrix products of f32/f16/bf16/f64 normally run in cuBLASLt instead (matmul.h); the dot
// kernels here cover integer dtypes, operand layouts cuBLASLt cannot view, and machines
// without cuBLASLt.
#include <algorithm>

#include "prism/backends/cuda/codegen.h"
#include "prism/core/error.h"

namespace prism::cuda::detail {

using ir::Op;

namespace {

KernelCode kernel(const std::string& name, const std::string& sig, int64_t n,
                  const std::string& body) {
  KernelCode k;
  k.name = name;
  k.work = n;
  k.source = sig + grid_stride(n, body) + "}\n";
  return k;
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

std::string accumulator(DType t) { return is_float(t) ? "double" : "i64"; }

KernelCode cumsum(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::AxisAttrs>();
  const Shape& x = n.shape;
  Split3 s = split3(x, a.axis, a.axis + 1);
  std::string acc = accumulator(x.dtype());
  std::string body = fmt::format(
      "    i64 o = i / {0}LL, r = i % {0}LL;\n"
      "    {2} a = 0;\n"
      "    for (i64 k = 0; k < {1}LL; ++k) {{\n"
      "      i64 m = {3}, at = (o * {1}LL + m) * {0}LL + r;\n"
      "      {2} v = ({2}){4}(in0[at]);\n"
      "      {5}\n"
      "    }}\n",
      s.inner, s.middle, acc, a.reverse ? fmt::format("{}LL - 1 - k", s.middle) : "k",
      ld(x.dtype()),
      a.exclusive ? fmt::format("out[at] = {}(a); a += v;", st(x.dtype()))
                  : fmt::format("a += v; out[at] = {}(a);", st(x.dtype())));
  return kernel(name, signature(name, x.dtype(), {x.dtype()}), s.outer * s.inner, body);
}

// The first k of a stable sort along the axis, one thread per lane: k rounds, each picking
// the first element that comes strictly after the previous pick in the sort's total order
// (value, then index; NaN counts as the largest value).
KernelCode argsort(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::ArgsortAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  Split3 s = split3(x, a.axis, a.axis + 1);
  std::string L = ld(x.dtype());
  std::string body = fmt::format(
      "    i64 o = i / {0}LL, r = i % {0}LL, base = o * {1}LL * {0}LL + r, prev = -1;\n"
      "    double pv = 0;\n"
      "    for (i64 k = 0; k < {2}LL; ++k) {{\n"
      "      i64 best = -1; double bv = 0;\n"
      "      for (i64 m = 0; m < {1}LL; ++m) {{\n"
      "        double v = (double){3}(in0[base + m * {0}LL]);\n"
      "        if (prev >= 0 && !before(pv, prev, v, m)) continue;\n"
      "        if (best < 0 || before(v, m, bv, best)) {{ best = m; bv = v; }}\n"
      "      }}\n"
      "      out[(o * {2}LL + k) * {0}LL + r] = {4}(best);\n"
      "      prev = best; pv = bv;\n"
      "    }}\n",
      s.inner, s.middle, a.k, L, st(n.shape.dtype()));
  std::string before = fmt::format(
      "  auto before = [](double vp, i64 p, double vq, i64 q) {{\n"
      "    bool np = vp != vp, nq = vq != vq;\n"
      "    if (np || nq) return (np && nq) ? p < q : {};\n"
      "    if (vp != vq) return vp {} vq;\n"
      "    return p < q;\n"
      "  }};\n",
      a.descending ? "np" : "nq", a.descending ? ">" : "<");
  KernelCode k;
  k.name = name;
  k.work = s.outer * s.inner;
  k.source =
      signature(name, n.shape.dtype(), {x.dtype()}) + before + grid_stride(k.work, body) + "}\n";
  return k;
}

KernelCode dot(const ir::Graph& g, const ir::Node& n, const std::string& name) {
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
  // Output axes: batch, lhs free, rhs free.
  std::string body = coords(n.shape, "i", "c"), loff = "0", roff = "0";
  int axis = 0;
  for (size_t j = 0; j < a.lhs_batch.size(); ++j, ++axis) {
    loff += fmt::format(" + c{} * {}LL", axis, lst[a.lhs_batch[j]]);
    roff += fmt::format(" + c{} * {}LL", axis, rst[a.rhs_batch[j]]);
  }
  for (int f : lfree) loff += fmt::format(" + c{} * {}LL", axis++, lst[f]);
  for (int f : rfree) roff += fmt::format(" + c{} * {}LL", axis++, rst[f]);
  std::vector<Dim> kdims;
  for (int c : a.lhs_contract) kdims.push_back(ls.dim(c));
  Shape kshape(ls.dtype(), kdims);
  DType t = n.shape.dtype();
  std::string acc = t == DType::f64 ? "double" : is_float(t) ? "float" : "i64";
  bool rows = a.lhs_contract.size() == 1 && lst[a.lhs_contract[0]] == 1 &&
              rst[a.rhs_contract[0]] == 1 && kshape.numel() >= 32;
  if (rows) {
    // Both operands contiguous along the contraction (x . W for a linear layer's [out, in]
    // weight): one warp per output element, its lanes reading consecutive elements, so that
    // matrix-vector products (decoding) stream the weights at full width.
    std::string src = signature(name, t, {ls.dtype(), rs.dtype()});
    src += fmt::format(
        "  int lane = threadIdx.x & 31;\n"
        "  i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;\n"
        "  for (i64 i = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < {}LL; i += warps) "
        "{{\n{}"
        "    {} a = 0;\n"
        "    for (i64 k = lane; k < {}LL; k += 32) a += ({})({}(in0[{} + k])) * ({})({}(in1[{} + "
        "k]));\n"
        "    a = warp_sum(a);\n"
        "    if (lane == 0) out[i] = {}(a);\n"
        "  }}\n}}\n",
        n.shape.numel(), body, acc, kshape.numel(), acc, ld(ls.dtype()), loff, acc, ld(rs.dtype()),
        roff, st(t));
    KernelCode k;
    k.name = name;
    k.work = n.shape.numel() * 32;
    k.source = src;
    return k;
  }
  body +=
      fmt::format("    {} a = 0;\n    for (i64 r = 0; r < {}LL; ++r) {{\n", acc, kshape.numel());
  body += coords(kshape, "r", "q");
  std::string lk = loff, rk = roff;
  for (size_t j = 0; j < a.lhs_contract.size(); ++j) {
    lk += fmt::format(" + q{} * {}LL", j, lst[a.lhs_contract[j]]);
    rk += fmt::format(" + q{} * {}LL", j, rst[a.rhs_contract[j]]);
  }
  body += fmt::format("    a += ({0}){1}(in0[{2}]) * ({0}){3}(in1[{4}]);\n    }}\n", acc,
                      ld(ls.dtype()), lk, ld(rs.dtype()), rk);
  body += fmt::format("    out[i] = {}(a);\n", st(t));
  return kernel(name, signature(name, t, {ls.dtype(), rs.dtype()}), n.shape.numel(), body);
}

KernelCode convolution(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::ConvAttrs>();
  const Shape& x = g.node(n.inputs[0]).shape;
  const Shape& w = g.node(n.inputs[1]).shape;
  const Shape& y = n.shape;
  int sp = x.rank() - 2;
  int64_t cg = w.size(1), og = w.size(0) / a.groups;
  auto xs = x.strides(), ws = w.strides();
  std::string acc = x.dtype() == DType::f64 ? "double" : "float";
  std::string body = coords(y, "i", "c");  // c0 batch, c1 output channel, c2.. spatial
  body += fmt::format("    {} a = 0;\n    i64 group = c1 / {}LL;\n", acc, og);
  std::vector<Dim> kdims;
  for (int i = 0; i < sp; ++i) kdims.push_back(w.dim(2 + i));
  Shape kshape(w.dtype(), kdims);
  body += fmt::format("    for (i64 kk = 0; kk < {}LL; ++kk) {{\n", kshape.numel());
  body += coords(kshape, "kk", "k");
  std::string inside = "true", xoff = fmt::format("c0 * {}LL", xs[0]),
              woff = fmt::format("c1 * {}LL", ws[0]);
  for (int i = 0; i < sp; ++i) {
    body += fmt::format("    i64 p{0} = c{1} * {2}LL - ({3}LL) + k{0} * {4}LL;\n", i, 2 + i,
                        a.strides[i], a.pad_low[i], a.dilations[i]);
    inside += fmt::format(" && p{0} >= 0 && p{0} < {1}LL", i, x.size(2 + i));
    xoff += fmt::format(" + p{} * {}LL", i, xs[2 + i]);
    woff += fmt::format(" + k{} * {}LL", i, ws[2 + i]);
  }
  body += fmt::format("    if (!({})) continue;\n", inside);
  body += fmt::format(
      "    for (i64 ch = 0; ch < {}LL; ++ch)\n"
      "      a += ({})({}(in0[{} + (group * {}LL + ch) * {}LL])) * ({})({}(in1[{} + ch * {}LL]));\n"
      "    }}\n",
      cg, acc, ld(x.dtype()), xoff, cg, xs[1], acc, ld(w.dtype()), woff, ws[1]);
  body += fmt::format("    out[i] = {}(a);\n", st(y.dtype()));
  return kernel(name, signature(name, y.dtype(), {x.dtype(), w.dtype()}), y.numel(), body);
}

}  // namespace

std::vector<KernelCode> generate_reduce(const ir::Graph& g, ir::ValueId id,
                                        const std::string& name) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::cumsum:
      return {cumsum(g, n, name)};
    case Op::argsort:
      return {argsort(g, n, name)};
    case Op::dot:
      return {dot(g, n, name)};
    case Op::convolution:
      return {convolution(g, n, name)};
    default:
      return {};
  }
}

}  // namespace prism::cuda::detail
