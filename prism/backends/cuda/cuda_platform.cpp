#include "prism/backends/cuda/cuda_platform.h"

#include <algorithm>
#include <cstring>

#include "prism/backends/cuda/nvrtc_compiler.h"
#include "prism/compiler/kernel_ir.h"
#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism {
namespace cuda {

BlockCache::~BlockCache() { release(); }

CUdeviceptr BlockCache::get(size_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = free_.find(bytes);
  if (it == free_.end()) return 0;
  CUdeviceptr p = it->second;
  free_.erase(it);
  return p;
}

void BlockCache::put(CUdeviceptr p, size_t bytes) {
  std::lock_guard lock(mutex_);
  free_.emplace(bytes, p);
}

void BlockCache::release() {
  std::lock_guard lock(mutex_);
  const auto& drv = driver_library();
  for (auto& [bytes, p] : free_) {
    if (drv.ok) drv.api.cuMemFree_v2(p);  // at exit the driver may be gone: nothing to report
  }
  free_.clear();
}

CudaMemory::~CudaMemory() {
  if (ptr && cache) cache->put(ptr, bytes);
}

CudaPlatform::CudaPlatform() { open(0); }

CudaPlatform::CudaPlatform(int ordinal, std::shared_ptr<Communicator> comm,
                           std::shared_ptr<NcclMesh> nccl, int64_t index,
                           std::string_view collectives)
    : comm_(std::move(comm)), nccl_(std::move(nccl)), mesh_device_(index) {
  open(ordinal);
  info_.name += fmt::format(", device {} of {}, collectives through {}", index, comm_->mesh().str(),
                            collectives);
}

void CudaPlatform::open(int ordinal) {
  std::string reason = unavailable_reason();
  PRISM_CHECK(reason.empty(), "platform cuda is not available: {}", reason);
  const DriverApi& drv = driver();
  check(drv.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  check(drv.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  bind();
  char name[256] = {};
  check(drv.cuDeviceGetName(name, sizeof(name), device_), "cuDeviceGetName");
  size_t total = 0;
  check(drv.cuDeviceTotalMem_v2(&total, device_), "cuDeviceTotalMem");
  auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    check(drv.cuDeviceGetAttribute(&v, a, device_), "cuDeviceGetAttribute");
    return v;
  };
  int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  arch_ = arch_for(major, minor);
  info_ = nominal_limits(major, minor, attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                         attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
                         attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
                         attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH));
  info_.name = fmt::format("{} ({})", name, arch_);
  info_.memory_bytes = static_cast<int64_t>(total);
  check(drv.cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
  // cuBLASLt when it is there (PRISM_CUDA_CUBLASLT=0 declines it, to compare with our kernels).
  if (cublaslt_library().ok && env_switch("PRISM_CUDA_CUBLASLT", true)) {
    check(cublaslt().cublasLtCreate(&lt_handle_), "cublasLtCreate");
    check(drv.cuMemAlloc_v2(&workspace_, kWorkspaceBytes), "cuMemAlloc (cuBLASLt workspace)");
  } else {
    info_.name +=
        cublaslt_library().ok ? ", cuBLASLt off" : ", no cuBLASLt: products in our kernels";
  }
}

CudaPlatform::~CudaPlatform() {
  // Platforms live until the process exits, when the driver may already be unloading:
  // release what we can and report nothing.
  const auto& drv = driver_library();
  if (!drv.ok) return;
  blocks_->release();
  if (workspace_) drv.api.cuMemFree_v2(workspace_);
  if (lt_handle_ && cublaslt_library().ok) cublaslt_library().api.cublasLtDestroy(lt_handle_);
  if (stream_) drv.api.cuStreamDestroy_v2(stream_);
  if (context_) drv.api.cuDevicePrimaryCtxRelease_v2(device_);
}

int64_t CudaPlatform::mesh_capacity() const {
  // In a run of several processes, each offers its own.
  if (const int64_t asked = devices_asked("PRISM_CUDA_DEVICES")) return asked * Processes::asked();
  return gpu_count() * Processes::asked();
}

int CudaPlatform::gpu_count() {
  int count = 0;
  check(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  return std::max(count, 1);
}

std::vector<Platform*> CudaPlatform::process_mesh_devices(const Mesh& mesh, Processes& processes) {
  const int64_t local = mesh.devices() / processes.size(), first = processes.rank() * local;
  std::vector<int> ordinals;
  std::shared_ptr<NcclMesh> nccl;
  std::string collectives;  // how, said in each device's name
  return meshes_.get_across(
      "cuda", mesh, processes, [&](std::shared_ptr<Communicator> comm, int64_t k) {
        if (k == first) {
          // This process's GPUs: the next `local` of its host after those of the processes before
          // it there, or where the host has too few for that (each process given its own GPUs by
          // CUDA_VISIBLE_DEVICES, say), its first ones. PRISM_CUDA_DEVICES: GPU 0 for all.
          const bool virtual_devices = devices_asked("PRISM_CUDA_DEVICES") > 0;
          const int count = gpu_count();
          for (int64_t j = 0; j < local; ++j) {
            const int64_t next = processes.local_rank() * local + j;
            ordinals.push_back(virtual_devices ? 0
                                               : static_cast<int>(next < count ? next : j % count));
          }
          // Every process asks, in the same order, whether every process can take NCCL.
          const std::string declined = virtual_devices
                                           ? "PRISM_CUDA_DEVICES presents one GPU as several"
                                       : !env_switch("PRISM_CUDA_NCCL", true) ? "PRISM_CUDA_NCCL=0"
                                                                              : "";
          auto bind = [](int ordinal) {  // NCCL joins a group on the current GPU
            CUdevice device = 0;
            CUcontext context = nullptr;
            check(driver().cuDeviceGet(&device, ordinal), "cuDeviceGet");
            check(driver().cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
            check(driver().cuCtxSetCurrent(context), "cuCtxSetCurrent");
          };
          std::string why;
          nccl = NcclMesh::open_across(mesh, processes, first, ordinals, bind, declined, &why);
          collectives = nccl ? nccl->version() : fmt::format("host memory ({})", why);
        }
        return std::unique_ptr<Platform>(
            new CudaPlatform(ordinals[k - first], std::move(comm), nccl, k, collectives));
      });
}

std::vector<Platform*> CudaPlatform::mesh_devices(const Mesh& mesh) {
  PRISM_CHECK(!comm_, "cuda: device {} of a mesh cannot itself be split", mesh_device_);
  const int64_t n = mesh.devices();
  PRISM_CHECK(n <= mesh_capacity(),
              "cuda: the mesh {} needs {} devices, the run has {} GPUs "
              "(PRISM_CUDA_DEVICES presents one as several)",
              mesh.str(), n, mesh_capacity());
  if (Processes* processes = Processes::get(); processes && n > 1) {
    return process_mesh_devices(mesh, *processes);  // this process's block of the devices
  }
  if (n == 1) return {this};
  // The machine's GPUs in order, or GPU 0 presented as several.
  const bool virtual_devices = devices_asked("PRISM_CUDA_DEVICES") > 0;
  std::vector<int> ordinals;
  for (int64_t k = 0; k < n; ++k) ordinals.push_back(virtual_devices ? 0 : static_cast<int>(k));
  std::shared_ptr<NcclMesh> nccl;
  std::string collectives;  // how, said in each device's name
  return meshes_.get(mesh, [&](std::shared_ptr<Communicator> comm, int64_t k) {
    if (k == 0) {
      std::string why =
          virtual_devices ? "PRISM_CUDA_DEVICES presents one GPU as several" : "PRISM_CUDA_NCCL=0";
      if (!virtual_devices && env_switch("PRISM_CUDA_NCCL", true)) {
        nccl = NcclMesh::open(mesh, ordinals, &why);
      }
      collectives = nccl ? nccl->version() : fmt::format("host memory ({})", why);
    }
    return std::unique_ptr<Platform>(
        new CudaPlatform(ordinals[k], std::move(comm), nccl, k, collectives));
  });
}

void CudaPlatform::abort_collectives() {
  if (comm_) comm_->abort();
  if (nccl_) nccl_->abort();
}

void CudaPlatform::reset_collectives() {
  if (comm_) comm_->reset();
  if (nccl_) nccl_->reset();
}

void CudaPlatform::bind() const { check(driver().cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

std::vector<DeviceInfo> CudaPlatform::devices() const { return {info_}; }

DeviceInfo nominal_limits(int major, int minor, int sms, int clock_khz, int memory_clock_khz,
                          int bus_bits) {
  DeviceInfo d;
  // Double data rate: two transfers per memory clock.
  d.memory_gbps = 2.0 * memory_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  // FP32 lanes and dense bf16 tensor-core FLOPs per clock per SM, by architecture.
  int fp32_lanes = major >= 8 && !(major == 8 && minor == 0) ? 128 : 64;
  int bf16_per_clock = 0;
  if (major == 8) bf16_per_clock = minor == 0 ? 2048 : 512;
  if (major == 9) bf16_per_clock = 4096;
  if (major == 10) bf16_per_clock = 8192;
  if (major >= 11) bf16_per_clock = 512;
  double ghz = clock_khz / 1e6;
  d.fp32_gflops = sms * fp32_lanes * 2.0 * ghz;
  d.bf16_gflops = sms * bf16_per_clock * ghz;
  return d;
}

std::shared_ptr<CudaMemory> CudaPlatform::raw_allocate(size_t bytes) {
  auto m = std::make_shared<CudaMemory>();
  m->bytes = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  m->cache = blocks_;
  m->ptr = blocks_->get(m->bytes);
  if (m->ptr) return m;
  bind();
  CUresult r = driver().cuMemAlloc_v2(&m->ptr, m->bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // cached blocks of other sizes may make room
    check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
    blocks_->release();
    r = driver().cuMemAlloc_v2(&m->ptr, m->bytes);
  }
  if (r != CUDA_SUCCESS) {
    m->ptr = 0;
    check(r, fmt::format("cuMemAlloc of {} bytes", bytes).c_str());
  }
  return m;
}

Buffer CudaPlatform::allocate_for_write(const Shape& shape) {
  bind();
  return Buffer(shape, raw_allocate(static_cast<size_t>(shape.bytes())), this);
}

Buffer CudaPlatform::allocate(const Shape& shape) {
  Buffer b = allocate_for_write(shape);
  auto* m = static_cast<CudaMemory*>(b.memory());
  check(driver().cuMemsetD8Async(m->ptr, 0, m->bytes, stream_), "cuMemsetD8Async");
  return b;
}

Buffer CudaPlatform::upload(const HostBuffer& host) {
  bind();
  Buffer b = allocate_for_write(host.shape());
  if (host.size_bytes()) {
    check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(driver().cuMemcpyHtoD_v2(device_ptr(b), host.data(), host.size_bytes()), "cuMemcpyHtoD");
  }
  return b;
}

void CudaPlatform::write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) {
  bind();
  PRISM_CHECK(offset + bytes.size() <= static_cast<size_t>(buffer.shape().bytes()),
              "cuda: write of {} bytes at {} past the end of {}", bytes.size(), offset,
              buffer.shape().str());
  if (bytes.empty()) return;
  check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
  check(driver().cuMemcpyHtoD_v2(device_ptr(buffer) + offset, bytes.data(), bytes.size()),
        "cuMemcpyHtoD");
}

HostBuffer CudaPlatform::download(const Buffer& buffer) {
  bind();
  HostBuffer host(buffer.shape());
  check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
  if (host.size_bytes()) {
    check(driver().cuMemcpyDtoH_v2(host.data(), device_ptr(buffer), host.size_bytes()),
          "cuMemcpyDtoH");
  }
  return host;
}

bool CudaPlatform::supports(const ir::Node& n) const {
  // Attention has a kernel of its own; other composites are kernel IR or decomposed.
  if (n.op == ir::Op::attention) return n.shape.rank() == 4;
  return kernel::lowers(n);
}

std::unique_ptr<ExecutableImpl> CudaPlatform::compile(const ir::Graph& graph,
                                                      const CompileSpec& spec) {
  bind();
  return make_cuda_executable(*this, graph, spec);
}

}  // namespace cuda

std::unique_ptr<Platform> make_cuda_platform() { return std::make_unique<cuda::CudaPlatform>(); }

// The registry's probe (prism/backends/registry.cpp): usable when the driver, NVRTC and a
// device are; every CUDA device is a GPU.
PlatformStatus cuda_status() {
  std::string reason = cuda::unavailable_reason();
  return PlatformStatus{"cuda", true, reason.empty(), reason, reason.empty()};
}

}  // namespace prism
