// CUDA C -> device code with NVRTC (which works without a GPU, so CI compiles every kernel
// the generator emits).
#pragma once

#include <string>

namespace prism::cuda {

// Compiles `source` for `arch` ("sm_90"): the cubin's bytes. Throws prism::Error with NVRTC's
// log on failure; PRISM_DEBUG=2 prints the source first.
std::string compile_cuda(const std::string& source, const std::string& arch);

// "sm_<major><minor>" for a compute capability.
std::string arch_for(int major, int minor);

}  // namespace prism::cuda
