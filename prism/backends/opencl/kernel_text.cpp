#include "prism/backends/opencl/kernel_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace prism::opencl {

using ir::ValueId;

Class class_of(DType t) {
  if (t == DType::f64) return Class::f64;
  if (is_float(t)) return Class::f32;
  return Class::i64;
}
const char* ctype(Class c) {
  return c == Class::f64 ? "double" : c == Class::f32 ? "float" : "long";
}

// The OpenCL C type an element is stored as.
const char* storage(DType t) {
  switch (t) {
    case DType::f64:
      return "double";
    case DType::f32:
      return "float";
    case DType::f16:
    case DType::bf16:
      return "ushort";
    case DType::i64:
      return "long";
    case DType::i32:
      return "int";
    case DType::i16:
      return "short";
    case DType::i8:
      return "char";
    case DType::u8:
    case DType::boolean:
      return "uchar";
    case DType::u32:
      return "uint";
  }
  return "uchar";
}

// Element `index` of `ptr` (of dtype t) in its compute class.
std::string load(DType t, const std::string& ptr, const std::string& index) {
  std::string e = fmt::format("{}[{}]", ptr, index);
  switch (t) {
    case DType::f16:
      return fmt::format("f16_to_f32({})", e);
    case DType::bf16:
      return fmt::format("bf16_to_f32({})", e);
    case DType::f64:
    case DType::f32:
      return e;
    case DType::boolean:
      return fmt::format("(long)({} != 0)", e);
    default:
      return fmt::format("(long){}", e);
  }
}

// A value of class `from` as element dtype `to`: halves round to nearest even, floats to
// integers truncate and saturate (NaN gives 0), integers to integers wrap, as on the CPU.
std::string store(DType to, Class from, const std::string& v) {
  switch (to) {
    case DType::f64:
      return fmt::format("(double)({})", v);
    case DType::f32:
      return fmt::format("(float)({})", v);
    case DType::f16:
      return fmt::format("f32_to_f16((float)({}))", v);
    case DType::bf16:
      return fmt::format("f32_to_bf16((float)({}))", v);
    case DType::boolean:
      return fmt::format("(uchar)(({}) != 0)", v);
    default:
      if (from == Class::i64) return fmt::format("({})({})", storage(to), v);
      return fmt::format("convert_{}_sat({})", storage(to), v);
  }
}

// A value of class `from` converted to the compute class of `via`, rounded through dtype
// `via` (convert's semantics).
std::string convert(DType via, Class from, const std::string& v) {
  std::string s = store(via, from, v);
  switch (via) {
    case DType::f16:
      return fmt::format("f16_to_f32({})", s);
    case DType::bf16:
      return fmt::format("bf16_to_f32({})", s);
    case DType::f64:
    case DType::f32:
      return s;
    default:
      return fmt::format("(long){}", s);
  }
}

// Kernel text: signature with one (buffer, offset) pair per read and typed views of them.
std::string signature(const std::string& name, const std::vector<DType>& reads, DType out) {
  std::string s = fmt::format("__kernel void {}(", name);
  for (size_t k = 0; k < reads.size(); ++k) {
    s += fmt::format("__global const uchar* a{0}_, ulong o{0}_, ", k);
  }
  s += "__global uchar* out_, ulong oo_) {\n";
  for (size_t k = 0; k < reads.size(); ++k) {
    s += fmt::format("  __global const {0}* in{1} = (__global const {0}*)(a{1}_ + o{1}_);\n",
                     storage(reads[k]), k);
  }
  s += fmt::format("  __global {0}* out = (__global {0}*)(out_ + oo_);\n", storage(out));
  return s;
}

std::string signature(const std::string& name, const ir::Graph& g,
                      const std::vector<ValueId>& reads, DType out) {
  std::vector<DType> dtypes;
  for (ValueId r : reads) dtypes.push_back(g.node(r).shape.dtype());
  return signature(name, dtypes, out);
}

namespace {

class OpenClDialect final : public kernel::CDialect {
 public:
  std::string type(kernel::Scalar s) const override { return ctype(class_of(s)); }
  std::string u32() const override { return "uint"; }
  std::string integer(int64_t v) const override {
    if (v == INT64_MIN) return "(-9223372036854775807L - 1)";
    return fmt::format("{}L", v);
  }
  std::string infinity(kernel::Scalar s) const override {
    return s == kernel::Scalar::f64 ? "((double)INFINITY)" : "INFINITY";
  }
  std::string nan(kernel::Scalar s) const override {
    return s == kernel::Scalar::f64 ? "((double)NAN)" : "NAN";
  }
  std::string view(DType t, int operand) const override {
    return fmt::format("((__global const {}*)(a{}_ + o{}_))", storage(t), operand, operand);
  }
  std::string load(DType t, const std::string& ptr, const std::string& index) const override {
    return opencl::load(t, ptr, index);
  }
  std::string store(DType t, kernel::Scalar from, const std::string& v) const override {
    return opencl::store(t, class_of(from), v);
  }
  std::string round(DType t, kernel::Scalar from, const std::string& v) const override {
    return convert(t, class_of(from), v);
  }
  std::string math(const std::string& fn, kernel::Scalar) const override { return fn; }
  std::string is_nan(const std::string& v) const override { return "isnan(" + v + ")"; }
  std::string is_finite(const std::string& v) const override { return "isfinite(" + v + ")"; }
  std::string ipow() const override { return "prism_ipow"; }
  std::string signature(const std::string& name, DType out,
                        const std::vector<DType>& ins) const override {
    return opencl::signature(name, ins, out);
  }
  std::string items(int64_t n, const std::string& body) const override {
    return fmt::format("  long i = get_global_id(0);\n  if (i >= {}L) return;\n{}", n, body);
  }
  // A work group per item, launched with exactly n groups: no bound check (a group returning
  // before its barriers crashed PoCL 3.1's kernel compiler).
  std::string group_items(int64_t, const std::vector<kernel::Scalar>& scratch,
                          const std::string& body) const override {
    std::string s;
    for (kernel::Scalar c : scratch) {
      s += fmt::format("  __local {} red_{}[{}];\n", type(c), type(c), kGroupSize);
    }
    s += fmt::format(
        "  const long i = get_group_id(0);\n  const int tid = get_local_id(0), threads = {};\n",
        kGroupSize);
    return s + body;
  }
  std::string group_combine(const std::string& var, kernel::Scalar s, const std::string&,
                            const std::string& combine) const override {
    return fmt::format(
        "    red_{0}[tid] = {1};\n    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    for (int s = {2}; s > 0; s >>= 1) {{\n"
        "      if (tid < s) {{ const {0} a = red_{0}[tid], b = red_{0}[tid + s]; red_{0}[tid] = "
        "{3}; "
        "}}\n"
        "      barrier(CLK_LOCAL_MEM_FENCE);\n    }}\n"
        "    {1} = red_{0}[0];\n    barrier(CLK_LOCAL_MEM_FENCE);\n",
        type(s), var, kGroupSize / 2, combine);
  }

 private:
  static Class class_of(kernel::Scalar s) {
    return s == kernel::Scalar::f64   ? Class::f64
           : s == kernel::Scalar::f32 ? Class::f32
                                      : Class::i64;
  }
};

}  // namespace

const kernel::CDialect& dialect() {
  static const OpenClDialect d;
  return d;
}

}  // namespace prism::opencl
