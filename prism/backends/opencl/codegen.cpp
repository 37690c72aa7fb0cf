#include "prism/backends/opencl/codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "prism/backends/opencl/kernel_text.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/core/error.h"

namespace prism::opencl {

using ir::Op;
using ir::ValueId;

namespace {

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
long prism_ipow(long base, long e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  long r = 1;
  for (; e > 0; e >>= 1, base *= base)
    if (e & 1) r *= base;
  return r;
}
)CL";
  return s;
}

KernelSource step_kernel(const ir::Graph& g, const compiler::FusionPlan& plan, ValueId id,
                         const std::string& name, const DeviceTraits& device) {
  const ir::Node& node = g.node(id);
  if (ir::is_elementwise(node.op)) {
    for (ValueId m : plan.groups[plan.group_of[id]].nodes) require_fp64(g, m, device);
  } else {
    require_fp64(g, id, device);
  }
  KernelSource library;
  library.name = name;
  library.reads = node.inputs;
  if (node.op == Op::dot && !kernel::reads_folded(plan, node)) {  // tiled kernels
    if (auto fast = matmul_kernel(g, id, library)) return std::move(*fast);
  }
  if (node.op == Op::attention) return nn_kernel(g, id, std::move(library));
  if (std::optional<kernel::Step> step = kernel::lower(g, plan, id, name)) {
    KernelSource k;
    k.reads = step->reads;
    std::vector<DType> dtypes;
    for (ValueId r : k.reads) dtypes.push_back(g.node(r).shape.dtype());
    for (const kernel::Kernel& kernel : step->kernels) {
      if (kernel.when == kernel::InPlace::when_not_in_place) {
        // A copy of the operand into the output: the executable's buffer copy does it.
        k.starts_as_operand = true;
        continue;
      }
      PRISM_CHECK(k.code.empty(), "opencl: step {} has more than one kernel", name);
      k.name = kernel.name;
      k.code = kernel::render(kernel, dtypes, dialect());
      k.global[0] = kernel.items() * (kernel.cooperative ? kGroupSize : 1);
      if (kernel.cooperative) k.local[0] = kGroupSize;
    }
    return k;
  }
  fail("opencl: op {} is not supported on the opencl platform ({})", ir::op_name(node.op),
       ir::print(g, id));
}

}  // namespace prism::opencl
