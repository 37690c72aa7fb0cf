// OpenCL C for scatter, the one data movement op that the kernel IR (prism/compiler/kernel_ir.h)
// does not describe yet.
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

}  // namespace

KernelSource data_kernel(const ir::Graph& g, ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  PRISM_CHECK(n.op == Op::scatter, "opencl: {} has no kernel of its own", ir::op_name(n.op));
  return scatter(g, n, std::move(k));
}

}  // namespace prism::opencl
