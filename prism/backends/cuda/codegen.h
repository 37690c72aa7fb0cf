// CUDA C generated for one executable's steps. Shapes are baked into the code (an executable
// is compiled for one set of shapes), so every index computation folds to constants; kernels
// use 64-bit indices and grid-stride loops. The source for a whole executable is one NVRTC
// compile. This file is host logic only: it is unit-tested by compiling what it emits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "prism/backends/cuda/matmul.h"
#include "prism/compiler/fusion.h"
#include "prism/compiler/kernel_c.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/ir/graph.h"

namespace prism::cuda {

// How a kernel is launched.
struct Launch {
  int64_t grid = 1;
  int block = 256;
};

using kernel::InPlace;

// One __global__ function: `void name(char* out, const char* in0, const char* in1, ...)`,
// with one `in` per value the step reads, in the step's order.
struct KernelCode {
  std::string name;
  std::string source;
  int64_t work = 0;             // threads (grid-stride) or blocks (one block per item)
  bool block_per_item = false;  // softmax, norms, attention: one block per row
  int block = 256;
  InPlace when = InPlace::always;
};

// Threads per block for grid-stride kernels, and the most blocks launched: enough to fill
// any current GPU several times over; each thread then loops.
inline constexpr int kBlock = 256;
inline constexpr int64_t kMaxGridStrideBlocks = 1 << 16;

// The launch for a kernel: ceil(work / block) blocks up to the cap, or one block per item.
Launch launch_for(const KernelCode& kernel);

// Device helpers every generated kernel uses: storage <-> compute conversions for each dtype
// (halves and bfloat16 as 16-bit integers, converted without the toolkit's headers),
// saturating float -> integer stores, warp and block reductions.
std::string prelude();

// The C type a dtype is stored as, and the type kernels compute it in (double for f64, float
// for f32/f16/bf16, long long for integers and bool).
std::string storage_type(DType t);
std::string compute_type(DType t);

// The kernels of the step that computes `id`: its fusion group when it is the root of one,
// else the op's own kernels. `name` prefixes the kernels' names. Throws prism::Error for an
// op the generator cannot express (with the op and dtype in the message).
std::vector<KernelCode> generate(const ir::Graph& graph, const compiler::FusionPlan& plan,
                                 ir::ValueId id, const std::string& name);

// A product of few rows (decoding's: at most 8) by weights stored {N, K} (a linear layer's),
// in f32, f16 or bf16, as one kernel that streams the weights with 16-byte loads, a warp per
// output column and all rows at once: cuBLASLt's kernels for such shapes read the weights at
// a fraction of the bandwidth. Null where the shape is not one (more rows, other layouts or
// dtypes, rows whose bytes are not a multiple of 16); PRISM_CUDA_FEW_ROWS=0 declines all.
std::optional<KernelCode> few_rows_product(const MatmulShape& m, const std::string& name);

// The source of one module holding `kernels` after the prelude, each body once: kernels that
// differ only in their names (the same op on the same shapes in every layer of a model) share
// the first one's function, which keeps compile times flat in the number of layers.
// `names[i]` is the function that runs kernels[i].
std::string module_source(const std::vector<const KernelCode*>& kernels,
                          std::vector<std::string>* names);

// The values a step reads, in the order of its kernels' `in` parameters.
using kernel::step_reads;

// CUDA C as a dialect of the kernel IR's C renderer.
const kernel::CDialect& dialect();

// Used by the generators of each op family (codegen_*.cpp).
namespace detail {
std::vector<KernelCode> generate_nn(const ir::Graph& graph, ir::ValueId id,
                                    const std::string& name);

// "extern \"C\" __global__ void __launch_bounds__(T) name(char* out_, const char* in0_, ...) {"
// with typed pointers `out`, `in0`... declared from the dtypes given. `threads` (T), the most
// threads a block is launched with, bounds the registers the compiler may use; 0 leaves it out.
std::string signature(const std::string& name, DType out, const std::vector<DType>& ins,
                      int threads = 256);
// A grid-stride loop over i in [0, n) around `body`.
std::string grid_stride(int64_t n, const std::string& body);
// "ld_f32", "st_bf16"...: the prelude's conversions.
std::string ld(DType t);
std::string st(DType t);
// An expression reading element 0 of `ptr` (of dtype t) as an index (long long).
std::string load_index(DType t, const std::string& ptr, const std::string& at = "0");
// Statements loading `v` consecutive elements (storage t) from element `at` of `ptr` into the
// compute-type array `into`: one 16-byte load when v is 8 (16-bit storage) or 4 (f32).
std::string load_run(DType t, int v, const std::string& ptr, const std::string& at,
                     const std::string& into);
}  // namespace detail

}  // namespace prism::cuda
