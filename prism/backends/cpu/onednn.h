// oneDNN as the CPU kernels use it: single-threaded inside the pool. The products
// (kernels_dot.cpp) and convolutions (kernels_conv.cpp) split their work into slices, one
// per pool thread, and run a primitive planned for one thread on each, so that oneDNN's
// OpenMP team never starts (its workers spin after every call and take the cores from the
// pool's kernels). Each thread hands oneDNN its own scratchpad: the library's shared one is
// not safe across threads running at once.
#pragma once

#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

namespace prism::cpu::onednn {

dnnl::engine& engine();

// Attributes for a primitive to run through execute() below (a scratchpad it is given), and
// the calling thread set to plan for one thread. Call before creating its primitive_desc.
dnnl::primitive_attr single_thread();

// Runs `primitive` on the calling thread alone, with this thread's scratchpad of `scratch`'s
// size, and waits for it. `args` holds every argument but the scratchpad.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratch,
             std::unordered_map<int, dnnl::memory> args);

// Whether oneDNN multiplies bf16 matrices on this CPU (2.x: from avx512_core on). Where it
// does not, prism's bf16 products widen their operands to f32 (kernels_dot.cpp).
bool multiplies_bf16();

}  // namespace prism::cpu::onednn
