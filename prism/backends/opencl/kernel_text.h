// Pieces of OpenCL C that every generated kernel uses: element types, loads and stores with
// the CPU's conversion rules, the kernel signature, index arithmetic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prism/backends/opencl/codegen.h"
#include "prism/compiler/kernel_c.h"
#include "prism/ir/graph.h"

namespace prism::opencl {

// The type a value is computed in: f64 in double, the other floats in float, the rest in long.
enum class Class { f64, f32, i64 };
Class class_of(DType t);
const char* ctype(Class c);
inline const char* ctype(DType t) { return ctype(class_of(t)); }
// The OpenCL C type an element of `t` is stored as (f16 and bf16 as ushort, bool as uchar).
const char* storage(DType t);

// Element `index` of `ptr` (of dtype t) in its compute class.
std::string load(DType t, const std::string& ptr, const std::string& index);
// A value of class `from` as an element of dtype `to`: halves round to nearest even, floats to
// integers truncate and saturate (NaN gives 0), integers to integers wrap, as on the CPU.
std::string store(DType to, Class from, const std::string& v);
// A value of class `from` rounded through dtype `via`, in via's compute class.
std::string convert(DType via, Class from, const std::string& v);

// "__kernel void name(...) {" with one (buffer, byte offset) pair per read, then typed
// pointers in0, in1, ... and out.
std::string signature(const std::string& name, const std::vector<DType>& reads, DType out);
std::string signature(const std::string& name, const ir::Graph& g,
                      const std::vector<ir::ValueId>& reads, DType out);

// Threads per work group of a cooperative kernel (a power of two).
inline constexpr int kGroupSize = 64;

// OpenCL C as a dialect of the kernel IR's C renderer.
const kernel::CDialect& dialect();
}  // namespace prism::opencl

namespace prism::opencl {
// codegen_matmul.cpp: tiled and matrix-vector kernels for the products they fit, else nullopt.
std::optional<KernelSource> matmul_kernel(const ir::Graph& g, ir::ValueId id, KernelSource k);
// codegen_nn.cpp: attention, and the composites the platform keeps whole.
bool supports_composite(const ir::Node& n);
KernelSource nn_kernel(const ir::Graph& g, ir::ValueId id, KernelSource k);
}  // namespace prism::opencl
