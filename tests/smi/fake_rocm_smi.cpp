// A stand-in for AMD's librocm_smi64, for the tests of prism smi's ROCm SMI source: the
// functions it calls, as rocm_smi.h declares them, answering with scripted values. FAKE_ROCM_SMI
// picks the script:
//   (unset)        two GPUs, library version 5: GPU 0 (an edge sensor) runs the calling process
//                  (6 GiB); GPU 1 (no edge sensor: the hotspot's; no power reading) and GPU 0
//                  share a second process, pid 1
//   version-6      the same, the library saying it is ROCm 6 (its clock levels' layout)
//   init-fails     rsmi_init fails as without the amdgpu driver
//   lose-gpu-1     GPU 1's readings fail after the first sample
//   bad-clock      GPU 0's current clock level is past its levels
#include <rocm_smi/rocm_smi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

std::string_view script() {
  const char* s = std::getenv("FAKE_ROCM_SMI");
  return s ? s : "";
}

int samples[2] = {0, 0};  // calls of rsmi_dev_name_get per GPU: one a sample

bool lost(uint32_t gpu) { return gpu == 1 && script() == "lose-gpu-1" && samples[1] > 1; }

// rsmi_frequencies_t as ROCm 6 lays it out.
struct FrequenciesV6 {
  bool has_deep_sleep;
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[33];
};

}  // namespace

extern "C" {

rsmi_status_t rsmi_init(uint64_t) {
  return script() == "init-fails" ? RSMI_STATUS_INIT_ERROR : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_shut_down() { return RSMI_STATUS_SUCCESS; }

rsmi_status_t rsmi_status_string(rsmi_status_t status, const char** text) {
  switch (status) {
    case RSMI_STATUS_INIT_ERROR:
      *text = "RSMI_STATUS_INIT_ERROR: An error occurred during initialization";
      return RSMI_STATUS_SUCCESS;
    case RSMI_STATUS_NOT_FOUND:
      *text = "RSMI_STATUS_NOT_FOUND: An item was searched for but not found";
      return RSMI_STATUS_SUCCESS;
    case RSMI_STATUS_UNEXPECTED_DATA:
      *text = "RSMI_STATUS_UNEXPECTED_DATA: The data read or provided was unexpected";
      return RSMI_STATUS_SUCCESS;
    default:
      return RSMI_STATUS_INVALID_ARGS;
  }
}

rsmi_status_t rsmi_version_get(rsmi_version_t* version) {
  *version = {script() == "version-6" ? 6u : 5u, 2, 3, "fake"};
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t* count) {
  *count = 2;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_name_get(uint32_t gpu, char* name, size_t len) {
  if (gpu > 1) return RSMI_STATUS_INVALID_ARGS;
  ++samples[gpu];
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  std::strncpy(name, gpu == 0 ? "AMD Instinct MI300X (fake)" : "AMD Instinct MI210 (fake)", len);
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_busy_percent_get(uint32_t gpu, uint32_t* percent) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  *percent = gpu == 0 ? 64 : 3;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_usage_get(uint32_t gpu, rsmi_memory_type_t type, uint64_t* used) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_INVALID_ARGS;
  *used = gpu == 0 ? 20000000000u : 1000000000u;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_total_get(uint32_t gpu, rsmi_memory_type_t type, uint64_t* total) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_INVALID_ARGS;
  *total = gpu == 0 ? 205822885888u : 68702699520u;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_temp_metric_get(uint32_t gpu, uint32_t sensor,
                                       rsmi_temperature_metric_t metric, int64_t* value) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  if (metric != RSMI_TEMP_CURRENT) return RSMI_STATUS_INVALID_ARGS;
  if (sensor == RSMI_TEMP_TYPE_EDGE) {
    if (gpu == 1) return RSMI_STATUS_NOT_SUPPORTED;
    *value = 45000;
    return RSMI_STATUS_SUCCESS;
  }
  if (sensor == RSMI_TEMP_TYPE_JUNCTION) {
    *value = gpu == 0 ? 52000 : 38500;
    return RSMI_STATUS_SUCCESS;
  }
  return RSMI_STATUS_NOT_SUPPORTED;
}

rsmi_status_t rsmi_dev_power_ave_get(uint32_t gpu, uint32_t sensor, uint64_t* microwatts) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  if (sensor != 0) return RSMI_STATUS_INVALID_ARGS;
  if (gpu == 1) return RSMI_STATUS_NOT_SUPPORTED;
  *microwatts = 301500000;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_gpu_clk_freq_get(uint32_t gpu, rsmi_clk_type_t type, rsmi_frequencies_t* f) {
  if (lost(gpu)) return RSMI_STATUS_NOT_FOUND;
  if (type != RSMI_CLK_TYPE_SYS) return RSMI_STATUS_INVALID_ARGS;
  const uint32_t current = gpu == 0 && script() == "bad-clock" ? 7 : 1;
  const uint64_t levels[3] = {500000000, gpu == 0 ? 2100000000u : 1700000000u, 2400000000u};
  if (script() == "version-6") {
    auto* v6 = reinterpret_cast<FrequenciesV6*>(f);
    *v6 = {};
    v6->has_deep_sleep = true;
    v6->num_supported = 3;
    v6->current = current;
    std::memcpy(v6->frequency, levels, sizeof levels);
  } else {
    *f = {};
    f->num_supported = 3;
    f->current = current;
    std::memcpy(f->frequency, levels, sizeof levels);
  }
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t* procs, uint32_t* count) {
  const rsmi_process_info_t all[2] = {{static_cast<uint32_t>(getpid()), 1, 6ull << 30, 0, 10},
                                      {1, 2, 3ull << 30, 0, 1}};
  if (!procs) {
    *count = 2;
    return RSMI_STATUS_SUCCESS;
  }
  const uint32_t n = *count < 2 ? *count : 2;
  std::memcpy(procs, all, n * sizeof all[0]);
  *count = n;
  return n < 2 ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* gpus, uint32_t* count) {
  if (pid == static_cast<uint32_t>(getpid())) {
    if (*count < 1) return RSMI_STATUS_INSUFFICIENT_SIZE;
    gpus[0] = 0;
    *count = 1;
    return RSMI_STATUS_SUCCESS;
  }
  if (pid == 1) {
    if (*count < 2) return RSMI_STATUS_INSUFFICIENT_SIZE;
    gpus[0] = 0;
    gpus[1] = 1;
    *count = 2;
    return RSMI_STATUS_SUCCESS;
  }
  return RSMI_STATUS_NOT_FOUND;
}

}  // extern "C"
