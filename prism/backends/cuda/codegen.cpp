// The prelude, the helpers shared by the generators, and the dispatch to each op family.
#include "prism/backends/cuda/codegen.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

#include "prism/core/error.h"

namespace prism::cuda {

using ir::Op;

Launch launch_for(const KernelCode& kernel) {
  Launch l;
  l.block = kernel.block;
  if (kernel.block_per_item) {
    PRISM_CHECK(kernel.work <= 0x7fffffff, "cuda: {} needs {} blocks, more than a grid holds",
                kernel.name, kernel.work);
    l.grid = std::max<int64_t>(kernel.work, 1);
    return l;
  }
  l.grid =
      std::clamp<int64_t>((kernel.work + kernel.block - 1) / kernel.block, 1, kMaxGridStrideBlocks);
  return l;
}

std::string prelude() {
  return R"(// prism: generated CUDA C
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef signed char i8;
#define PRISM_INF_F __int_as_float(0x7f800000)
#define PRISM_NAN_F __int_as_float(0x7fc00000)
#define PRISM_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define PRISM_NAN_D __longlong_as_double(0x7ff8000000000000LL)

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u32 b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (u16)(b >> 16);
}
__device__ __forceinline__ float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// Storage -> compute (ld_*) and compute -> storage (st_*, overloaded on the compute type).
// Floats stored as integers truncate toward zero and saturate; NaN becomes 0.
__device__ __forceinline__ double ld_f64(double s) { return s; }
__device__ __forceinline__ double st_f64(double v) { return v; }
__device__ __forceinline__ double st_f64(float v) { return (double)v; }
__device__ __forceinline__ double st_f64(i64 v) { return (double)v; }
__device__ __forceinline__ float ld_f32(float s) { return s; }
__device__ __forceinline__ float st_f32(double v) { return (float)v; }
__device__ __forceinline__ float st_f32(float v) { return v; }
__device__ __forceinline__ float st_f32(i64 v) { return (float)v; }
__device__ __forceinline__ float ld_f16(u16 s) { return f16_to_f32(s); }
__device__ __forceinline__ u16 st_f16(double v) { return f32_to_f16((float)v); }
__device__ __forceinline__ u16 st_f16(float v) { return f32_to_f16(v); }
__device__ __forceinline__ u16 st_f16(i64 v) { return f32_to_f16((float)v); }
__device__ __forceinline__ float ld_bf16(u16 s) { return bf16_to_f32(s); }
__device__ __forceinline__ u16 st_bf16(double v) { return f32_to_bf16((float)v); }
__device__ __forceinline__ u16 st_bf16(float v) { return f32_to_bf16(v); }
__device__ __forceinline__ u16 st_bf16(i64 v) { return f32_to_bf16((float)v); }
#define PRISM_INT(NAME, S, LO, HI)                                                  \
  __device__ __forceinline__ i64 ld_##NAME(S s) { return (i64)s; }                  \
  __device__ __forceinline__ S st_##NAME(i64 v) { return (S)v; }                    \
  __device__ __forceinline__ S st_##NAME(double v) {                                \
    if (v != v) return (S)0;                                                        \
    if (v <= (double)(LO)) return (S)(LO);                                          \
    if (v >= (double)(HI)) return (S)(HI);                                          \
    return (S)v;                                                                    \
  }                                                                                 \
  __device__ __forceinline__ S st_##NAME(float v) { return st_##NAME((double)v); }
PRISM_INT(i64, i64, (-9223372036854775807LL - 1), 9223372036854775807LL)
PRISM_INT(i32, int, (-2147483647 - 1), 2147483647)
PRISM_INT(i16, short, -32768, 32767)
PRISM_INT(i8, i8, -128, 127)
PRISM_INT(u8, u8, 0, 255)
PRISM_INT(u32, u32, 0, 4294967295LL)
__device__ __forceinline__ i64 ld_bool(u8 s) { return s != 0; }
__device__ __forceinline__ u8 st_bool(i64 v) { return v != 0; }
__device__ __forceinline__ u8 st_bool(double v) { return v != 0; }
__device__ __forceinline__ u8 st_bool(float v) { return v != 0; }

__device__ __forceinline__ i64 prism_ipow(i64 a, i64 b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  i64 r = 1;
  for (i64 e = b, base = a; e > 0; e >>= 1, base *= base)
    if (e & 1) r *= base;
  return r;
}

template <typename T> __device__ __forceinline__ T prism_neg_inf();
template <> __device__ __forceinline__ float prism_neg_inf<float>() { return -PRISM_INF_F; }
template <> __device__ __forceinline__ double prism_neg_inf<double>() { return -PRISM_INF_D; }

// The combination by f of every thread's v, in every thread of the block (whose size is a
// multiple of 32); `scratch` holds 32 values.
template <typename T, typename F>
__device__ T prism_block_combine(T v, T* scratch, T identity, F f) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
)";
}

std::string storage_type(DType t) {
  switch (t) {
    case DType::f64:
      return "double";
    case DType::f32:
      return "float";
    case DType::f16:
    case DType::bf16:
      return "u16";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "int";
    case DType::i16:
      return "short";
    case DType::i8:
      return "i8";
    case DType::u8:
    case DType::boolean:
      return "u8";
    case DType::u32:
      return "u32";
  }
  fail("cuda: unknown dtype");
}

std::string compute_type(DType t) {
  if (t == DType::f64) return "double";
  if (is_float(t)) return "float";
  return "i64";
}

namespace detail {

std::string ld(DType t) { return fmt::format("ld_{}", name(t)); }
std::string st(DType t) { return fmt::format("st_{}", name(t)); }

std::string load_index(DType t, const std::string& ptr, const std::string& at) {
  return fmt::format("((i64){}({}[{}]))", ld(t), ptr, at);
}

std::string signature(const std::string& name, DType out, const std::vector<DType>& ins,
                      int threads) {
  std::string s =
      fmt::format("extern \"C\" __global__ void {}{}(char* out_",
                  threads > 0 ? fmt::format("__launch_bounds__({}) ", threads) : "", name);
  for (size_t k = 0; k < ins.size(); ++k) s += fmt::format(", const char* in{}_", k);
  s += ") {\n";
  s += fmt::format("  {}* out = ({}*)out_;\n", storage_type(out), storage_type(out));
  for (size_t k = 0; k < ins.size(); ++k) {
    s += fmt::format("  const {}* in{} = (const {}*)in{}_;\n", storage_type(ins[k]), k,
                     storage_type(ins[k]), k);
  }
  return s;
}

std::string grid_stride(int64_t n, const std::string& body) {
  return fmt::format(
      "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < {}LL;"
      " i += (i64)gridDim.x * blockDim.x) {{\n{}  }}\n",
      n, body);
}

}  // namespace detail

namespace {

class CudaDialect final : public kernel::CDialect {
 public:
  std::string type(kernel::Scalar s) const override {
    return s == kernel::Scalar::f64 ? "double" : s == kernel::Scalar::f32 ? "float" : "i64";
  }
  std::string u32() const override { return "u32"; }
  std::string integer(int64_t v) const override {
    if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
    return fmt::format("{}LL", v);
  }
  std::string infinity(kernel::Scalar s) const override {
    return s == kernel::Scalar::f64 ? "PRISM_INF_D" : "PRISM_INF_F";
  }
  std::string nan(kernel::Scalar s) const override {
    return s == kernel::Scalar::f64 ? "PRISM_NAN_D" : "PRISM_NAN_F";
  }
  std::string view(DType t, int operand) const override {
    return fmt::format("((const {}*)in{}_)", storage_type(t), operand);
  }
  std::string load(DType t, const std::string& ptr, const std::string& index) const override {
    return fmt::format("{}({}[{}])", detail::ld(t), ptr, index);
  }
  // The prelude's st_* are overloaded on the compute type; the cast picks one.
  std::string store(DType t, kernel::Scalar from, const std::string& v) const override {
    return fmt::format("{}(({}){})", detail::st(t), type(from), v);
  }
  std::string round(DType t, kernel::Scalar from, const std::string& v) const override {
    return fmt::format("{}({})", detail::ld(t), store(t, from, v));
  }
  std::string math(const std::string& fn, kernel::Scalar s) const override {
    return s == kernel::Scalar::f32 ? fn + "f" : fn;
  }
  std::string is_nan(const std::string& v) const override { return fmt::format("({0} != {0})", v); }
  std::string is_finite(const std::string& v) const override { return "isfinite(" + v + ")"; }
  std::string ipow() const override { return "prism_ipow"; }
  std::string signature(const std::string& name, DType out,
                        const std::vector<DType>& ins) const override {
    return detail::signature(name, out, ins);
  }
  std::string items(int64_t n, const std::string& body) const override {
    return detail::grid_stride(n, body);
  }
  // A block per item (launched with block_per_item).
  std::string group_items(int64_t, const std::vector<kernel::Scalar>& scratch,
                          const std::string& body) const override {
    std::string s;
    for (kernel::Scalar c : scratch)
      s += fmt::format("  __shared__ {0} scratch_{0}[32];\n", type(c));
    return s +
           "  const i64 i = blockIdx.x;\n  const int tid = threadIdx.x, threads = blockDim.x;\n" +
           body;
  }
  std::string group_combine(const std::string& var, kernel::Scalar s, const std::string& identity,
                            const std::string& combine) const override {
    return fmt::format(
        "    {1} = prism_block_combine<{0}>({1}, scratch_{0}, {2}, []({0} a, {0} b) {{ return {3}; "
        "}});\n",
        type(s), var, identity, combine);
  }
};

}  // namespace

const kernel::CDialect& dialect() {
  static const CudaDialect d;
  return d;
}

std::string module_source(const std::vector<const KernelCode*>& kernels,
                          std::vector<std::string>* names) {
  std::string source = prelude();
  std::map<std::string, std::string> name_of_body;
  names->clear();
  for (const KernelCode* k : kernels) {
    std::string body = k->source;
    std::string declared = " " + k->name + "(";
    size_t at = body.find(declared);
    PRISM_CHECK(at != std::string::npos, "cuda: kernel {} does not declare its name", k->name);
    body.replace(at, declared.size(), " @(");
    auto [it, fresh] = name_of_body.emplace(std::move(body), k->name);
    if (fresh) source += "\n" + k->source;
    names->push_back(it->second);
  }
  return source;
}

std::vector<KernelCode> generate(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                 ir::ValueId id, const std::string& name) {
  if (std::optional<kernel::Step> step = kernel::lower(graph, plan, id, name)) {
    std::vector<DType> dtypes;
    for (ir::ValueId r : step->reads) dtypes.push_back(graph.node(r).shape.dtype());
    std::vector<KernelCode> kernels;
    for (const kernel::Kernel& k : step->kernels) {
      KernelCode& code = kernels.emplace_back();
      code.name = k.name;
      code.work = k.items();
      code.source = kernel::render(k, dtypes, dialect());
      code.when = k.when;
      code.block_per_item = k.cooperative;
      if (k.cooperative && k.threads > 0) code.block = k.threads;
    }
    return kernels;
  }
  std::vector<KernelCode> k = detail::generate_nn(graph, id, name);
  if (!k.empty()) return k;
  fail("cuda: no kernel for {}", ir::print(graph, id));
}

}  // namespace prism::cuda
