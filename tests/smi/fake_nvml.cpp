// A stand-in for NVIDIA's libnvidia-ml.so.1, for the tests of prism smi's NVML source: the
// functions it calls, as nvml.h declares them, answering with scripted values. FAKE_NVML picks
// the script:
//   (unset)       two GPUs; GPU 0 runs the calling process (8 GiB); GPU 1 has no power reading
//   init-fails    nvmlInit_v2 fails as without a loaded driver
//   lose-gpu-1    GPU 1 falls off the bus after the first sample
#include <nvml.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

std::string_view script() {
  const char* s = std::getenv("FAKE_NVML");
  return s ? s : "";
}

// Handles are the GPU's number plus one, so that a null handle is never valid.
unsigned gpu(nvmlDevice_t h) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(h)) - 1; }

int handle_calls[2] = {0, 0};

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  return script() == "init-fails" ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index > 1) return NVML_ERROR_INVALID_ARGUMENT;
  if (++handle_calls[index] > 1 && index == 1 && script() == "lose-gpu-1") {
    return NVML_ERROR_GPU_IS_LOST;
  }
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  std::strncpy(name, gpu(device) == 0 ? "NVIDIA H200 (fake)" : "NVIDIA L4 (fake)", length);
  name[length - 1] = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  u->gpu = gpu(device) == 0 ? 37 : 0;
  u->memory = 12;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  m->total = gpu(device) == 0 ? 150000000000ull : 24000000000ull;
  m->used = gpu(device) == 0 ? 12000000000ull : 500000000ull;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = gpu(device) == 0 ? 41 : 35;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  if (gpu(device) == 1) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = 123456;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  if (type != NVML_CLOCK_SM) return NVML_ERROR_INVALID_ARGUMENT;
  *clock = gpu(device) == 0 ? 1980 : 2040;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  const unsigned n = gpu(device) == 0 ? 1 : 0;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = n;
  if (n == 1) {
    infos[0] = {};
    infos[0].pid = static_cast<unsigned>(getpid());
    infos[0].usedGpuMemory = 8ull << 30;
  }
  return NVML_SUCCESS;
}

}  // extern "C"
