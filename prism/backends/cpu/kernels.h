// CPU kernels for the non-elementwise ops. make_kernel prepares one node once, at compile
// time (strides, oneDNN primitives), and returns what runs it on each call.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/ir/graph.h"
#include "prism/runtime/collectives.h"

namespace prism::cpu {

using Kernel =
    std::function<void(std::span<const std::byte* const> inputs, std::byte* out, ThreadPool&)>;

// Several nodes run as one step: reads and writes, one pointer per node (see the maker).
using GroupKernel = std::function<void(std::span<const std::byte* const> inputs,
                                       std::span<std::byte* const> outs, ThreadPool&)>;

// Whether the CPU runs this composite node as one kernel (else it is decomposed).
bool cpu_supports(const ir::Node& node);

Kernel make_kernel(const ir::Graph& graph, ir::ValueId id);
// all_reduce, all_gather and reduce_scatter as device `device` of `comm`'s mesh (null: not on a
// mesh, where only groups of one run); null for other ops (kernels_collective.cpp).
Kernel make_collective_kernel(const ir::Graph& graph, ir::ValueId id, Communicator* comm,
                              int64_t device);

// Families, one file each.
Kernel make_data_kernel(const ir::Graph& graph, ir::ValueId id);  // kernels_data.cpp
// Whether gather `node` picks rows of weights {n, k} that may be kept blocked or interleaved
// (weight_layout.h; a tied embedding, whose products by it read it so): it reads either layout.
bool gather_reads_blockable_weights(const ir::Graph& graph, const ir::Node& node);
Kernel make_reduce_kernel(const ir::Graph& graph, ir::ValueId id);  // kernels_reduce.cpp
Kernel make_dot_kernel(const ir::Graph& graph, ir::ValueId id);     // kernels_dot.cpp
// bf16 activations x[m][k] (at x + m * row_stride + k * col_stride) laid out for gemm.h's
// products (gemm_pack_lhs) on the pool, in a buffer of the calling thread that the next call on
// it reuses: fresh pages would fault in on every call (16 MiB for a 512-token prefill's down
// projection at Llama 1B's shapes). kernels_dot.cpp; the quantized products' panels use it too.
const float* widened_activations(const uint16_t* x, int64_t row_stride, int64_t col_stride,
                                 int64_t M, int64_t K, ThreadPool& pool);
// bf16 activations x[m][k] (rows `ldx` apart) packed for amx_gemm.h's products
// (pack_rows_for_amx_gemm) on the pool, in a 64-byte aligned buffer of the calling thread that
// the next call on it reuses. kernels_dot.cpp.
const uint16_t* tile_activations(const uint16_t* x, int64_t ldx, int64_t M, int64_t K,
                                 ThreadPool& pool);
// Whether a product of `lhs` activations into `out` runs on gemm.h's f32 FMAs with the
// activations widened (bf16 into bf16 where bf16_products.h chose FMAs; kernels_dot.cpp), the
// path the quantized products' panels take too, so that both give the same bits.
bool widens_bf16_product(DType lhs, DType out);
// Dot products of the same activations by different weights, as one step that reads the
// activations, then each product's weights, and writes each product's output; null when the
// products cannot share one (kernels_dot.cpp).
GroupKernel make_dot_group_kernel(const ir::Graph& graph, std::span<const ir::ValueId> ids);

// Whether the product `id` multiplies weights {n, k} that may be kept blocked
// (weight_layout.h): it then reads them in either layout, whichever they are in at the call.
bool dot_reads_blockable_weights(const ir::Graph& graph, ir::ValueId id);  // kernels_dot.cpp
Kernel make_conv_kernel(const ir::Graph& graph, ir::ValueId id);           // kernels_conv.cpp
// Weights in ggml's block formats (kernels_quant.cpp): dequantize, and the products that read
// the blocks of a dequantize the executable folds into them (no memory of its own: an alias of
// its operand's bytes). folded_dequantizes gives the executable's FusionPlan::folded: those
// read only by products of f32 or bf16 activations; make_quant_dot_kernel is such a product.
Kernel make_quant_kernel(const ir::Graph& graph, ir::ValueId id);
std::vector<bool> folded_dequantizes(const ir::Graph& graph);
Kernel make_quant_dot_kernel(const ir::Graph& graph, ir::ValueId id);
// Such products of the same activations by several weights as one step (as
// make_dot_group_kernel's); null when they cannot share one.
GroupKernel make_quant_dot_group_kernel(const ir::Graph& graph, std::span<const ir::ValueId> ids);
// Whether those products round their activations to 8 bits for weights of `type`:
// PRISM_CPU_QUANT_ACTIVATIONS=int8 (the default) where quant_rows_int8 has kernels for it on
// this CPU, f32 to keep them in f32; another value throws prism::Error. Read as each product is
// compiled.
bool int8_activations(quant::GgmlType type);
Kernel make_nn_kernel(const ir::Graph& graph, ir::ValueId id);  // kernels_nn.cpp
// kernels_attention.cpp
Kernel make_attention_kernel(const ir::Graph& graph, ir::ValueId id);

// kernels_gated_delta.cpp
Kernel make_gated_delta_kernel(const ir::Graph& graph, ir::ValueId id);

// The causal short convolution (LFM 2), kernels_short_conv.cpp.
Kernel make_short_conv_kernel(const ir::Graph& graph, ir::ValueId id);

// Copies the elements of a strided view into another: for each index of `shape`,
// dst[dst_offset + sum(i*dst_stride)] = src[src_offset + sum(i*src_stride)], in elements of
// `elem` bytes. Parallel over outer rows.
void strided_copy(const Shape& shape, int elem, const std::byte* src, int64_t src_offset,
                  const std::array<int64_t, kMaxRank>& src_stride, std::byte* dst,
                  int64_t dst_offset, const std::array<int64_t, kMaxRank>& dst_stride,
                  ThreadPool& pool);

// Splits the axes of `shape` around [first, last): outer, middle and inner element counts.
struct Split3 {
  int64_t outer = 1, middle = 1, inner = 1;
};
Split3 split3(const Shape& shape, int first, int last);

}  // namespace prism::cpu
