#include "prism/backends/cuda/nvrtc_compiler.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "prism/backends/cuda/cuda_api.h"
#include "prism/core/error.h"

namespace prism::cuda {

std::string arch_for(int major, int minor) { return fmt::format("sm_{}{}", major, minor); }

std::string compile_cuda(const std::string& source, const std::string& arch) {
  const NvrtcApi& api = nvrtc();
  const char* debug = std::getenv("PRISM_DEBUG");
  if (debug && std::atoi(debug) >= 2) std::fprintf(stderr, "--- cuda source\n%s\n", source.c_str());
  nvrtcProgram program = nullptr;
  check(api.nvrtcCreateProgram(&program, source.c_str(), "prism_kernels.cu", 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  struct Destroy {
    const NvrtcApi& api;
    nvrtcProgram* program;
    ~Destroy() { api.nvrtcDestroyProgram(program); }
  } destroy{api, &program};
  std::string arch_option = "--gpu-architecture=" + arch;
  std::vector<const char*> options = {arch_option.c_str(), "--std=c++17"};
  nvrtcResult result =
      api.nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  std::string log;
  if (api.nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    api.nvrtcGetProgramLog(program, log.data());
    log.resize(log_size - 1);
  }
  if (result != NVRTC_SUCCESS) {
    fail("cuda: NVRTC could not compile the generated kernels for {}: {}\n{}", arch,
         api.nvrtcGetErrorString(result), log);
  }
  size_t size = 0;
  check(api.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(api.nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace prism::cuda
