// A stand-in for the Level Zero loader (libze_loader.so.1), for the tests of prism smi's Level
// Zero source: the functions it calls, as ze_api.h and zes_api.h declare them, answering with
// scripted values. Counters (engine activity, energy) advance one second per call, so the rates
// of two samples are known. Sysman answers only when ZES_ENABLE_SYSMAN=1 was set at zeInit, as
// the real drivers do; zeInit starts the script over. FAKE_LEVEL_ZERO picks the script:
//   (unset)             one driver with three devices: GPU 0, an NPU (not a GPU), GPU 1.
//                       GPU 0: compute engines 25% busy (all engines 50%), 16 of 48 GiB used
//                       (and system memory, not its own), GPU sensor 48.5C, 300 W (a tile's
//                       domain says 120 W), 1550 MHz, the calling process with 6 GiB.
//                       GPU 1: no compute group, two tiles' all-engines groups 60% and 20% busy,
//                       1 of 16 GiB used, tiles' sensors 61C and 63.5C, no power readings,
//                       tiles at 2100 and 2000 MHz, no processes
//   init-fails          zeInit finds no driver
//   lose-gpu-1          GPU 1 is lost after the first sample
//   temperature-denied  GPU 0's temperature needs permissions the caller lacks
#include <level_zero/zes_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

namespace {

std::string_view script() {
  const char* s = std::getenv("FAKE_LEVEL_ZERO");
  return s ? s : "";
}

// Device handles are the device's number plus one, so that a null handle is never valid; a
// component's handle holds its device's, its kind and its number plus one.
enum Kind : uintptr_t { kEngine = 1, kMemory, kSensor, kPower, kFrequency };
constexpr unsigned kDevices = 3;  // 0: GPU, 1: NPU, 2: GPU

template <typename Handle>
Handle device_handle(unsigned device) {
  return reinterpret_cast<Handle>(static_cast<uintptr_t>(device) + 1);
}
template <typename Handle>
unsigned device_of(Handle h) {
  const auto v = reinterpret_cast<uintptr_t>(h);
  return static_cast<unsigned>((v > 0xffff ? v >> 16 : v) - 1);
}
template <typename Handle>
Handle component(unsigned device, Kind kind, unsigned i) {
  return reinterpret_cast<Handle>((static_cast<uintptr_t>(device + 1) << 16) | (kind << 8) |
                                  (i + 1));
}
template <typename Handle>
unsigned number(Handle h) {
  return static_cast<unsigned>((reinterpret_cast<uintptr_t>(h) & 0xff) - 1);
}

bool sysman = false;
int property_calls[kDevices] = {};
std::map<uintptr_t, uint64_t> counter_calls;  // per component handle

// GPU 1 (device 2) after its first sample, under lose-gpu-1.
template <typename Handle>
bool lost(Handle h) {
  return script() == "lose-gpu-1" && device_of(h) == 2 && property_calls[2] > 1;
}

// The count-then-handles protocol of every zes*Enum* function, for `n` components.
template <typename Handle>
ze_result_t enumerate(zes_device_handle_t device, Kind kind, unsigned n, uint32_t* count,
                      Handle* handles) {
  if (!sysman) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (lost(device)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (device_of(device) == 1 || device_of(device) >= kDevices) {
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  }
  if (*count == 0 || !handles) {
    *count = n;
    return ZE_RESULT_SUCCESS;
  }
  if (*count > n) *count = n;
  for (unsigned i = 0; i < *count; ++i) handles[i] = component<Handle>(device_of(device), kind, i);
  return ZE_RESULT_SUCCESS;
}

// The component's calls so far, this one included: its counters' seconds.
template <typename Handle>
uint64_t tick(Handle h) {
  return ++counter_calls[reinterpret_cast<uintptr_t>(h)];
}

// Per GPU (0: device 0; 1: device 2), per component.
struct EngineGroup {
  zes_engine_group_t type;
  bool tile;
  uint32_t busy_per_mille;
};
const EngineGroup kEngines[2][3] = {{{ZES_ENGINE_GROUP_MEDIA_ALL, false, 900},
                                     {ZES_ENGINE_GROUP_ALL, false, 500},
                                     {ZES_ENGINE_GROUP_COMPUTE_ALL, false, 250}},
                                    {{ZES_ENGINE_GROUP_COPY_ALL, false, 1000},
                                     {ZES_ENGINE_GROUP_ALL, true, 600},
                                     {ZES_ENGINE_GROUP_ALL, true, 200}}};
unsigned gpu(unsigned device) { return device == 0 ? 0 : 1; }

}  // namespace

extern "C" {

ze_result_t zeInit(ze_init_flags_t flags) {
  if (script() == "init-fails") return ZE_RESULT_ERROR_UNINITIALIZED;
  const char* enable = std::getenv("ZES_ENABLE_SYSMAN");
  sysman = enable && std::string_view(enable) == "1";
  std::memset(property_calls, 0, sizeof property_calls);
  counter_calls.clear();
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGet(uint32_t* count, ze_driver_handle_t* drivers) {
  if (*count == 0 || !drivers) {
    *count = 1;
    return ZE_RESULT_SUCCESS;
  }
  *count = 1;
  drivers[0] = reinterpret_cast<ze_driver_handle_t>(uintptr_t{1});
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGet(ze_driver_handle_t driver, uint32_t* count, ze_device_handle_t* devices) {
  if (reinterpret_cast<uintptr_t>(driver) != 1) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (*count == 0 || !devices) {
    *count = kDevices;
    return ZE_RESULT_SUCCESS;
  }
  if (*count > kDevices) *count = kDevices;
  for (unsigned i = 0; i < *count; ++i) devices[i] = device_handle<ze_device_handle_t>(i);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetProperties(ze_device_handle_t device, ze_device_properties_t* p) {
  if (p->stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const unsigned d = device_of(device);
  p->type = d == 1 ? ZE_DEVICE_TYPE_VPU : ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0x8086;
  const char* names[kDevices] = {"Intel Data Center GPU Max 1100 (fake)", "Intel NPU (fake)",
                                 "Intel Arc A770 (fake)"};
  std::strncpy(p->name, names[d], sizeof p->name - 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceGetProperties(zes_device_handle_t device, zes_device_properties_t* p) {
  if (!sysman) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (p->stype != ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ++property_calls[device_of(device)];
  if (lost(device)) return ZE_RESULT_ERROR_DEVICE_LOST;
  p->core.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  zeDeviceGetProperties(device, &p->core);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceEnumEngineGroups(zes_device_handle_t device, uint32_t* count,
                                      zes_engine_handle_t* engines) {
  return enumerate(device, kEngine, 3, count, engines);
}

ze_result_t zesEngineGetProperties(zes_engine_handle_t engine, zes_engine_properties_t* p) {
  if (lost(engine)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (p->stype != ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const EngineGroup& g = kEngines[gpu(device_of(engine))][number(engine)];
  p->type = g.type;
  p->onSubdevice = g.tile;
  p->subdeviceId = g.tile ? number(engine) - 1 : 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesEngineGetActivity(zes_engine_handle_t engine, zes_engine_stats_t* stats) {
  if (lost(engine)) return ZE_RESULT_ERROR_DEVICE_LOST;
  const EngineGroup& g = kEngines[gpu(device_of(engine))][number(engine)];
  const uint64_t seconds = tick(engine);
  stats->timestamp = 1000000000 + seconds * 1000000;  // microseconds, from any base
  stats->activeTime = seconds * g.busy_per_mille * 1000;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceEnumMemoryModules(zes_device_handle_t device, uint32_t* count,
                                       zes_mem_handle_t* modules) {
  return enumerate(device, kMemory, device_of(device) == 0 ? 2 : 1, count, modules);
}

ze_result_t zesMemoryGetProperties(zes_mem_handle_t memory, zes_mem_properties_t* p) {
  if (lost(memory)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (p->stype != ZES_STRUCTURE_TYPE_MEM_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  p->type = ZES_MEM_TYPE_HBM;
  p->location = number(memory) == 0 ? ZES_MEM_LOC_DEVICE : ZES_MEM_LOC_SYSTEM;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesMemoryGetState(zes_mem_handle_t memory, zes_mem_state_t* s) {
  if (lost(memory)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (s->stype != ZES_STRUCTURE_TYPE_MEM_STATE) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  s->health = ZES_MEM_HEALTH_OK;
  if (number(memory) == 1) {  // the system's
    s->size = 256ull << 30;
    s->free = 100ull << 30;
  } else if (device_of(memory) == 0) {
    s->size = 48ull << 30;
    s->free = 32ull << 30;
  } else {
    s->size = 16ull << 30;
    s->free = 15ull << 30;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceEnumTemperatureSensors(zes_device_handle_t device, uint32_t* count,
                                            zes_temp_handle_t* sensors) {
  return enumerate(device, kSensor, device_of(device) == 0 ? 3 : 2, count, sensors);
}

ze_result_t zesTemperatureGetProperties(zes_temp_handle_t sensor, zes_temp_properties_t* p) {
  if (lost(sensor)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (p->stype != ZES_STRUCTURE_TYPE_TEMP_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const zes_temp_sensors_t gpu0[3] = {ZES_TEMP_SENSORS_GLOBAL, ZES_TEMP_SENSORS_GPU,
                                      ZES_TEMP_SENSORS_MEMORY};
  const bool first = device_of(sensor) == 0;
  p->type = first ? gpu0[number(sensor)] : ZES_TEMP_SENSORS_GPU;
  p->onSubdevice = !first;
  p->subdeviceId = first ? 0 : number(sensor);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesTemperatureGetState(zes_temp_handle_t sensor, double* celsius) {
  if (lost(sensor)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (device_of(sensor) == 0 && script() == "temperature-denied") {
    return ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS;
  }
  const double gpu0[3] = {57.0, 48.5, 40.0}, gpu1[2] = {61.0, 63.5};
  *celsius = device_of(sensor) == 0 ? gpu0[number(sensor)] : gpu1[number(sensor)];
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceEnumPowerDomains(zes_device_handle_t device, uint32_t* count,
                                      zes_pwr_handle_t* domains) {
  if (sysman && !lost(device) && device_of(device) == 2) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  return enumerate(device, kPower, 2, count, domains);
}

ze_result_t zesPowerGetProperties(zes_pwr_handle_t domain, zes_power_properties_t* p) {
  if (p->stype != ZES_STRUCTURE_TYPE_POWER_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  p->onSubdevice = number(domain) == 1;  // the second is a tile's
  p->defaultLimit = p->minLimit = p->maxLimit = -1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesPowerGetEnergyCounter(zes_pwr_handle_t domain, zes_power_energy_counter_t* e) {
  const uint64_t seconds = tick(domain);
  const uint64_t watts = number(domain) == 0 ? 300 : 120;
  e->timestamp = 500000000 + seconds * 1000000;  // microseconds
  e->energy = seconds * watts * 1000000;         // microjoules
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceEnumFrequencyDomains(zes_device_handle_t device, uint32_t* count,
                                          zes_freq_handle_t* domains) {
  return enumerate(device, kFrequency, 2, count, domains);
}

ze_result_t zesFrequencyGetProperties(zes_freq_handle_t domain, zes_freq_properties_t* p) {
  if (lost(domain)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (p->stype != ZES_STRUCTURE_TYPE_FREQ_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const bool first = device_of(domain) == 0;
  // GPU 0: its GPU domain and its memory's; GPU 1: one GPU domain per tile.
  p->type = first && number(domain) == 1 ? ZES_FREQ_DOMAIN_MEMORY : ZES_FREQ_DOMAIN_GPU;
  p->onSubdevice = !first;
  p->subdeviceId = first ? 0 : number(domain);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesFrequencyGetState(zes_freq_handle_t domain, zes_freq_state_t* s) {
  if (lost(domain)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (s->stype != ZES_STRUCTURE_TYPE_FREQ_STATE) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const double gpu0[2] = {1550.0, 3200.0}, gpu1[2] = {2100.0, 2000.0};
  s->actual = device_of(domain) == 0 ? gpu0[number(domain)] : gpu1[number(domain)];
  s->request = s->tdp = s->efficient = s->currentVoltage = -1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceProcessesGetState(zes_device_handle_t device, uint32_t* count,
                                       zes_process_state_t* processes) {
  if (!sysman) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (lost(device)) return ZE_RESULT_ERROR_DEVICE_LOST;
  const uint32_t n = device_of(device) == 0 ? 1 : 0;
  if (*count == 0 || !processes) {
    *count = n;
    return ZE_RESULT_SUCCESS;
  }
  if (*count < n) return ZE_RESULT_ERROR_INVALID_SIZE;
  *count = n;
  if (n == 1) {
    if (processes[0].stype != ZES_STRUCTURE_TYPE_PROCESS_STATE) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    processes[0].processId = static_cast<uint32_t>(getpid());
    processes[0].memSize = 6ull << 30;
    processes[0].sharedSize = 0;
    processes[0].engines = ZES_ENGINE_TYPE_FLAG_COMPUTE;
  }
  return ZE_RESULT_SUCCESS;
}

}  // extern "C"
