// Attention as one CUDA kernel (the other composites the platform keeps whole are kernel IR), with
// grouped-query heads, causal and sliding-window masks, an explicit mask and a position
// offset: one block of warps per query row (16 when there are few rows, as in decoding, else
// 4), each warp streaming its share of the keys with an online softmax, the partial results
// merged through shared memory.
#include <algorithm>

#include "prism/backends/cuda/codegen.h"
#include "prism/core/error.h"

namespace prism::cuda::detail {

using ir::Op;

namespace {

void require_float(const ir::Node& n, DType t) {
  PRISM_CHECK(is_float(t), "cuda: {} needs a floating-point dtype, not {}", ir::op_name(n.op),
              name(t));
}

std::string float_type(DType t) { return t == DType::f64 ? "double" : "float"; }
std::string fn(const std::string& type, const char* base) {
  return type == "float" ? std::string(base) + "f" : std::string(base);
}

KernelCode block_per_row(const std::string& name, const std::string& source, int64_t rows,
                         int block) {
  KernelCode k;
  k.name = name;
  k.work = rows;
  k.block_per_item = true;
  k.block = block;
  k.source = source;
  return k;
}

KernelCode attention(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::AttentionAttrs>();
  const Shape& q = g.node(n.inputs[0]).shape;
  const Shape& k = g.node(n.inputs[1]).shape;
  const Shape& v = g.node(n.inputs[2]).shape;
  require_float(n, q.dtype());
  int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3);
  int64_t G = k.size(1), Sk = k.size(2), E = v.size(3);
  PRISM_CHECK(G > 0 && H % G == 0,
              "cuda: attention needs query heads ({}) a multiple of key heads ({})", H, G);
  int64_t rep = H / G, DT = (D + 31) / 32, ET = (E + 31) / 32;
  std::vector<DType> ins;
  for (ir::ValueId in : n.inputs) ins.push_back(g.node(in).shape.dtype());
  std::string T = float_type(q.dtype()), L = ld(q.dtype()), ex = fn(T, "exp");
  std::string src = signature(name, n.shape.dtype(), ins, false);
  // Few query rows (decoding): more warps per row, so that the keys are spread over more of
  // the GPU; many rows (prefill): four, and the rows fill it.
  const int warps = B * H * Sq < 1024 ? 16 : 4;
  std::string offset = a.has_offset ? load_index(ins.back(), fmt::format("in{}", ins.size() - 1))
                                    : fmt::format("{}LL", Sk - Sq);
  std::string visible = "true";
  if (a.causal) visible += " && j <= qpos";
  if (a.window > 0) visible += fmt::format(" && j > qpos - {}LL", a.window);
  std::string mask;
  if (a.has_mask) {
    DType mt = ins[3];
    std::string at = fmt::format("row * {}LL + j", Sk);
    mask = mt == DType::boolean
               ? fmt::format("      if (!in3[{}]) s = prism_neg_inf<{}>();\n", at, T)
               : fmt::format("      s += ({}){}(in3[{}]);\n", T, ld(mt), at);
  }
  src += fmt::format(
      "  __shared__ {0} part_m[{1}], part_l[{1}], part_acc[{1}][{2}];\n"
      "  i64 row = blockIdx.x;  // (b, h, i)\n"
      "  i64 i = row % {3}LL, h = row / {3}LL % {4}LL, b = row / ({3}LL * {4}LL), gk = h / {5}LL;\n"
      "  i64 qpos = {6} + i;\n"
      "  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
      "  const auto* qr = in0 + row * {7}LL;\n"
      "  const auto* kb = in1 + (b * {8}LL + gk) * {9}LL * {7}LL;\n"
      "  const auto* vb = in2 + (b * {8}LL + gk) * {9}LL * {2}LL;\n"
      "  {0} qreg[{10}], acc[{11}];\n"
      "#pragma unroll\n"
      "  for (int t = 0; t < {10}; ++t) {{\n"
      "    int d = lane + 32 * t;\n"
      "    qreg[t] = d < {7} ? {12}(qr[d]) : ({0})0;\n"
      "  }}\n"
      "#pragma unroll\n"
      "  for (int t = 0; t < {11}; ++t) acc[t] = 0;\n"
      "  {0} m = prism_neg_inf<{0}>(), l = 0;\n"
      "  for (i64 j = warp; j < {9}LL; j += {1}) {{\n"
      "    if (!({13})) continue;\n"
      "    const auto* kr = kb + j * {7}LL;\n"
      "    {0} dot = 0;\n"
      "#pragma unroll\n"
      "    for (int t = 0; t < {10}; ++t) {{\n"
      "      int d = lane + 32 * t;\n"
      "      if (d < {7}) dot += qreg[t] * {12}(kr[d]);\n"
      "    }}\n"
      "    {0} s = warp_sum(dot) * ({0}){14:.17g};\n"
      "{15}"
      "    if (!(s > prism_neg_inf<{0}>())) continue;\n"
      "    {0} mn = s > m ? s : m, c = {16}(m - mn), p = {16}(s - mn);\n"
      "    l = l * c + p;\n"
      "    const auto* vr = vb + j * {2}LL;\n"
      "#pragma unroll\n"
      "    for (int t = 0; t < {11}; ++t) {{\n"
      "      int e = lane + 32 * t;\n"
      "      acc[t] = acc[t] * c + (e < {2} ? p * {12}(vr[e]) : ({0})0);\n"
      "    }}\n"
      "    m = mn;\n"
      "  }}\n"
      "  if (lane == 0) {{ part_m[warp] = m; part_l[warp] = l; }}\n"
      "#pragma unroll\n"
      "  for (int t = 0; t < {11}; ++t) {{\n"
      "    int e = lane + 32 * t;\n"
      "    if (e < {2}) part_acc[warp][e] = acc[t];\n"
      "  }}\n"
      "  __syncthreads();\n"
      "  {0} mx = prism_neg_inf<{0}>();\n"
      "  for (int w = 0; w < {1}; ++w) mx = part_m[w] > mx ? part_m[w] : mx;\n"
      "  {0} total = 0;\n"
      "  for (int w = 0; w < {1}; ++w) total += part_l[w] > 0 ? part_l[w] * {16}(part_m[w] - mx) : "
      "({0})0;\n"
      "  for (int e = threadIdx.x; e < {2}; e += blockDim.x) {{\n"
      "    {0} y = 0;\n"
      "    for (int w = 0; w < {1}; ++w)\n"
      "      if (part_l[w] > 0) y += part_acc[w][e] * {16}(part_m[w] - mx);\n"
      "    out[row * {2}LL + e] = {17}(y / total);\n"
      "  }}\n"
      "}}\n",
      T, warps, E, Sq, H, rep, offset, D, G, Sk, DT, ET, L, visible, a.scale, mask, ex,
      st(n.shape.dtype()));
  return block_per_row(name, src, B * H * Sq, 32 * warps);
}

}  // namespace

std::vector<KernelCode> generate_nn(const ir::Graph& g, ir::ValueId id, const std::string& name) {
  const ir::Node& n = g.node(id);
  switch (n.op) {
    case Op::attention:
      return {attention(g, n, name)};
    default:
      return {};
  }
}

}  // namespace prism::cuda::detail
