#include "prism/backends/opencl/opencl_platform.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "prism/backends/opencl/kernel_text.h"
#include "prism/core/error.h"

namespace prism {
namespace opencl {
namespace {

struct FoundDevice {
  cl_platform_id platform;
  cl_device_id device;
  bool gpu;
};

// Every device of every platform, in the loader's order.
std::vector<FoundDevice> all_devices(const ClApi& api, std::string* why) {
  cl_uint count = 0;
  cl_int err = api.clGetPlatformIDs(0, nullptr, &count);
  if (err != CL_SUCCESS || count == 0) {
    *why = "no OpenCL platforms (no driver or ICD installed)";
    return {};
  }
  std::vector<cl_platform_id> platforms(count);
  api.clGetPlatformIDs(count, platforms.data(), nullptr);
  std::vector<FoundDevice> found;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    if (api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> devices(n);
    api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      cl_device_type type = 0;
      api.clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, nullptr);
      found.push_back({p, d, (type & CL_DEVICE_TYPE_GPU) != 0});
    }
  }
  if (found.empty()) *why = "no devices";
  return found;
}

std::string device_string(const ClApi& api, cl_device_id d, cl_device_info what) {
  size_t size = 0;
  api.clGetDeviceInfo(d, what, 0, nullptr, &size);
  std::string s(size, '\0');
  api.clGetDeviceInfo(d, what, size, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

bool has_fp64(const ClApi& api, cl_device_id d) {
  return device_string(api, d, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
}

int64_t global_memory(const ClApi& api, cl_device_id d) {
  cl_ulong memory = 0;
  api.clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(memory), &memory, nullptr);
  return static_cast<int64_t>(memory);
}

// A device as `prism info` and `prism smi` show it: "name (OpenCL version[, fp64])", memory.
DeviceInfo describe(const ClApi& api, cl_device_id d) {
  return {fmt::format("{} ({}{})", device_string(api, d, CL_DEVICE_NAME),
                      device_string(api, d, CL_DEVICE_VERSION), has_fp64(api, d) ? ", fp64" : ""),
          global_memory(api, d)};
}

// The device the platform opens: PRISM_OPENCL_DEVICE=<n>, else the first GPU, else the first.
// Throws prism::Error for an index that is not one.
size_t default_device(const std::vector<FoundDevice>& devices) {
  if (const char* env = std::getenv("PRISM_OPENCL_DEVICE"); env && *env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    PRISM_CHECK(*end == '\0' && n >= 0 && n < static_cast<long>(devices.size()),
                "opencl: PRISM_OPENCL_DEVICE={} is not a device index (0..{})", env,
                devices.size() - 1);
    return static_cast<size_t>(n);
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].gpu) return i;
  }
  return 0;
}

}  // namespace

ClMemory::~ClMemory() {
  if (mem) cl_api()->clReleaseMemObject(mem);
}

PlatformStatus probe() {
  PlatformStatus s{"opencl", true, false, ""};
  const ClApi* api = cl_api(&s.reason);
  if (!api) return s;
  std::vector<FoundDevice> devices = all_devices(*api, &s.reason);
  s.available = !devices.empty();
  for (const FoundDevice& d : devices) s.has_gpu = s.has_gpu || d.gpu;
  if (s.available) {
    try {
      s.devices = {describe(*api, devices[default_device(devices)].device)};
    } catch (const Error&) {  // a bad PRISM_OPENCL_DEVICE: opening the platform says so
    }
  }
  return s;
}

OpenClPlatform::OpenClPlatform() {
  std::string why;
  api_ = cl_api(&why);
  if (!api_) fail("opencl: {}", why);
  std::vector<FoundDevice> devices = all_devices(*api_, &why);
  if (devices.empty()) fail("opencl: {}", why);
  const size_t pick = default_device(devices);
  open(devices[pick].platform, devices[pick].device);
}

OpenClPlatform::OpenClPlatform(cl_platform_id platform, cl_device_id device,
                               std::shared_ptr<Communicator> comm, int64_t index)
    : comm_(std::move(comm)), mesh_device_(index) {
  std::string why;
  api_ = cl_api(&why);
  if (!api_) fail("opencl: {}", why);
  open(platform, device);
}

void OpenClPlatform::open(cl_platform_id platform, cl_device_id device) {
  cl_platform_ = platform;
  device_ = device;
  cl_int err = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   reinterpret_cast<cl_context_properties>(platform), 0};
  context_ = api_->clCreateContext(props, 1, &device_, nullptr, nullptr, &err);
  check_cl(err, "creating a context");
  queue_ = api_->clCreateCommandQueue(context_, device_, 0, &err);
  check_cl(err, "creating a command queue");
  traits_.name = device_string(*api_, device_, CL_DEVICE_NAME);
  traits_.fp64 = has_fp64(*api_, device_);
}

int64_t OpenClPlatform::mesh_capacity() const {
  if (const int64_t asked = devices_asked("PRISM_OPENCL_DEVICES")) return asked;
  std::string why;
  int64_t n = 0;
  for (const FoundDevice& d : all_devices(*api_, &why)) n += d.platform == cl_platform_;
  return std::max<int64_t>(n, 1);
}

std::vector<Platform*> OpenClPlatform::mesh_devices(const Mesh& mesh) {
  PRISM_CHECK(!comm_, "opencl: device {} of a mesh cannot itself be split", mesh_device_);
  const int64_t n = mesh.devices();
  PRISM_CHECK(n <= mesh_capacity(),
              "opencl: the mesh {} needs {} devices, the OpenCL platform has {} "
              "(PRISM_OPENCL_DEVICES presents one as several)",
              mesh.str(), n, mesh_capacity());
  if (n == 1) return {this};
  // The platform's devices in order, or the chosen one presented as several.
  std::vector<cl_device_id> ids;
  if (!devices_asked("PRISM_OPENCL_DEVICES")) {
    std::string why;
    for (const FoundDevice& d : all_devices(*api_, &why)) {
      if (d.platform == cl_platform_) ids.push_back(d.device);
    }
  }
  return meshes_.get(mesh, [&](std::shared_ptr<Communicator> comm, int64_t k) {
    return std::unique_ptr<Platform>(
        new OpenClPlatform(cl_platform_, ids.empty() ? device_ : ids[k], std::move(comm), k));
  });
}

void OpenClPlatform::abort_collectives() {
  if (comm_) comm_->abort();
}

void OpenClPlatform::reset_collectives() {
  if (comm_) comm_->reset();
}

OpenClPlatform::~OpenClPlatform() {
  // Buffers handed out may outlive the platform only until exit; release what we own.
  for (auto& [source, program] : programs_) api_->clReleaseProgram(program);
  if (queue_) api_->clReleaseCommandQueue(queue_);
  if (context_) api_->clReleaseContext(context_);
}

std::vector<DeviceInfo> OpenClPlatform::devices() const { return {describe(*api_, device_)}; }

Buffer OpenClPlatform::allocate_for_write(const Shape& shape) {
  auto m = std::make_shared<ClMemory>();
  m->bytes = static_cast<size_t>(shape.bytes());
  cl_int err = CL_SUCCESS;
  // A zero-size cl_mem is invalid; empty tensors get one spare byte.
  m->mem = api_->clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(m->bytes, 1), nullptr,
                                &err);
  if (err != CL_SUCCESS) {
    fail("opencl: allocating {} bytes for {}: {}", m->bytes, shape.str(), cl_error_name(err));
  }
  return Buffer(shape, std::move(m), this);
}

Buffer OpenClPlatform::allocate(const Shape& shape) {
  Buffer b = allocate_for_write(shape);
  size_t bytes = static_cast<ClMemory*>(b.memory())->bytes;
  if (bytes) {
    const cl_uchar zero = 0;
    check_cl(api_->clEnqueueFillBuffer(queue_, mem_of(b), &zero, 1, 0, bytes, 0, nullptr, nullptr),
             "zero-filling a buffer");
  }
  return b;
}

Buffer OpenClPlatform::upload(const HostBuffer& host) {
  Buffer b = allocate_for_write(host.shape());
  if (host.size_bytes()) {
    check_cl(api_->clEnqueueWriteBuffer(queue_, mem_of(b), CL_TRUE, 0, host.size_bytes(),
                                        host.data(), 0, nullptr, nullptr),
             "uploading a buffer");
  }
  return b;
}

void OpenClPlatform::write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) {
  auto* m = static_cast<ClMemory*>(buffer.memory());
  PRISM_CHECK(offset + bytes.size() <= m->bytes,
              "opencl: write of {} bytes at {} past the end of {}", bytes.size(), offset,
              buffer.shape().str());
  if (bytes.empty()) return;
  check_cl(api_->clEnqueueWriteBuffer(queue_, m->mem, CL_TRUE, offset, bytes.size(), bytes.data(),
                                      0, nullptr, nullptr),
           "writing a buffer");
}

HostBuffer OpenClPlatform::download(const Buffer& buffer) {
  HostBuffer host(buffer.shape());
  if (host.size_bytes()) {
    check_cl(api_->clEnqueueReadBuffer(queue_, mem_of(buffer), CL_TRUE, 0, host.size_bytes(),
                                       host.data(), 0, nullptr, nullptr),
             "downloading a buffer");
  }
  return host;
}

void OpenClPlatform::synchronize() { check_cl(api_->clFinish(queue_), "waiting for the queue"); }

bool OpenClPlatform::supports(const ir::Node& node) const { return supports_composite(node); }

cl_program OpenClPlatform::program(const std::string& source) {
  std::lock_guard lock(programs_mutex_);
  auto it = programs_.find(source);
  if (it != programs_.end()) return it->second;
  const char* text = source.c_str();
  size_t length = source.size();
  cl_int err = CL_SUCCESS;
  cl_program p = api_->clCreateProgramWithSource(context_, 1, &text, &length, &err);
  check_cl(err, "creating a program");
  // PRISM_OPENCL_OPTIONS: extra compiler options (e.g. -cl-opt-disable to spend less time
  // compiling small test programs).
  const char* options = std::getenv("PRISM_OPENCL_OPTIONS");
  err = api_->clBuildProgram(p, 1, &device_, options ? options : "", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    api_->clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string log(size, '\0');
    api_->clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    api_->clReleaseProgram(p);
    if (std::getenv("PRISM_DEBUG")) std::fprintf(stderr, "%s\n", source.c_str());
    fail("opencl: building a generated program failed ({}): {}", cl_error_name(err),
         log.substr(0, 2000));
  }
  programs_.emplace(source, p);
  return p;
}

std::unique_ptr<ExecutableImpl> make_executable(OpenClPlatform& platform, const ir::Graph& graph,
                                                const CompileSpec& spec);

std::unique_ptr<ExecutableImpl> OpenClPlatform::compile(const ir::Graph& graph,
                                                        const CompileSpec& spec) {
  return make_executable(*this, graph, spec);
}

}  // namespace opencl

PlatformStatus opencl_status() { return opencl::probe(); }
std::unique_ptr<Platform> make_opencl_platform() {
  return std::make_unique<opencl::OpenClPlatform>();
}

}  // namespace prism
