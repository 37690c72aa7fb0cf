// Kernel IR (kernel_ir.h) as C-family source. Everything that is the same in CUDA C and OpenCL
// C is written here once: the expression of every op, coordinates from the flat index, masked
// loads, the loop nest and the combine of reductions (one accumulation rule for every backend),
// the store. A backend supplies a `CDialect`: its type names, literals, the conversions between
// storage and compute types, math function names, its kernel signature and how work items are
// spread over threads.
#pragma once

#include <string>
#include <vector>

#include "prism/compiler/kernel_ir.h"

namespace prism::kernel {

class CDialect {
 public:
  virtual ~CDialect() = default;

  // The C type of a compute class, and the unsigned 32-bit type used for coordinates when the
  // space has fewer than 2^32 elements (divisions by constants are cheaper in 32 bits).
  virtual std::string type(Scalar s) const = 0;
  virtual std::string u32() const = 0;
  // A 64-bit integer literal (any value, INT64_MIN included).
  virtual std::string integer(int64_t v) const = 0;
  // Infinity and NaN in a float class.
  virtual std::string infinity(Scalar s) const = 0;
  virtual std::string nan(Scalar s) const = 0;

  // Operand `operand`'s bytes as a pointer to elements of dtype t (its storage type).
  virtual std::string view(DType t, int operand) const = 0;
  // Element `index` of `ptr` (storing dtype t) in t's compute class.
  virtual std::string load(DType t, const std::string& ptr, const std::string& index) const = 0;
  // A value of class `from` as an element of dtype t: floats to integers truncate and saturate
  // (NaN gives 0), halves round to nearest even, integers wrap.
  virtual std::string store(DType t, Scalar from, const std::string& v) const = 0;
  // A value of class `from` stored as t and read back, in t's compute class.
  virtual std::string round(DType t, Scalar from, const std::string& v) const = 0;
  // The name of math function `fn` ("exp", "fmod", ...) for class s.
  virtual std::string math(const std::string& fn, Scalar s) const = 0;
  virtual std::string is_nan(const std::string& v) const = 0;
  virtual std::string is_finite(const std::string& v) const = 0;
  // The name of the prelude's integer power (non-negative exponents).
  virtual std::string ipow() const = 0;

  // The kernel's opening: "... name(...) {" and typed pointers `out`, `in0`, `in1`, ...
  virtual std::string signature(const std::string& name, DType out,
                                const std::vector<DType>& ins) const = 0;
  // `body` run for every flat index `i` (a 64-bit integer) in [0, n).
  virtual std::string items(int64_t n, const std::string& body) const = 0;

  // Cooperative kernels. `body` run by a group of threads for every flat index `i` in [0, n),
  // with `tid` the thread's index in its group and `threads` the group's size; group_combine
  // will need scratch space for the classes in `scratch`.
  virtual std::string group_items(int64_t n, const std::vector<Scalar>& scratch,
                                  const std::string& body) const = 0;
  // Statements that leave in `var` (of class s, in every thread of the group) the combination
  // of every thread's `var`: `combine` is the expression combining `a` and `b`, `identity`
  // its neutral value.
  virtual std::string group_combine(const std::string& var, Scalar s, const std::string& identity,
                                    const std::string& combine) const = 0;
};

// A literal of class s (finite values exactly; infinities and NaN through the dialect).
std::string literal(double v, Scalar s, const CDialect& d);

// The complete source of one kernel function, reading operands of dtypes `ins`.
std::string render(const Kernel& kernel, const std::vector<DType>& ins, const CDialect& d);

}  // namespace prism::kernel
