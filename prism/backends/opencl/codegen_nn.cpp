// Attention as one OpenCL kernel (the other composites the platform keeps whole are kernel IR).
#include <fmt/format.h>

#include <algorithm>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/kernel_text.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/core/error.h"

namespace prism::opencl {

using ir::Op;

namespace {

constexpr int kGroup = 64;

// Statements leaving the combination of every thread's `v` in `v` (for all threads).
std::string group_reduce(const char* v, const char* combine) {
  return fmt::format(
      "  red[t] = {0};\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
      "  for (int s = {1}; s > 0; s >>= 1) {{\n"
      "    if (t < s) red[t] = {2};\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }}\n"
      "  {0} = red[0];\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
      v, kGroup / 2, combine);
}

struct Lanes {
  int64_t outer = 1, middle = 1, inner = 1;
};

KernelSource attention(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::AttentionAttrs>();
  const Shape& q = g.node(n.inputs[0]).shape;
  const Shape& kk = g.node(n.inputs[1]).shape;
  const Shape& v = g.node(n.inputs[2]).shape;
  DType t = q.dtype();
  const char* T = ctype(t);
  int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3);
  int64_t G = kk.size(1), Sk = kk.size(2), E = v.size(3), rep = H / std::max<int64_t>(G, 1);
  int64_t cols = (E + kGroup - 1) / kGroup;
  std::string c = signature(k.name, g, k.reads, n.shape.dtype());
  c += fmt::format("  __local {} red[{}], w[{}];\n", T, kGroup, kGroup);
  c += "  int t = get_local_id(0);\n  long row = get_group_id(0);\n";
  c += fmt::format("  long i = row % {0}L, h = (row / {0}L) % {1}L, b = row / ({0}L * {1}L);\n", Sq,
                   H);
  c += fmt::format("  long gk = h / {}L;\n", rep);
  if (a.has_offset) {
    DType od = g.node(n.inputs.back()).shape.dtype();
    c += fmt::format("  long qpos = (long)({}) + i;\n",
                     load(od, fmt::format("in{}", n.inputs.size() - 1), "0"));
  } else {
    c += fmt::format("  long qpos = {}L + i;\n", Sk - Sq);
  }
  c += fmt::format("  long qb = ((b * {}L + h) * {}L + i) * {}L;\n", H, Sq, D);
  c += fmt::format("  long kb = (b * {}L + gk) * {}L;\n", G, Sk);
  // The score of key j (-INFINITY where it is not visible).
  std::string visible = "true";
  if (a.causal) visible += " && j <= qpos";
  if (a.window > 0) visible += fmt::format(" && j > qpos - {}L", a.window);
  std::string score = fmt::format(
      "    {0} s = -INFINITY;\n"
      "    if (j < {1}L && {2}) {{\n"
      "      {0} dot = 0;\n"
      "      for (long d = 0; d < {3}L; ++d) dot += {4} * {5};\n"
      "      s = dot * ({0}){6};\n",
      T, Sk, visible, D, load(t, "in0", "qb + d"),
      load(kk.dtype(), "in1", fmt::format("(kb + j) * {}L + d", D)), a.scale);
  if (a.has_mask) {
    DType md = g.node(n.inputs[3]).shape.dtype();
    std::string at = fmt::format("((b * {}L + h) * {}L + i) * {}L + j", H, Sq, Sk);
    if (md == DType::boolean) {
      score += fmt::format("      if (!in3[{}]) s = -INFINITY;\n", at);
    } else {
      score += fmt::format("      s += ({}){};\n", T, load(md, "in3", at));
    }
  }
  score += "    }\n";
  c += fmt::format("  {} mx = -INFINITY;\n", T);
  c += fmt::format("  for (long j = t; j < {}L; j += {}) {{\n{}    mx = max(mx, s);\n  }}\n", Sk,
                   kGroup, score);
  c += group_reduce("mx", "max(red[t], red[t + s])");
  c += fmt::format("  {} sum = 0, acc[{}];\n", T, cols);
  c += fmt::format("  for (int e = 0; e < {}; ++e) acc[e] = 0;\n", cols);
  c += fmt::format("  for (long j0 = 0; j0 < {}L; j0 += {}) {{\n", Sk, kGroup);
  c += "    long j = j0 + t;\n  {\n" + score + "    w[t] = exp(s - mx);\n  }\n";
  c += "    barrier(CLK_LOCAL_MEM_FENCE);\n";
  c += fmt::format("    for (int jj = 0; jj < {0} && j0 + jj < {1}L; ++jj) {{\n", kGroup, Sk);
  c += "      sum += w[jj];\n";
  c += fmt::format("      long vb = (kb + j0 + jj) * {}L;\n", E);
  c += fmt::format("      for (int e = 0; e < {}; ++e) {{\n", cols);
  c += fmt::format("        long col = t + e * {}L;\n", kGroup);
  c += fmt::format("        if (col < {}L) acc[e] += w[jj] * {};\n", E,
                   load(v.dtype(), "in2", "vb + col"));
  c += "      }\n    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n";
  c += fmt::format("  long ob = ((b * {}L + h) * {}L + i) * {}L;\n", H, Sq, E);
  c +=
      fmt::format("  for (int e = 0; e < {}; ++e) {{\n    long col = t + e * {}L;\n", cols, kGroup);
  c += fmt::format("    if (col < {}L) out[ob + col] = {};\n  }}\n", E,
                   store(n.shape.dtype(), class_of(t), "acc[e] / sum"));
  k.code = std::move(c) + "}\n";
  k.global[0] = B * H * Sq * kGroup;
  k.local[0] = kGroup;
  return k;
}

}  // namespace

bool supports_composite(const ir::Node& n) {
  switch (n.op) {
    case Op::attention:
      return is_float(n.shape.dtype());
    default:
      return kernel::lowers(n);
  }
}

KernelSource nn_kernel(const ir::Graph& g, ir::ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::attention:
      return attention(g, n, std::move(k));
    default:
      fail("opencl: composite {} has no kernel of its own", ir::op_name(n.op));
  }
}

}  // namespace prism::opencl
