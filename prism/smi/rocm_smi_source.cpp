// AMD GPUs through ROCm SMI (smi.h): librocm_smi64, which ROCm and Debian's rocm-smi-lib
// install, loaded with dlopen so that prism runs where it is absent, and built against AMD's own
// rocm_smi/rocm_smi.h (Debian's librocm-smi-dev) where the build finds it.
//
// One structure changed between releases without a change of function: rsmi_frequencies_t
// gained a leading `bool has_deep_sleep` and a 33rd frequency in ROCm 6. The clock is read
// with the layout of the library's own major version (rsmi_version_get).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prism/smi/smi.h"
#include "prism/smi/vendor.h"

#if PRISM_WITH_ROCM_SMI
#include <rocm_smi/rocm_smi.h>
#endif

namespace prism::smi {

#if PRISM_WITH_ROCM_SMI
namespace {

// The functions prism calls, typed as rocm_smi.h declares them.
struct RocmSmi {
  decltype(&rsmi_init) init = nullptr;
  decltype(&rsmi_shut_down) shut_down = nullptr;
  decltype(&rsmi_status_string) status_string = nullptr;
  decltype(&rsmi_version_get) version = nullptr;
  decltype(&rsmi_num_monitor_devices) count = nullptr;
  decltype(&rsmi_dev_name_get) name = nullptr;
  decltype(&rsmi_dev_busy_percent_get) busy = nullptr;
  decltype(&rsmi_dev_memory_usage_get) memory_used = nullptr;
  decltype(&rsmi_dev_memory_total_get) memory_total = nullptr;
  decltype(&rsmi_dev_temp_metric_get) temperature = nullptr;
  decltype(&rsmi_dev_power_ave_get) power = nullptr;
  decltype(&rsmi_dev_gpu_clk_freq_get) clock = nullptr;
  decltype(&rsmi_compute_process_info_get) processes = nullptr;
  decltype(&rsmi_compute_process_gpus_get) process_gpus = nullptr;
};

// rsmi_frequencies_t as ROCm 6 lays it out (the header here may be ROCm 5's).
struct FrequenciesV6 {
  bool has_deep_sleep;
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[33];
};

class RocmSmiSource final : public Source {
 public:
  RocmSmiSource(void* library, RocmSmi api, uint32_t major)
      : library_(library), api_(api), major_(major) {}
  ~RocmSmiSource() override {
    api_.shut_down();
    dlclose(library_);
  }
  std::string name() const override { return "rocm-smi"; }

  std::vector<Device> sample() override {
    uint32_t count = 0;
    if (rsmi_status_t r = api_.count(&count); r != RSMI_STATUS_SUCCESS) {
      Device d = blank(0);
      d.errors.push_back("devices: cannot count them: " + error(r));
      return {std::move(d)};
    }
    std::string process_error;
    const std::map<uint32_t, std::vector<Process>> processes = processes_by_device(process_error);
    std::vector<Device> devices;
    for (uint32_t i = 0; i < count; ++i) {
      Device d = device(i);
      if (auto it = processes.find(i); it != processes.end()) d.processes = it->second;
      if (!process_error.empty()) d.errors.push_back("processes: " + process_error);
      devices.push_back(std::move(d));
    }
    return devices;
  }

 private:
  std::string error(rsmi_status_t r) const {
    const char* text = nullptr;
    if (api_.status_string(r, &text) != RSMI_STATUS_SUCCESS || !text) {
      return "status " + std::to_string(static_cast<int>(r));
    }
    return text;
  }

  static Device blank(uint32_t index) {
    Device d;
    d.source = "rocm-smi";
    d.index = static_cast<int>(index);
    return d;
  }

  // One device's readings, each on its own: a reading the device does not support is left
  // out, any other failure is said, and the other readings stay.
  Device device(uint32_t index) const {
    Device d = blank(index);
    auto check = [&](rsmi_status_t r, const char* what) {
      if (r == RSMI_STATUS_SUCCESS) return true;
      if (r != RSMI_STATUS_NOT_SUPPORTED) d.errors.push_back(std::string(what) + ": " + error(r));
      return false;
    };
    char name[256] = {};
    d.name = check(api_.name(index, name, sizeof name), "name") && name[0] ? name : "AMD GPU";
    uint32_t busy = 0;
    if (check(api_.busy(index, &busy), "utilization")) d.utilization = busy / 100.0;
    uint64_t used = 0, total = 0;
    if (check(api_.memory_used(index, RSMI_MEM_TYPE_VRAM, &used), "memory") &&
        check(api_.memory_total(index, RSMI_MEM_TYPE_VRAM, &total), "memory")) {
      d.memory_used = used;
      d.memory_total = total;
    }
    // The edge sensor where there is one (MI200 and later have none), else the hotspot.
    int64_t millidegrees = 0;
    rsmi_status_t r =
        api_.temperature(index, RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_CURRENT, &millidegrees);
    if (r == RSMI_STATUS_NOT_SUPPORTED) {
      r = api_.temperature(index, RSMI_TEMP_TYPE_JUNCTION, RSMI_TEMP_CURRENT, &millidegrees);
    }
    if (check(r, "temperature")) d.temperature_c = millidegrees / 1000.0;
    uint64_t microwatts = 0;
    if (check(api_.power(index, 0, &microwatts), "power")) d.power_w = microwatts / 1e6;
    if (std::optional<double> hz = clock(index, d)) d.clock_mhz = *hz / 1e6;
    return d;
  }

  // The current system (shader) clock in Hz, in the layout of the library's major version.
  std::optional<double> clock(uint32_t index, Device& d) const {
    auto read = [&](auto& f) -> std::optional<double> {
      const rsmi_status_t r =
          api_.clock(index, RSMI_CLK_TYPE_SYS, reinterpret_cast<rsmi_frequencies_t*>(&f));
      if (r != RSMI_STATUS_SUCCESS) {
        if (r != RSMI_STATUS_NOT_SUPPORTED) d.errors.push_back("clock: " + error(r));
        return std::nullopt;
      }
      constexpr uint32_t kMost = sizeof f.frequency / sizeof f.frequency[0];
      if (f.current >= f.num_supported || f.current >= kMost) {
        d.errors.push_back("clock: current level " + std::to_string(f.current) + " of " +
                           std::to_string(f.num_supported));
        return std::nullopt;
      }
      return static_cast<double>(f.frequency[f.current]);
    };
    if (major_ >= 6) {
      FrequenciesV6 f{};
      return read(f);
    }
    rsmi_frequencies_t f{};
    return read(f);
  }

  // The compute processes of every device: ROCm SMI lists them for the system, and each
  // one's devices apart. A process on several devices shows on each, its memory (the sum over
  // them) on none.
  std::map<uint32_t, std::vector<Process>> processes_by_device(std::string& failure) const {
    std::map<uint32_t, std::vector<Process>> by_device;
    uint32_t n = 0;
    rsmi_status_t r = api_.processes(nullptr, &n);
    std::vector<rsmi_process_info_t> infos;
    if (r == RSMI_STATUS_SUCCESS && n > 0) {
      infos.resize(n + 8);  // a few more, for those that start in between
      n = static_cast<uint32_t>(infos.size());
      r = api_.processes(infos.data(), &n);
    }
    if (r != RSMI_STATUS_SUCCESS) {
      if (r != RSMI_STATUS_NOT_SUPPORTED) failure = error(r);
      return by_device;
    }
    for (uint32_t i = 0; i < n && i < infos.size(); ++i) {
      uint32_t devices[64] = {}, k = 64;
      if (api_.process_gpus(infos[i].process_id, devices, &k) != RSMI_STATUS_SUCCESS) continue;
      for (uint32_t j = 0; j < k && j < 64; ++j) {
        Process p;
        p.pid = infos[i].process_id;
        p.name = vendor::process_name(infos[i].process_id);
        if (k == 1) p.memory_bytes = infos[i].vram_usage;
        by_device[devices[j]].push_back(std::move(p));
      }
    }
    return by_device;
  }

  void* library_;
  RocmSmi api_;
  uint32_t major_;
};

}  // namespace

std::unique_ptr<Source> rocm_smi_source(std::string* absent) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<Source> {
    if (absent) *absent = "rocm-smi: " + why;
    return nullptr;
  };
  // PRISM_ROCM_SMI_LIBRARY's path, else the sonames of Debian's (1) and ROCm's releases.
  std::vector<std::string> paths;
  if (const char* env = std::getenv("PRISM_ROCM_SMI_LIBRARY"); env && *env) {
    paths.push_back(env);
  } else {
    paths = {"librocm_smi64.so.1", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5",
             "/opt/rocm/lib/librocm_smi64.so"};
  }
  std::optional<vendor::Library> library;
  for (const std::string& path : paths) {
    if (library.emplace(path)) break;
  }
  if (!*library) {
    return fail(paths.size() == 1 ? paths[0] + " not found"
                                  : "librocm_smi64 not found (ROCm, or Debian's librocm-smi64-1, "
                                    "installs it)");
  }
  RocmSmi api;
  auto load = [&](auto& fn, const char* symbol) { library->load(fn, symbol); };
  load(api.init, "rsmi_init");
  load(api.shut_down, "rsmi_shut_down");
  load(api.status_string, "rsmi_status_string");
  load(api.version, "rsmi_version_get");
  load(api.count, "rsmi_num_monitor_devices");
  load(api.name, "rsmi_dev_name_get");
  load(api.busy, "rsmi_dev_busy_percent_get");
  load(api.memory_used, "rsmi_dev_memory_usage_get");
  load(api.memory_total, "rsmi_dev_memory_total_get");
  load(api.temperature, "rsmi_dev_temp_metric_get");
  load(api.power, "rsmi_dev_power_ave_get");
  load(api.clock, "rsmi_dev_gpu_clk_freq_get");
  load(api.processes, "rsmi_compute_process_info_get");
  load(api.process_gpus, "rsmi_compute_process_gpus_get");
  if (!library->missing().empty()) return fail("the library has no " + library->missing());
  // rsmi_init writes its own complaints to stderr where it finds no GPU ("Failed to open drm
  // root directory"): quiet while it runs, since the line `absent:` gives says it once.
  rsmi_status_t r;
  {
    std::fflush(stderr);
    const int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved >= 0 && null >= 0) dup2(null, STDERR_FILENO);
    r = api.init(0);
    std::fflush(stderr);
    if (saved >= 0 && null >= 0) dup2(saved, STDERR_FILENO);
    if (null >= 0) close(null);
    if (saved >= 0) close(saved);
  }
  if (r != RSMI_STATUS_SUCCESS) {
    const char* text = nullptr;
    std::string why = api.status_string(r, &text) == RSMI_STATUS_SUCCESS && text
                          ? text
                          : "status " + std::to_string(static_cast<int>(r));
    return fail("rsmi_init failed: " + why);
  }
  rsmi_version_t version{};
  if (api.version(&version) != RSMI_STATUS_SUCCESS) {
    api.shut_down();
    return fail("rsmi_version_get failed");
  }
  return std::make_unique<RocmSmiSource>(library->release(), api, version.major);
}

#else  // built without rocm_smi.h

std::unique_ptr<Source> rocm_smi_source(std::string* absent) {
  if (absent) {
    *absent =
        "rocm-smi: this prism was built without rocm_smi/rocm_smi.h (scripts/setup.sh "
        "installs it)";
  }
  return nullptr;
}

#endif

}  // namespace prism::smi
