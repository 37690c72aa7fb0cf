// Scatter, the one data movement op that the kernel IR (prism/compiler/kernel_ir.h) does not
// describe yet: it writes into a copy of its first operand, made only when the step does not
// run in place on a donated or dying operand.
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

// An index read from `ptr[at]`, negative counting from the end, clamped into [0, size).
std::string wrapped_index(DType t, const std::string& ptr, const std::string& at, int64_t size,
                          const std::string& var) {
  return fmt::format(
      "    i64 {0} = {1}; if ({0} < 0) {0} += {2}LL; {0} = {0} < 0 ? 0 : ({0} > {3}LL ? {3}LL : "
      "{0});\n",
      var, load_index(t, ptr, at), size, size - 1);
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

}  // namespace

std::vector<KernelCode> generate_data(const ir::Graph& g, ir::ValueId id, const std::string& name) {
  const ir::Node& n = g.node(id);
  if (n.op == Op::scatter) return scatter(g, n, name);
  return {};
}

}  // namespace prism::cuda::detail
