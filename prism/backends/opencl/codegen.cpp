#include "prism/backends/opencl/codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "prism/backends/opencl/kernel_text.h"
#include "prism/core/error.h"

namespace prism::opencl {

using ir::Op;
using ir::ValueId;

namespace {

std::string unary(Op op, Class c, const std::string& x) {
  bool f = c != Class::i64;
  const char* T = ctype(c);
  switch (op) {
    case Op::neg:
      return fmt::format("-{}", x);
    case Op::abs:
      return f ? fmt::format("fabs({})", x) : fmt::format("({0} < 0 ? -{0} : {0})", x);
    case Op::sign:
      return f ? fmt::format("(isnan({0}) ? {0} : ({1})(({0} > 0) - ({0} < 0)))", x, T)
               : fmt::format("(long)(({0} > 0) - ({0} < 0))", x);
    case Op::logical_not:
      return fmt::format("(long)(!{})", x);
    case Op::is_nan:
      return fmt::format("(long)({0} != {0})", x);
    default:
      break;
  }
  if (!f) fail("opencl: elementwise {} is not defined for integers", ir::op_name(op));
  switch (op) {
    case Op::exp:
      return fmt::format("exp({})", x);
    case Op::log:
      return fmt::format("log({})", x);
    case Op::log1p:
      return fmt::format("log1p({})", x);
    case Op::sqrt:
      return fmt::format("sqrt({})", x);
    case Op::rsqrt:
      return fmt::format("(({})1 / sqrt({}))", T, x);
    case Op::tanh:
      return fmt::format("tanh({})", x);
    case Op::logistic:
      return fmt::format("(({0})1 / (({0})1 + exp(-{1})))", T, x);
    case Op::sin:
      return fmt::format("sin({})", x);
    case Op::cos:
      return fmt::format("cos({})", x);
    case Op::erf:
      return fmt::format("erf({})", x);
    case Op::floor:
      return fmt::format("floor({})", x);
    case Op::ceil:
      return fmt::format("ceil({})", x);
    case Op::round:
      return fmt::format("rint({})", x);
    default:
      fail("opencl: {} is not a unary op", ir::op_name(op));
  }
}

std::string binary(Op op, Class c, const std::string& a, const std::string& b) {
  bool f = c != Class::i64;
  switch (op) {
    case Op::add:
      return fmt::format("({} + {})", a, b);
    case Op::sub:
      return fmt::format("({} - {})", a, b);
    case Op::mul:
      return fmt::format("({} * {})", a, b);
    case Op::max:  // NaN propagates from either side
      return f ? fmt::format("(({0} > {1} || isnan({0})) ? {0} : {1})", a, b)
               : fmt::format("max({}, {})", a, b);
    case Op::min:
      return f ? fmt::format("(({0} < {1} || isnan({0})) ? {0} : {1})", a, b)
               : fmt::format("min({}, {})", a, b);
    case Op::eq:
      return fmt::format("(long)({} == {})", a, b);
    case Op::ne:
      return fmt::format("(long)({} != {})", a, b);
    case Op::lt:
      return fmt::format("(long)({} < {})", a, b);
    case Op::le:
      return fmt::format("(long)({} <= {})", a, b);
    case Op::gt:
      return fmt::format("(long)({} > {})", a, b);
    case Op::ge:
      return fmt::format("(long)({} >= {})", a, b);
    default:
      break;
  }
  if (f) {
    switch (op) {
      case Op::div:
        return fmt::format("({} / {})", a, b);
      case Op::pow:
        return fmt::format("pow({}, {})", a, b);
      case Op::rem:
        return fmt::format("fmod({}, {})", a, b);
      case Op::atan2:
        return fmt::format("atan2({}, {})", a, b);
      default:
        break;
    }
  } else {
    switch (op) {
      case Op::div:  // truncates toward zero; x/0 is 0 rather than a trap
        return fmt::format("({1} == 0 ? 0 : {0} / {1})", a, b);
      case Op::rem:
        return fmt::format("({1} == 0 ? 0 : {0} % {1})", a, b);
      case Op::pow:
        return fmt::format("ipow({}, {})", a, b);
      case Op::logical_and:
        return fmt::format("(long)({} && {})", a, b);
      case Op::logical_or:
        return fmt::format("(long)({} || {})", a, b);
      case Op::logical_xor:
        return fmt::format("(long)(({} != 0) != ({} != 0))", a, b);
      default:
        break;
    }
  }
  fail("opencl: elementwise {} is not defined for this dtype", ir::op_name(op));
}

KernelSource elementwise_launch(KernelSource k, int64_t n) {
  k.global[0] = n;
  return k;
}

void require_fp64(const ir::Graph& g, ValueId id, const DeviceTraits& device) {
  const ir::Node& n = g.node(id);
  bool uses = n.shape.dtype() == DType::f64;
  for (ValueId in : n.inputs) uses = uses || g.node(in).shape.dtype() == DType::f64;
  if (uses && !device.fp64) {
    fail("opencl: {} needs f64, which device \"{}\" does not support (no cl_khr_fp64)",
         ir::print(g, id), device.name);
  }
}

}  // namespace

std::string preamble(const DeviceTraits& device) {
  std::string s;
  if (device.fp64) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += R"CL(
float bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }
ushort f32_to_bf16(float f) {
  uint b = as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (ushort)((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (ushort)(b >> 16);
}
float f16_to_f32(ushort h) {
  uint sign = ((uint)h & 0x8000u) << 16, e = ((uint)h >> 10) & 0x1fu, m = (uint)h & 0x3ffu;
  if (e == 0x1fu) return as_float(sign | 0x7f800000u | (m << 13));
  if (e != 0u) return as_float(sign | ((e + 112u) << 23) | (m << 13));
  float v = (float)m * 5.9604644775390625e-8f; /* subnormal: m * 2^-24, exact */
  return as_float(sign | as_uint(v));
}
ushort f32_to_f16(float f) {
  uint b = as_uint(f), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return (ushort)sign;
    uint e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint v = m >> shift, r = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (r > mid || (r == mid && (v & 1u))) ++v;
    return (ushort)(sign | v);
  }
  return (ushort)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
long ipow(long base, long e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  long r = 1;
  for (; e > 0; e >>= 1, base *= base)
    if (e & 1) r *= base;
  return r;
}
)CL";
  return s;
}

KernelSource fused_kernel(const ir::Graph& g, const compiler::FusionPlan& plan,
                          const compiler::FusionGroup& group, const std::string& name) {
  const Shape& out = g.node(group.root).shape;
  KernelSource k;
  k.name = name;
  std::string body;
  bool needs_index = false;
  std::vector<std::string> reg(g.size());
  int next = 0;
  // Operands read through virtual broadcasts get stride 0 on the broadcast axes.
  for (ValueId v : group.operands) {
    const compiler::OperandRead read = compiler::read_through(g, plan, v, out);
    const ValueId src = read.source;
    const Shape& s = g.node(src).shape;
    std::string index = "gid";
    if (!read.contiguous) {
      needs_index = true;
      index.clear();
      for (int i = 0; i < out.rank(); ++i) {
        if (read.strides[i] == 0 || out.size(i) == 1) continue;
        index += fmt::format("{}i{} * {}L", index.empty() ? "" : " + ", i, read.strides[i]);
      }
      if (index.empty()) index = "0";
    }
    auto it = std::find(k.reads.begin(), k.reads.end(), src);
    size_t slot = it - k.reads.begin();
    if (it == k.reads.end()) k.reads.push_back(src);
    reg[v] = fmt::format("r{}", next++);
    body += fmt::format("  {} {} = {};\n", ctype(class_of(s.dtype())), reg[v],
                        load(s.dtype(), fmt::format("in{}", slot), index));
  }
  for (ValueId m : group.nodes) {
    const ir::Node& n = g.node(m);
    Class c = class_of(n.shape.dtype());
    Class in = class_of(g.node(n.inputs[0]).shape.dtype());
    std::string e;
    if (n.op == Op::convert) {
      e = convert(n.shape.dtype(), in, reg[n.inputs[0]]);
    } else if (n.op == Op::select) {
      e = fmt::format("({} ? {} : {})", reg[n.inputs[0]], reg[n.inputs[1]], reg[n.inputs[2]]);
    } else if (n.inputs.size() == 1) {
      e = unary(n.op, in, reg[n.inputs[0]]);
    } else {
      e = binary(n.op, in, reg[n.inputs[0]], reg[n.inputs[1]]);
    }
    // Halves are computed in float and rounded after every op, as one kernel per op would.
    DType t = n.shape.dtype();
    if ((t == DType::f16 || t == DType::bf16) && n.op != Op::convert) e = convert(t, c, e);
    reg[m] = fmt::format("r{}", next++);
    body += fmt::format("  {} {} = {};\n", ctype(c), reg[m], e);
  }
  k.code = signature(name, g, k.reads, out.dtype());
  k.code += fmt::format("  long gid = get_global_id(0);\n  if (gid >= {}L) return;\n", out.numel());
  if (needs_index) k.code += unflatten(out, "gid", "i");
  k.code += body;
  k.code += fmt::format("  out[gid] = {};\n}}\n",
                        store(out.dtype(), class_of(out.dtype()), reg[group.root]));
  return elementwise_launch(std::move(k), out.numel());
}

KernelSource node_kernel(const ir::Graph& g, ValueId id, const std::string& name,
                         const DeviceTraits& device) {
  require_fp64(g, id, device);
  KernelSource k;
  k.name = name;
  k.reads = g.node(id).inputs;
  switch (g.node(id).op) {
    case Op::iota:
    case Op::broadcast:
    case Op::reshape:
    case Op::transpose:
    case Op::slice:
    case Op::dynamic_slice:
    case Op::dynamic_update_slice:
    case Op::concatenate:
    case Op::gather:
    case Op::take_along:
    case Op::scatter:
    case Op::pad:
      return data_kernel(g, id, std::move(k));
    case Op::reduce_sum:
    case Op::reduce_max:
    case Op::reduce_min:
    case Op::reduce_prod:
    case Op::argmax:
    case Op::argmin:
    case Op::cumsum:
    case Op::argsort:
    case Op::dot:
    case Op::convolution:
      return compute_kernel(g, id, std::move(k));
    case Op::softmax:
    case Op::log_softmax:
    case Op::rms_norm:
    case Op::layer_norm:
    case Op::rope:
    case Op::attention:
      return nn_kernel(g, id, std::move(k));
    default:
      fail("opencl: op {} is not supported on the opencl platform ({})", ir::op_name(g.node(id).op),
           ir::print(g, id));
  }
}

}  // namespace prism::opencl
