// NVIDIA GPUs through NVML (smi.h), the library NVIDIA's driver installs: loaded with dlopen,
// so that prism runs where it is absent, and built against NVIDIA's own nvml.h (from PyPI's
// nvidia-nvml-dev wheel, or the CUDA toolkit's include folder) where the build finds one.
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "prism/smi/smi.h"
#include "prism/smi/vendor.h"

#if PRISM_WITH_NVML
#include <nvml.h>
#endif

namespace prism::smi {

#if PRISM_WITH_NVML
namespace {

// The functions prism calls, typed as nvml.h declares them.
struct Nvml {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetTemperature) temperature = nullptr;
  decltype(&nvmlDeviceGetPowerUsage) power = nullptr;
  decltype(&nvmlDeviceGetClockInfo) clock = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
};

class NvmlSource final : public Source {
 public:
  NvmlSource(void* library, Nvml api) : library_(library), api_(api) {}
  ~NvmlSource() override {
    api_.shutdown();
    dlclose(library_);
  }
  std::string name() const override { return "nvml"; }

  std::vector<Device> sample() override {
    std::vector<Device> devices;
    unsigned count = 0;
    if (nvmlReturn_t r = api_.count(&count); r != NVML_SUCCESS) {
      Device d = blank(0);
      d.errors.push_back("devices: cannot count them: " + error(r));
      return {std::move(d)};
    }
    for (unsigned i = 0; i < count; ++i) devices.push_back(device(i));
    return devices;
  }

 private:
  std::string error(nvmlReturn_t r) const { return api_.error_string(r); }

  static Device blank(unsigned index) {
    Device d;
    d.source = "nvml";
    d.index = static_cast<int>(index);
    return d;
  }

  // One device's readings, each on its own: a reading the device does not support is left
  // out, any other failure is said, and the other readings stay.
  Device device(unsigned index) const {
    Device d = blank(index);
    nvmlDevice_t h{};
    if (nvmlReturn_t r = api_.handle(index, &h); r != NVML_SUCCESS) {
      d.name = "(unreachable)";
      d.errors.push_back("device: " + error(r));
      return d;
    }
    auto check = [&](nvmlReturn_t r, const char* what) {
      if (r == NVML_SUCCESS) return true;
      if (r != NVML_ERROR_NOT_SUPPORTED) d.errors.push_back(std::string(what) + ": " + error(r));
      return false;
    };
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    d.name = check(api_.name(h, name, sizeof name), "name") ? name : "NVIDIA GPU";
    nvmlUtilization_t u{};
    if (check(api_.utilization(h, &u), "utilization")) d.utilization = u.gpu / 100.0;
    nvmlMemory_t m{};
    if (check(api_.memory(h, &m), "memory")) {
      d.memory_used = m.used;
      d.memory_total = m.total;
    }
    unsigned value = 0;
    if (check(api_.temperature(h, NVML_TEMPERATURE_GPU, &value), "temperature")) {
      d.temperature_c = value;
    }
    if (check(api_.power(h, &value), "power")) d.power_w = value / 1000.0;  // milliwatts
    if (check(api_.clock(h, NVML_CLOCK_SM, &value), "clock")) d.clock_mhz = value;
    // The processes: the count first, then as many as there are (a few more, for those that
    // start in between).
    unsigned n = 0;
    nvmlReturn_t r = api_.processes(h, &n, nullptr);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      std::vector<nvmlProcessInfo_t> infos(n + 8);
      n = static_cast<unsigned>(infos.size());
      r = api_.processes(h, &n, infos.data());
      if (r == NVML_SUCCESS) {
        for (unsigned i = 0; i < n && i < infos.size(); ++i) {
          Process p;
          p.pid = infos[i].pid;
          p.name = vendor::process_name(infos[i].pid);
          if (infos[i].usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
            p.memory_bytes = infos[i].usedGpuMemory;
          }
          d.processes.push_back(std::move(p));
        }
      }
    }
    if (r != NVML_SUCCESS) check(r, "processes");
    return d;
  }

  void* library_;
  Nvml api_;
};

}  // namespace

std::unique_ptr<Source> nvml_source(std::string* absent) {
  const char* env = std::getenv("PRISM_NVML_LIBRARY");
  const std::string path = env && *env ? env : "libnvidia-ml.so.1";
  auto fail = [&](const std::string& why) -> std::unique_ptr<Source> {
    if (absent) *absent = "nvml: " + why;
    return nullptr;
  };
  vendor::Library library(path);
  if (!library) return fail(path + " not found (NVIDIA's driver installs it)");
  Nvml api;
  auto load = [&](auto& fn, const char* symbol) { library.load(fn, symbol); };
  load(api.init, "nvmlInit_v2");
  load(api.shutdown, "nvmlShutdown");
  load(api.error_string, "nvmlErrorString");
  load(api.count, "nvmlDeviceGetCount_v2");
  load(api.handle, "nvmlDeviceGetHandleByIndex_v2");
  load(api.name, "nvmlDeviceGetName");
  load(api.utilization, "nvmlDeviceGetUtilizationRates");
  load(api.memory, "nvmlDeviceGetMemoryInfo");
  load(api.temperature, "nvmlDeviceGetTemperature");
  load(api.power, "nvmlDeviceGetPowerUsage");
  load(api.clock, "nvmlDeviceGetClockInfo");
  load(api.processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!library.missing().empty()) {
    return fail(path + " has no " + library.missing() + " (a driver older than NVML 11.5?)");
  }
  if (nvmlReturn_t r = api.init(); r != NVML_SUCCESS) {
    return fail(std::string("nvmlInit failed: ") + api.error_string(r));
  }
  return std::make_unique<NvmlSource>(library.release(), api);
}

#else  // built without nvml.h

std::unique_ptr<Source> nvml_source(std::string* absent) {
  if (absent) *absent = "nvml: this prism was built without nvml.h (scripts/setup.sh installs it)";
  return nullptr;
}

#endif

}  // namespace prism::smi
