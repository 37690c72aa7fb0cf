// The composites the OpenCL platform runs as one kernel: softmax, log_softmax, rms_norm,
// layer_norm, rope and attention. Softmax and the norms take one work group of 64 per lane
// (the elements the op normalizes together); its threads read the lane side by side and
// combine their partial results in local memory.
#include <fmt/format.h>

#include <algorithm>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/kernel_text.h"
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

std::string lane_head(const KernelSource& k, const ir::Graph& g, const ir::Node& n,
                      const Lanes& l) {
  std::string c = signature(k.name, g, k.reads, n.shape.dtype());
  c += fmt::format("  __local {} red[{}];\n", ctype(n.shape.dtype()), kGroup);
  c += "  int t = get_local_id(0);\n  long lane = get_group_id(0);\n";
  c += fmt::format("  long base = lane / {0}L * {1}L + lane % {0}L;\n",
                   std::max<int64_t>(l.inner, 1), l.middle * l.inner);
  return c;
}

KernelSource launch(KernelSource k, std::string code, const Lanes& l) {
  k.code = std::move(code) + "}\n";
  k.global[0] = l.outer * l.inner * kGroup;
  k.local[0] = kGroup;
  return k;
}

KernelSource softmax(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  int axis = n.attr<ir::AxisAttrs>().axis;
  const Shape& x = n.shape;
  Lanes l;
  for (int i = 0; i < x.rank(); ++i)
    (i < axis ? l.outer : i == axis ? l.middle : l.inner) *= x.size(i);
  DType t = x.dtype();
  const char* T = ctype(t);
  std::string at = fmt::format("base + m * {}L", l.inner);
  std::string loop = fmt::format("  for (long m = t; m < {}L; m += {})", l.middle, kGroup);
  std::string c = lane_head(k, g, n, l);
  c += fmt::format("  {} mx = -INFINITY, sum = 0;\n", T);
  c += fmt::format("{} mx = max(mx, {});\n", loop, load(t, "in0", at));
  c += group_reduce("mx", "max(red[t], red[t + s])");
  c += fmt::format("{} sum += exp({} - mx);\n", loop, load(t, "in0", at));
  c += group_reduce("sum", "red[t] + red[t + s]");
  if (n.op == Op::log_softmax) {
    c += fmt::format("  {} lsum = log(sum);\n", T);
    c += fmt::format("{} out[{}] = {};\n", loop, at,
                     store(t, class_of(t), fmt::format("({} - mx) - lsum", load(t, "in0", at))));
  } else {
    c += fmt::format("  {0} inv = ({0})1 / sum;\n", T);
    c += fmt::format("{} out[{}] = {};\n", loop, at,
                     store(t, class_of(t), fmt::format("exp({} - mx) * inv", load(t, "in0", at))));
  }
  return launch(std::move(k), c, l);
}

KernelSource norm(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  const auto& a = n.attr<ir::NormAttrs>();
  const Shape& x = n.shape;
  Lanes l;
  for (int i = 0; i < x.rank(); ++i) {
    (i < a.axes.front() ? l.outer : i <= a.axes.back() ? l.middle : l.inner) *= x.size(i);
  }
  DType t = x.dtype();
  const char* T = ctype(t);
  std::string at = fmt::format("base + m * {}L", l.inner);
  std::string loop = fmt::format("  for (long m = t; m < {}L; m += {})", l.middle, kGroup);
  std::string c = lane_head(k, g, n, l);
  c += fmt::format("  {} mean = 0, sq = 0;\n", T);
  if (n.op == Op::layer_norm) {
    c += fmt::format("{} mean += {};\n", loop, load(t, "in0", at));
    c += group_reduce("mean", "red[t] + red[t + s]");
    c += fmt::format("  mean /= ({}){}L;\n", T, l.middle);
  }
  c += fmt::format("{} {{ {} d = {} - mean; sq += d * d; }}\n", loop, T, load(t, "in0", at));
  c += group_reduce("sq", "red[t] + red[t + s]");
  c += fmt::format("  {0} scale = ({0})1 / sqrt(sq / ({0}){1}L + ({0}){2});\n", T, l.middle, a.eps);
  c += fmt::format("{} out[{}] = {};\n", loop, at,
                   store(t, class_of(t), fmt::format("({} - mean) * scale", load(t, "in0", at))));
  return launch(std::move(k), c, l);
}

// One work item per rotated pair.
KernelSource rope(const ir::Graph& g, const ir::Node& n, KernelSource k) {
  bool interleaved = n.attr<ir::RopeAttrs>().interleaved;
  const Shape& x = n.shape;
  DType t = x.dtype();
  DType ct = g.node(n.inputs[1]).shape.dtype(), st = g.node(n.inputs[2]).shape.dtype();
  int64_t d = x.size(x.rank() - 1), half = d / 2, rows = x.numel() / std::max<int64_t>(d, 1);
  int64_t items = rows * half;
  std::string c = signature(k.name, g, k.reads, t);
  c += fmt::format("  long gid = get_global_id(0);\n  if (gid >= {}L) return;\n", items);
  c += fmt::format("  long r = gid / {0}L, i = gid % {0}L;\n", std::max<int64_t>(half, 1));
  c += fmt::format("  long p = r * {}L + {}, q = r * {}L + {};\n", d, interleaved ? "2 * i" : "i",
                   d, interleaved ? "2 * i + 1" : fmt::format("i + {}L", half));
  c +=
      fmt::format("  {0} co = {1}, si = {2}, a = {3}, b = {4};\n", ctype(t), load(ct, "in1", "gid"),
                  load(st, "in2", "gid"), load(t, "in0", "p"), load(t, "in0", "q"));
  c += fmt::format("  out[p] = {};\n  out[q] = {};\n}}\n", store(t, class_of(t), "a * co - b * si"),
                   store(t, class_of(t), "b * co + a * si"));
  k.code = std::move(c);
  k.global[0] = items;
  return k;
}

// One work group per query row. Pass one finds the largest score; pass two takes the keys
// 64 at a time: each thread scores one key, then every thread adds the weighted values of
// those keys into the output columns it owns.
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
    case Op::softmax:
    case Op::log_softmax:
      return is_float(n.shape.dtype());
    case Op::rms_norm:
    case Op::layer_norm: {  // one contiguous run of axes
      const auto& axes = n.attr<ir::NormAttrs>().axes;
      return is_float(n.shape.dtype()) && !axes.empty() &&
             axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
    }
    case Op::rope:
      return is_float(n.shape.dtype());
    case Op::attention:
      return is_float(n.shape.dtype());
    default:
      return false;
  }
}

KernelSource nn_kernel(const ir::Graph& g, ir::ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::softmax:
    case Op::log_softmax:
      return softmax(g, n, std::move(k));
    case Op::rms_norm:
    case Op::layer_norm:
      return norm(g, n, std::move(k));
    case Op::rope:
      return rope(g, n, std::move(k));
    case Op::attention:
      return attention(g, n, std::move(k));
    default:
      fail("opencl: composite {} has no kernel; the compiler should have decomposed it",
           ir::op_name(n.op));
  }
}

}  // namespace prism::opencl
