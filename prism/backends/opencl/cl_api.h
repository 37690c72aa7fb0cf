// The OpenCL entry points prism uses, loaded from libOpenCL with dlopen so that the binary
// starts (and the other platforms work) on machines without an OpenCL installation.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>

namespace prism::opencl {

#define PRISM_CL_FUNCTIONS(X)  \
  X(clGetPlatformIDs)          \
  X(clGetPlatformInfo)         \
  X(clGetDeviceIDs)            \
  X(clGetDeviceInfo)           \
  X(clCreateContext)           \
  X(clReleaseContext)          \
  X(clCreateCommandQueue)      \
  X(clReleaseCommandQueue)     \
  X(clCreateBuffer)            \
  X(clReleaseMemObject)        \
  X(clEnqueueWriteBuffer)      \
  X(clEnqueueReadBuffer)       \
  X(clEnqueueCopyBuffer)       \
  X(clEnqueueFillBuffer)       \
  X(clCreateProgramWithSource) \
  X(clBuildProgram)            \
  X(clGetProgramBuildInfo)     \
  X(clReleaseProgram)          \
  X(clCreateKernel)            \
  X(clReleaseKernel)           \
  X(clSetKernelArg)            \
  X(clGetKernelWorkGroupInfo)  \
  X(clEnqueueNDRangeKernel)    \
  X(clFinish)

struct ClApi {
#define PRISM_CL_MEMBER(name) decltype(&::name) name = nullptr;
  PRISM_CL_FUNCTIONS(PRISM_CL_MEMBER)
#undef PRISM_CL_MEMBER
};

// The loaded library, or null with `*why` saying what is missing. Loaded once per process.
const ClApi* cl_api(std::string* why = nullptr);

// "CL_OUT_OF_RESOURCES (-5)" for an error code.
std::string cl_error_name(cl_int code);

// Throws prism::Error "opencl: <what>: <error name>" unless `code` is CL_SUCCESS.
void check_cl(cl_int code, const char* what);

}  // namespace prism::opencl
