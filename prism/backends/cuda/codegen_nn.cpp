// Attention as one CUDA kernel (the other composites the platform keeps whole are kernel IR), with
// grouped-query heads, causal and sliding-window masks, an explicit mask and a position
// offset: attention() below says how the work is laid out.
#include <algorithm>
#include <optional>
#include <string>

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

}  // namespace

// The loads of `v` consecutive elements of a row (storage `t`) starting at element `at` of
// `ptr` into `into[0..v)` in the compute type: one 16-byte load where `v` elements make one.
std::string load_run(DType t, int v, const std::string& ptr, const std::string& at,
                     const std::string& into) {
  const std::string L = ld(t);
  if (v == 8) {  // 2-byte storage
    return fmt::format(
        "      {{ const uint4 v16_ = *(const uint4*)({0} + {1});\n"
        "        const u32 ws_[4] = {{v16_.x, v16_.y, v16_.z, v16_.w}};\n"
        "#pragma unroll\n"
        "        for (int u = 0; u < 4; ++u) {{\n"
        "          {2}[2 * u] = {3}((u16)(ws_[u] & 0xffffu));\n"
        "          {2}[2 * u + 1] = {3}((u16)(ws_[u] >> 16));\n"
        "        }} }}\n",
        ptr, at, into, L);
  }
  if (v == 4) {  // f32
    return fmt::format(
        "      {{ const float4 v16_ = *(const float4*)({0} + {1});\n"
        "        {2}[0] = v16_.x; {2}[1] = v16_.y; {2}[2] = v16_.z; {2}[3] = v16_.w; }}\n",
        ptr, at, into);
  }
  return fmt::format("      {}[0] = {}({}[{}]);\n", into, L, ptr, at);
}

namespace {

// One block for R query rows that read the same key/value head: RH heads of a group sharing
// it, at P consecutive positions (R = RH x P). Each warp takes 32 keys at a time, a key to a
// lane: the lane computes its key's scores against all R rows (the rows' queries in shared
// memory, the key read once with 16-byte loads), the warp updates each row's online softmax,
// then accumulates values for the keys any row sees, each lane holding dims lane + 32t, the
// values of several keys loaded before any is used (their latencies overlap). The
// warps' partial results are merged through shared memory at the end. Decoding (few rows)
// takes one row a block and up to 32 warps, so that a long cache is spread over many warps;
// a prompt takes R rows a block, so that each key and value read from memory serves R rows.
KernelCode attention(const ir::Graph& g, const ir::Node& n, const std::string& name) {
  const auto& a = n.attr<ir::AttentionAttrs>();
  const Shape& q = g.node(n.inputs[0]).shape;
  const Shape& k = g.node(n.inputs[1]).shape;
  const Shape& v = g.node(n.inputs[2]).shape;
  require_float(n, q.dtype());
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3);
  const int64_t G = k.size(1), Sk = k.size(2), E = v.size(3);
  PRISM_CHECK(G > 0 && H % G == 0,
              "cuda: attention needs query heads ({}) a multiple of key heads ({})", H, G);
  const int64_t rep = H / G, ET = (E + 31) / 32;
  std::vector<DType> ins;
  for (ir::ValueId in : n.inputs) ins.push_back(g.node(in).shape.dtype());
  const std::string T = float_type(q.dtype()), ex = fn(T, "exp");
  const int64_t t_bytes = T == "double" ? 8 : 4;
  // Rows a block: one while decoding; for a prompt, the heads of a group (when their
  // accumulators fit in registers) times consecutive positions, at most 16 rows.
  const bool prompt = B * H * Sq >= 1024;
  int64_t RH = 1, P = 1;
  if (prompt) {
    RH = rep * ET <= 16 ? rep : 1;
    P = std::max<int64_t>(1, std::min({Sq, 16 / RH, 32 / (RH * ET)}));
  }
  // Warps: enough to cover the keys in one pass while decoding (up to 32), four for a
  // prompt; fewer where the warps' partial results would not fit in 40 KiB of shared memory.
  auto smem = [&](int64_t r, int64_t w) { return t_bytes * r * (D + w * (E + 2)); };
  int64_t W = prompt ? 4 : std::clamp<int64_t>((Sk + 31) / 32, 1, 32);
  while (RH * P > 1 && smem(RH * P, 1) > 40 * 1024) {
    if (P > 1) {
      --P;
    } else {
      RH = 1;
    }
  }
  while (W > 1 && smem(RH * P, W) > 40 * 1024) --W;
  const int64_t R = RH * P, tiles = (Sq + P - 1) / P;
  // Keys and values read 16 bytes at a time where a row's elements allow it.
  const DType kt = ins[1];
  const int VK = (size_of(kt) == 2 && D % 8 == 0) ? 8 : (kt == DType::f32 && D % 4 == 0) ? 4 : 1;
  const std::string offset = a.has_offset
                                 ? load_index(ins.back(), fmt::format("in{}", ins.size() - 1))
                                 : fmt::format("{}LL", Sk - Sq);
  std::string visible = "j < " + std::to_string(Sk) + "LL";
  if (a.causal) visible += " && j <= qpos(r)";
  if (a.window > 0) visible += fmt::format(" && j > qpos(r) - {}LL", a.window);
  visible += " && qrow(r) >= 0";
  std::string mask;
  if (a.has_mask) {
    const DType mt = ins[3];
    const std::string at = fmt::format("qrow(r) * {}LL + j", Sk);
    mask = mt == DType::boolean
               ? fmt::format("        if (!in3[{}]) sc = prism_neg_inf<{}>();\n", at, T)
               : fmt::format("        sc += ({}){}(in3[{}]);\n", T, ld(mt), at);
  }
  // The launch's size bounds the registers: a block of 32 warps (1024 threads) must fit.
  std::string src = signature(name, n.shape.dtype(), ins, static_cast<int>(32 * W));
  src += fmt::format(
      "  constexpr int R = {R}, W = {W}, ET = {ET}, D = {D}, E = {E}, VB = {VB};\n"
      "  __shared__ {T} q_s[R][D];\n"
      "  __shared__ {T} part_m[W][R], part_l[W][R], part_acc[W][R][E];\n"
      "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
      "  // blockIdx.x = (b, head group, position tile); rows r = (position p, head hh).\n"
      "  const i64 tile = blockIdx.x % {tiles}LL, hg = blockIdx.x / {tiles}LL % {HG}LL;\n"
      "  const i64 b = blockIdx.x / ({tiles}LL * {HG}LL), gk = hg * {RH}LL / {rep}LL;\n"
      "  // Row r's query row (b, h, i) in the flattened {{B, H, Sq}}, or -1 past the end, and\n"
      "  // its position; `last`, the last position any row sees.\n"
      "  const i64 i0 = tile * {P}LL, pos0 = {offset} + i0;\n"
      "  auto qrow = [&](int r) -> i64 {{\n"
      "    const i64 i = i0 + r / {RH};\n"
      "    return i < {Sq}LL ? (b * {H}LL + hg * {RH}LL + r % {RH}) * {Sq}LL + i : -1;\n"
      "  }};\n"
      "  auto qpos = [&](int r) -> i64 {{ return pos0 + r / {RH}; }};\n"
      "  const i64 last = pos0 + ({P}LL < {Sq}LL - i0 ? {P}LL : {Sq}LL - i0) - 1;\n"
      "  for (int x = threadIdx.x; x < R * D; x += blockDim.x) {{\n"
      "    const int r = x / D, d = x % D;\n"
      "    q_s[r][d] = qrow(r) >= 0 ? {L}(in0[qrow(r) * {D}LL + d]) : ({T})0;\n"
      "  }}\n"
      "  __syncthreads();\n"
      "  const auto* kb = in1 + (b * {G}LL + gk) * {Sk}LL * {D}LL;\n"
      "  const auto* vb = in2 + (b * {G}LL + gk) * {Sk}LL * {E}LL;\n"
      "  {T} m[R], l[R], acc[R][ET];\n"
      "#pragma unroll\n"
      "  for (int r = 0; r < R; ++r) {{\n"
      "    m[r] = prism_neg_inf<{T}>();\n"
      "    l[r] = 0;\n"
      "#pragma unroll\n"
      "    for (int t = 0; t < ET; ++t) acc[r][t] = 0;\n"
      "  }}\n"
      "  for (i64 j0 = (i64)warp * 32; j0 < {Sk}LL; j0 += W * 32) {{\n"
      "{early_exit}"
      "    const i64 j = j0 + lane;\n"
      "    {T} s[R];\n"
      "    bool seen = false;  // whether any row sees key j\n"
      "#pragma unroll\n"
      "    for (int r = 0; r < R; ++r) s[r] = 0;\n"
      "    if (j < {Sk}LL) {{\n"
      "      const auto* kr = kb + j * {D}LL;\n"
      "#pragma unroll\n"
      "      for (int d0 = 0; d0 < D; d0 += {VK}) {{\n"
      "        {T} kv[{VK}];\n"
      "{load_k}"
      "#pragma unroll\n"
      "        for (int u = 0; u < {VK}; ++u)\n"
      "#pragma unroll\n"
      "          for (int r = 0; r < R; ++r) s[r] += q_s[r][d0 + u] * kv[u];\n"
      "      }}\n"
      "    }}\n"
      "#pragma unroll\n"
      "    for (int r = 0; r < R; ++r) {{\n"
      "      {T} sc = s[r] * ({T}){scale:.17g};\n"
      "      if ({visible}) {{\n"
      "{mask}"
      "      }} else {{\n"
      "        sc = prism_neg_inf<{T}>();\n"
      "      }}\n"
      "      if (!(sc > prism_neg_inf<{T}>())) sc = prism_neg_inf<{T}>();\n"
      "      {T} mx = sc;\n"
      "      for (int o = 16; o > 0; o >>= 1) {{\n"
      "        const {T} y = __shfl_xor_sync(0xffffffffu, mx, o);\n"
      "        mx = y > mx ? y : mx;\n"
      "      }}\n"
      "      if (!(mx > prism_neg_inf<{T}>())) {{ s[r] = 0; continue; }}  // no key of 32 seen\n"
      "      const {T} mn = mx > m[r] ? mx : m[r], c = {ex}(m[r] - mn);\n"
      "      const {T} p = sc > prism_neg_inf<{T}>() ? {ex}(sc - mn) : ({T})0;\n"
      "      l[r] = l[r] * c + warp_sum(p);\n"
      "#pragma unroll\n"
      "      for (int t = 0; t < ET; ++t) acc[r][t] *= c;\n"
      "      m[r] = mn;\n"
      "      s[r] = p;\n"
      "      seen = seen || p > 0;\n"
      "    }}\n"
      "    // Values of the keys some row sees, the warp's lanes over the dims: VB keys' values\n"
      "    // loaded at once (one memory latency for VB keys), then accumulated.\n"
      "    const unsigned live = __ballot_sync(0xffffffffu, seen);\n"
      "#pragma unroll\n"
      "    for (int g0 = 0; g0 < 32; g0 += VB) {{\n"
      "      if (((live >> g0) & ((1u << VB) - 1u)) == 0) continue;\n"
      "      {T} vv[VB][ET];\n"
      "#pragma unroll\n"
      "      for (int q = 0; q < VB; ++q) {{\n"
      "        const bool on = (live >> (g0 + q)) & 1u;\n"
      "        const auto* vr = vb + (j0 + g0 + q) * {E}LL;\n"
      "#pragma unroll\n"
      "        for (int t = 0; t < ET; ++t) {{\n"
      "          const int e = lane + 32 * t;\n"
      "          vv[q][t] = on && e < E ? {LV}(vr[e]) : ({T})0;\n"
      "        }}\n"
      "      }}\n"
      "#pragma unroll\n"
      "      for (int q = 0; q < VB; ++q) {{\n"
      "        if (!((live >> (g0 + q)) & 1u)) continue;\n"
      "#pragma unroll\n"
      "        for (int r = 0; r < R; ++r) {{\n"
      "          const {T} pj = __shfl_sync(0xffffffffu, s[r], g0 + q);\n"
      "#pragma unroll\n"
      "          for (int t = 0; t < ET; ++t) acc[r][t] += pj * vv[q][t];\n"
      "        }}\n"
      "      }}\n"
      "    }}\n"
      "  }}\n"
      "#pragma unroll\n"
      "  for (int r = 0; r < R; ++r) {{\n"
      "    if (lane == 0) {{ part_m[warp][r] = m[r]; part_l[warp][r] = l[r]; }}\n"
      "#pragma unroll\n"
      "    for (int t = 0; t < ET; ++t) {{\n"
      "      const int e = lane + 32 * t;\n"
      "      if (e < E) part_acc[warp][r][e] = acc[r][t];\n"
      "    }}\n"
      "  }}\n"
      "  __syncthreads();\n"
      "  for (int x = threadIdx.x; x < R * E; x += blockDim.x) {{\n"
      "    const int r = x / E, e = x % E;\n"
      "    if (qrow(r) < 0) continue;\n"
      "    {T} mx = prism_neg_inf<{T}>();\n"
      "    for (int w = 0; w < W; ++w) mx = part_m[w][r] > mx ? part_m[w][r] : mx;\n"
      "    {T} total = 0, y = 0;\n"
      "    for (int w = 0; w < W; ++w) {{\n"
      "      if (!(part_l[w][r] > 0)) continue;\n"
      "      const {T} c = {ex}(part_m[w][r] - mx);\n"
      "      total += part_l[w][r] * c;\n"
      "      y += part_acc[w][r][e] * c;\n"
      "    }}\n"
      "    out[qrow(r) * {E}LL + e] = {ST}(y / total);\n"
      "  }}\n"
      "}}\n",
      fmt::arg("R", R), fmt::arg("W", W),
      fmt::arg("VB", ET <= 2   ? 8
                     : ET <= 4 ? 4
                               : 2),
      fmt::arg("ET", ET), fmt::arg("D", D), fmt::arg("E", E), fmt::arg("T", T),
      fmt::arg("tiles", tiles), fmt::arg("HG", H / RH), fmt::arg("RH", RH), fmt::arg("rep", rep),
      fmt::arg("P", P), fmt::arg("Sq", Sq), fmt::arg("H", H), fmt::arg("offset", offset),
      fmt::arg("L", ld(q.dtype())), fmt::arg("G", G), fmt::arg("Sk", Sk), fmt::arg("VK", VK),
      fmt::arg("load_k", load_run(kt, VK, "kr", "d0", "kv")), fmt::arg("scale", a.scale),
      fmt::arg("visible", visible), fmt::arg("mask", mask), fmt::arg("ex", ex),
      fmt::arg("LV", ld(ins[2])), fmt::arg("ST", st(n.shape.dtype())),
      fmt::arg("early_exit",
               a.causal ? "    if (j0 > last) break;  // causal: no row sees these keys\n" : ""));
  return block_per_row(name, src, B * (H / RH) * tiles, static_cast<int>(32 * W));
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

namespace prism::cuda {

std::optional<KernelCode> few_rows_product(const MatmulShape& m, const std::string& name) {
  static const bool enabled = env_switch("PRISM_CUDA_FEW_ROWS", true);
  const DType t = m.dtype;
  if (!enabled || m.m > 8 || m.lhs_transposed || !m.rhs_transposed) return std::nullopt;
  if (t != DType::f32 && t != DType::f16 && t != DType::bf16) return std::nullopt;
  const int vk = 16 / size_of(t);  // elements in 16 bytes
  if (m.k % vk != 0 || m.batch * m.m * m.n == 0) return std::nullopt;
  constexpr int kWarps = 4;
  std::vector<DType> ins{t, t};
  std::string src = detail::signature(name, t, ins, 32 * kWarps);
  src += fmt::format(
      "  constexpr int M = {M}, VK = {VK};\n"
      "  constexpr i64 N = {N}LL, K = {K}LL;\n"
      "  const int lane = threadIdx.x & 31;\n"
      "  // A warp per output column n of one batch: (batch, n).\n"
      "  const i64 col = (i64)blockIdx.x * {W} + (threadIdx.x >> 5);\n"
      "  if (col >= {B}LL * N) return;\n"
      "  const i64 bi = col / N, n = col % N;\n"
      "  const auto* w = in1 + (bi * N + n) * K;\n"
      "  const auto* x = in0 + bi * M * K;\n"
      "  float acc[M];\n"
      "#pragma unroll\n"
      "  for (int r = 0; r < M; ++r) acc[r] = 0;\n"
      "#pragma unroll 8\n"
      "  for (i64 k0 = (i64)lane * VK; k0 < K; k0 += 32 * VK) {{\n"
      "    float wv[VK], xv[VK];\n"
      "{load_w}"
      "#pragma unroll\n"
      "    for (int r = 0; r < M; ++r) {{\n"
      "      const auto* xr = x + r * K;\n"
      "{load_x}"
      "#pragma unroll\n"
      "      for (int u = 0; u < VK; ++u) acc[r] += wv[u] * xv[u];\n"
      "    }}\n"
      "  }}\n"
      "#pragma unroll\n"
      "  for (int r = 0; r < M; ++r) {{\n"
      "    const float y = warp_sum(acc[r]);\n"
      "    if (lane == 0) out[(bi * M + r) * N + n] = {ST}(y);\n"
      "  }}\n"
      "}}\n",
      fmt::arg("M", m.m), fmt::arg("VK", vk), fmt::arg("N", m.n), fmt::arg("K", m.k),
      fmt::arg("W", kWarps), fmt::arg("B", m.batch),
      fmt::arg("load_w", detail::load_run(t, vk, "w", "k0", "wv")),
      fmt::arg("load_x", detail::load_run(t, vk, "xr", "k0", "xv")), fmt::arg("ST", detail::st(t)));
  return detail::block_per_row(name, src, (m.batch * m.n + kWarps - 1) / kWarps, 32 * kWarps);
}

}  // namespace prism::cuda
