// Matrix products of float dtypes (f32, f16, bf16; computed in float) with one contracting
// axis: a tiled kernel for matrices (a 32x32 block of outputs per work group of 8x8, staged
// through local memory), and a work group per output for matrix-vector products (decoding),
// whose threads read the weight row side by side. Other products use the plain kernel of
// codegen_compute.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "prism/backends/opencl/codegen.h"
#include "prism/backends/opencl/kernel_text.h"

namespace prism::opencl {
namespace {

// The offset of flat index `v` over `axes` of a shape (row-major over those axes).
std::string offset_of(const std::string& v, const Shape& s, const std::vector<int>& axes) {
  auto st = s.strides();
  std::string e;
  int64_t inner = 1;
  for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) {
    int a = axes[i];
    std::string index = inner == 1 ? v : fmt::format("({} / {}L)", v, inner);
    if (i > 0) index = fmt::format("({} % {}L)", index, s.size(a));
    e += fmt::format("{}{} * {}L", e.empty() ? "" : " + ", index, st[a]);
    inner *= s.size(a);
  }
  return e.empty() ? "0" : "(" + e + ")";
}

struct MatmulView {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  std::vector<int> lfree, rfree;
  int lk, rk;  // the contracting axis of each side
};

std::optional<MatmulView> view(const ir::Graph& g, const ir::Node& n) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  if (a.lhs_contract.size() != 1 || !is_float(ls.dtype()) || ls.dtype() == DType::f64 ||
      rs.dtype() != ls.dtype()) {
    return std::nullopt;
  }
  auto contains = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  MatmulView v;
  v.lk = a.lhs_contract[0];
  v.rk = a.rhs_contract[0];
  v.k = ls.size(v.lk);
  for (int b : a.lhs_batch) v.batch *= ls.size(b);
  for (int i = 0; i < ls.rank(); ++i) {
    if (!contains(a.lhs_batch, i) && i != v.lk) {
      v.lfree.push_back(i);
      v.m *= ls.size(i);
    }
  }
  for (int i = 0; i < rs.rank(); ++i) {
    if (!contains(a.rhs_batch, i) && i != v.rk) {
      v.rfree.push_back(i);
      v.n *= rs.size(i);
    }
  }
  return v;
}

KernelSource tiled(const ir::Graph& g, const ir::Node& n, const MatmulView& v, KernelSource k) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  int64_t lks = ls.strides()[v.lk], rks = rs.strides()[v.rk];
  std::string c = signature(k.name, g, k.reads, n.shape.dtype());
  c += R"CL(  __local float As[16][33], Bs[16][33];
  int tx = get_local_id(0), ty = get_local_id(1), t = ty * 8 + tx;
  long n0 = get_group_id(0) * 32, m0 = get_group_id(1) * 32, b = get_global_id(2);
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
)CL";
  c += fmt::format("  long lb = {}, rb = {};\n", offset_of("b", ls, a.lhs_batch),
                   offset_of("b", rs, a.rhs_batch));
  c += fmt::format("  for (long k0 = 0; k0 < {}L; k0 += 16) {{\n", v.k);
  // Loads walk k fastest where k is contiguous in memory, else the rows.
  auto tile = [&](const char* dst, const char* in, const Shape& s, const std::vector<int>& free,
                  int64_t ks, int64_t rows, const char* base) {
    bool k_fast = ks == 1;
    std::string r = k_fast ? "e / 16" : "e % 32", kk = k_fast ? "e % 16" : "e / 32";
    return fmt::format(
        "    for (int e = t; e < 512; e += 64) {{\n"
        "      int r = {0}, kk = {1};\n"
        "      long row = {2} + r, k = k0 + kk;\n"
        "      {3}[kk][r] = (row < {4}L && k < {5}L) ? {6} : 0.0f;\n"
        "    }}\n",
        r, kk, dst[0] == 'A' ? "m0" : "n0", dst, rows, v.k,
        load(s.dtype(), in, fmt::format("{} + {} + k * {}L", base, offset_of("row", s, free), ks)));
  };
  c += tile("As", "in0", ls, v.lfree, lks, v.m, "lb");
  c += tile("Bs", "in1", rs, v.rfree, rks, v.n, "rb");
  c += R"CL(    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < 16; ++kk) {
      float x[4], y[4];
      for (int i = 0; i < 4; ++i) x[i] = As[kk][ty + 8 * i];
      for (int j = 0; j < 4; ++j) y[j] = Bs[kk][tx + 8 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += x[i] * y[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < 4; ++i) {
    long m = m0 + ty + 8 * i;
    for (int j = 0; j < 4; ++j) {
      long col = n0 + tx + 8 * j;
)CL";
  c += fmt::format("      if (m < {}L && col < {}L) out[(b * {}L + m) * {}L + col] = {};\n", v.m,
                   v.n, v.m, v.n, store(n.shape.dtype(), Class::f32, "acc[i][j]"));
  c += "    }\n  }\n}\n";
  k.code = std::move(c);
  k.dims = 3;
  k.global[0] = (v.n + 31) / 32 * 8;
  k.global[1] = (v.m + 31) / 32 * 8;
  k.global[2] = v.batch;
  k.local[0] = 8;
  k.local[1] = 8;
  k.local[2] = 1;
  return k;
}

// One work group of 64 per output: its threads stride over k together, then add up.
KernelSource matrix_vector(const ir::Graph& g, const ir::Node& n, const MatmulView& v,
                           KernelSource k) {
  const auto& a = n.attr<ir::DotAttrs>();
  const Shape& ls = g.node(n.inputs[0]).shape;
  const Shape& rs = g.node(n.inputs[1]).shape;
  int64_t lks = ls.strides()[v.lk], rks = rs.strides()[v.rk];
  std::string c = signature(k.name, g, k.reads, n.shape.dtype());
  c += "  __local float part[64];\n";
  c += "  int t = get_local_id(0);\n  long o = get_group_id(0);\n";
  c += fmt::format("  long col = o % {0}L, m = (o / {0}L) % {1}L, b = o / ({0}L * {1}L);\n", v.n,
                   v.m);
  c += fmt::format("  long lb = {} + {}, rb = {} + {};\n", offset_of("b", ls, a.lhs_batch),
                   offset_of("m", ls, v.lfree), offset_of("b", rs, a.rhs_batch),
                   offset_of("col", rs, v.rfree));
  c += "  float acc = 0.0f;\n";
  c += fmt::format("  for (long k = t; k < {}L; k += 64) acc += {} * {};\n", v.k,
                   load(ls.dtype(), "in0", fmt::format("lb + k * {}L", lks)),
                   load(rs.dtype(), "in1", fmt::format("rb + k * {}L", rks)));
  c += R"CL(  part[t] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 32; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
)CL";
  c += fmt::format("  if (t == 0) out[o] = {};\n}}\n",
                   store(n.shape.dtype(), Class::f32, "part[0]"));
  k.code = std::move(c);
  k.global[0] = v.batch * v.m * v.n * 64;
  k.local[0] = 64;
  return k;
}

}  // namespace

std::optional<KernelSource> matmul_kernel(const ir::Graph& g, ir::ValueId id, KernelSource k) {
  const ir::Node& n = g.node(id);
  std::optional<MatmulView> v = view(g, n);
  if (!v || n.shape.numel() == 0) return std::nullopt;
  const Shape& rs = g.node(n.inputs[1]).shape;
  // Few rows against weights whose rows are contiguous in k: one group per output.
  if (v->m <= 4 && rs.strides()[v->rk] == 1 && v->k >= 256) {
    return matrix_vector(g, n, *v, std::move(k));
  }
  if (v->m >= 16 && v->n >= 16 && v->k >= 16) return tiled(g, n, *v, std::move(k));
  return std::nullopt;
}

}  // namespace prism::opencl
