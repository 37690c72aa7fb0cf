#include "prism/backends/opencl/cl_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "prism/core/error.h"

namespace prism::opencl {
namespace {

struct Loaded {
  ClApi api;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  void* lib = nullptr;
  for (const char* name : {"libOpenCL.so.1", "libOpenCL.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    l.why = "no OpenCL library (libOpenCL.so.1 not found)";
    return l;
  }
  // The library stays loaded for the life of the process.
#define PRISM_CL_LOAD(name)                                                        \
  l.api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));             \
  if (!l.api.name) {                                                               \
    l.why = "the OpenCL library lacks " #name " (an OpenCL 1.2 loader is needed)"; \
    return l;                                                                      \
  }
  PRISM_CL_FUNCTIONS(PRISM_CL_LOAD)
#undef PRISM_CL_LOAD
  l.ok = true;
  return l;
}

}  // namespace

const ClApi* cl_api(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok && why) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

std::string cl_error_name(cl_int code) {
  switch (code) {
#define PRISM_CL_CASE(c) \
  case c:                \
    return fmt::format("{} ({})", #c, code);
    PRISM_CL_CASE(CL_DEVICE_NOT_FOUND)
    PRISM_CL_CASE(CL_DEVICE_NOT_AVAILABLE)
    PRISM_CL_CASE(CL_COMPILER_NOT_AVAILABLE)
    PRISM_CL_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    PRISM_CL_CASE(CL_OUT_OF_RESOURCES)
    PRISM_CL_CASE(CL_OUT_OF_HOST_MEMORY)
    PRISM_CL_CASE(CL_BUILD_PROGRAM_FAILURE)
    PRISM_CL_CASE(CL_INVALID_VALUE)
    PRISM_CL_CASE(CL_INVALID_PLATFORM)
    PRISM_CL_CASE(CL_INVALID_DEVICE)
    PRISM_CL_CASE(CL_INVALID_CONTEXT)
    PRISM_CL_CASE(CL_INVALID_COMMAND_QUEUE)
    PRISM_CL_CASE(CL_INVALID_MEM_OBJECT)
    PRISM_CL_CASE(CL_INVALID_BUFFER_SIZE)
    PRISM_CL_CASE(CL_INVALID_PROGRAM)
    PRISM_CL_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    PRISM_CL_CASE(CL_INVALID_KERNEL_NAME)
    PRISM_CL_CASE(CL_INVALID_KERNEL)
    PRISM_CL_CASE(CL_INVALID_ARG_INDEX)
    PRISM_CL_CASE(CL_INVALID_ARG_VALUE)
    PRISM_CL_CASE(CL_INVALID_ARG_SIZE)
    PRISM_CL_CASE(CL_INVALID_KERNEL_ARGS)
    PRISM_CL_CASE(CL_INVALID_WORK_DIMENSION)
    PRISM_CL_CASE(CL_INVALID_WORK_GROUP_SIZE)
    PRISM_CL_CASE(CL_INVALID_WORK_ITEM_SIZE)
    PRISM_CL_CASE(CL_INVALID_GLOBAL_OFFSET)
    PRISM_CL_CASE(CL_INVALID_OPERATION)
    PRISM_CL_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
#undef PRISM_CL_CASE
    default:
      return fmt::format("OpenCL error {}", code);
  }
}

void check_cl(cl_int code, const char* what) {
  if (code != CL_SUCCESS) fail("opencl: {}: {}", what, cl_error_name(code));
}

}  // namespace prism::opencl
