// Intel GPUs through Level Zero Sysman (smi.h): the Level Zero loader (libze_loader.so.1), which
// Intel's compute runtime and Debian's libze1 install, loaded with dlopen so that prism runs
// where it is absent, and built against the vendor's own level_zero/zes_api.h (Debian's
// libze-dev) where the build finds it.
//
// The header is Level Zero 1.4's: Sysman is reached through the core API's device handles, and
// only when ZES_ENABLE_SYSMAN=1 is in the environment when zeInit runs (zesInit, which needs
// no variable, came with 1.5).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "prism/smi/smi.h"
#include "prism/smi/vendor.h"

#if PRISM_WITH_LEVEL_ZERO
#include <level_zero/zes_api.h>
#endif

namespace prism::smi {

#if PRISM_WITH_LEVEL_ZERO
namespace {

// The functions prism calls, typed as ze_api.h and zes_api.h declare them.
struct LevelZero {
  decltype(&zeInit) init = nullptr;
  decltype(&zeDriverGet) drivers = nullptr;
  decltype(&zeDeviceGet) devices = nullptr;
  decltype(&zeDeviceGetProperties) core_properties = nullptr;
  decltype(&zesDeviceGetProperties) properties = nullptr;
  decltype(&zesDeviceEnumEngineGroups) engines = nullptr;
  decltype(&zesEngineGetProperties) engine_properties = nullptr;
  decltype(&zesEngineGetActivity) engine_activity = nullptr;
  decltype(&zesDeviceEnumMemoryModules) memories = nullptr;
  decltype(&zesMemoryGetProperties) memory_properties = nullptr;
  decltype(&zesMemoryGetState) memory_state = nullptr;
  decltype(&zesDeviceEnumTemperatureSensors) sensors = nullptr;
  decltype(&zesTemperatureGetProperties) sensor_properties = nullptr;
  decltype(&zesTemperatureGetState) temperature = nullptr;
  decltype(&zesDeviceEnumPowerDomains) power_domains = nullptr;
  decltype(&zesPowerGetProperties) power_properties = nullptr;
  decltype(&zesPowerGetEnergyCounter) energy = nullptr;
  decltype(&zesDeviceEnumFrequencyDomains) frequency_domains = nullptr;
  decltype(&zesFrequencyGetProperties) frequency_properties = nullptr;
  decltype(&zesFrequencyGetState) frequency = nullptr;
  decltype(&zesDeviceProcessesGetState) processes = nullptr;
};

// What a result means, with its name in the header (Level Zero 1.4 has no call that says it).
std::string error(ze_result_t r) {
  switch (r) {
    case ZE_RESULT_ERROR_DEVICE_LOST:
      return "device lost: hung, reset or removed (ZE_RESULT_ERROR_DEVICE_LOST)";
    case ZE_RESULT_ERROR_UNINITIALIZED:
      return "not initialized (ZE_RESULT_ERROR_UNINITIALIZED)";
    case ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS:
      return "permission denied (ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)";
    case ZE_RESULT_ERROR_NOT_AVAILABLE:
      return "not available now (ZE_RESULT_ERROR_NOT_AVAILABLE)";
    case ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET:
      return "the device needs a reset (ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET)";
    case ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE:
      return "the device is in a low power state (ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE)";
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
      return "out of host memory (ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)";
    case ZE_RESULT_ERROR_INVALID_SIZE:
      return "the count changed while reading (ZE_RESULT_ERROR_INVALID_SIZE)";
    case ZE_RESULT_ERROR_UNKNOWN:
      return "unknown error (ZE_RESULT_ERROR_UNKNOWN)";
    default: {
      char code[32];
      std::snprintf(code, sizeof code, "ze_result_t 0x%x", static_cast<unsigned>(r));
      return code;
    }
  }
}

// The handles of one kind of a device's components (engine groups, sensors, ...): the count
// first, then the handles.
template <typename Handle, typename Enum>
ze_result_t enumerate(Enum fn, zes_device_handle_t device, std::vector<Handle>& handles) {
  uint32_t n = 0;
  if (ze_result_t r = fn(device, &n, nullptr); r != ZE_RESULT_SUCCESS) return r;
  handles.resize(n);
  if (n == 0) return ZE_RESULT_SUCCESS;
  ze_result_t r = fn(device, &n, handles.data());
  handles.resize(std::min<size_t>(n, handles.size()));
  return r;
}

// A GPU as found at the start, and the counters of its last sample, per component, for the
// rates.
struct Gpu {
  ze_device_handle_t handle;
  std::string name;
  std::map<zes_engine_handle_t, zes_engine_stats_t> activity;
  std::map<zes_pwr_handle_t, zes_power_energy_counter_t> energy;
};

class LevelZeroSource final : public Source {
 public:
  LevelZeroSource(LevelZero api, std::vector<Gpu> gpus) : api_(api), gpus_(std::move(gpus)) {}
  // The library stays loaded (never dlclose'd): Level Zero 1.4 has no call that undoes
  // zeInit, and unloading the loader under a started driver is not safe.
  std::string name() const override { return "level-zero"; }

  std::vector<Device> sample() override {
    std::vector<Device> devices;
    for (size_t i = 0; i < gpus_.size(); ++i) devices.push_back(device(i));
    return devices;
  }

 private:
  // One device's readings, each on its own: a reading the device does not support is left
  // out, any other failure is said, and the other readings stay.
  Device device(size_t index) {
    Gpu& gpu = gpus_[index];
    const zes_device_handle_t h = gpu.handle;
    Device d;
    d.source = "level-zero";
    d.index = static_cast<int>(index);
    d.name = gpu.name;
    // A device that is gone (since the last sample, or during this one): its row says so,
    // once, with no readings, and its rates start over should it answer again.
    auto gone = [&] {
      gpu.activity.clear();
      gpu.energy.clear();
      Device row;
      row.source = d.source;
      row.index = d.index;
      row.name = gpu.name;
      row.errors.push_back(error(ZE_RESULT_ERROR_DEVICE_LOST));
      return row;
    };
    bool lost = false;
    // A reading's failure: `what` and why, unless the device does not support it.
    auto check = [&](ze_result_t r, const char* what) {
      if (r == ZE_RESULT_SUCCESS) return true;
      if (r == ZE_RESULT_ERROR_DEVICE_LOST) {
        lost = true;
      } else if (r != ZE_RESULT_ERROR_UNSUPPORTED_FEATURE) {
        d.errors.push_back(std::string(what) + ": " + error(r));
      }
      return false;
    };
    zes_device_properties_t props{};
    props.stype = ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    if (check(api_.properties(h, &props), "name") && props.core.name[0]) {
      gpu.name = props.core.name;
      d.name = gpu.name;
    }
    if (lost) return gone();
    if (std::optional<double> u; check(utilization(gpu, u), "utilization")) d.utilization = u;
    if (uint64_t used = 0, total = 0; check(memory(h, used, total), "memory") && total > 0) {
      d.memory_used = used;
      d.memory_total = total;
    }
    if (std::optional<double> t; check(temperature(h, t), "temperature")) d.temperature_c = t;
    if (std::optional<double> p; check(power(gpu, p), "power")) d.power_w = p;
    if (std::optional<double> c; check(clock(h, c), "clock")) d.clock_mhz = c;
    check(processes(h, d.processes), "processes");
    return lost ? gone() : d;
  }

  // The busy share of the compute engines (all engines where the device does not group its
  // compute ones) since the last sample: active time over elapsed time, summed over the
  // groups that count (one per tile where there is none for the whole device). Empty on the
  // first sample.
  ze_result_t utilization(Gpu& gpu, std::optional<double>& share) const {
    std::vector<zes_engine_handle_t> engines;
    if (ze_result_t r = enumerate(api_.engines, gpu.handle, engines); r != ZE_RESULT_SUCCESS) {
      return r;
    }
    std::vector<std::pair<zes_engine_handle_t, zes_engine_properties_t>> groups;
    for (zes_engine_handle_t e : engines) {
      zes_engine_properties_t p{};
      p.stype = ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES;
      if (ze_result_t r = api_.engine_properties(e, &p); r != ZE_RESULT_SUCCESS) return r;
      groups.emplace_back(e, p);
    }
    std::vector<zes_engine_handle_t> chosen;
    for (zes_engine_group_t type : {ZES_ENGINE_GROUP_COMPUTE_ALL, ZES_ENGINE_GROUP_ALL}) {
      for (bool tiles : {false, true}) {
        for (const auto& [e, p] : groups) {
          if (p.type == type && static_cast<bool>(p.onSubdevice) == tiles) chosen.push_back(e);
        }
        if (!chosen.empty()) break;
      }
      if (!chosen.empty()) break;
    }
    uint64_t active = 0, elapsed = 0;
    std::map<zes_engine_handle_t, zes_engine_stats_t> now;
    for (zes_engine_handle_t e : chosen) {
      zes_engine_stats_t s{};
      if (ze_result_t r = api_.engine_activity(e, &s); r != ZE_RESULT_SUCCESS) return r;
      now[e] = s;
      auto last = gpu.activity.find(e);
      if (last != gpu.activity.end() && s.timestamp > last->second.timestamp) {
        active += s.activeTime - std::min(s.activeTime, last->second.activeTime);
        elapsed += s.timestamp - last->second.timestamp;
      }
    }
    gpu.activity = std::move(now);
    if (elapsed > 0) share = std::min(1.0, static_cast<double>(active) / elapsed);
    return ZE_RESULT_SUCCESS;
  }

  // The device's own memory (not the system memory an integrated GPU shares), over its
  // modules (one per tile): allocatable size less what is free.
  ze_result_t memory(zes_device_handle_t h, uint64_t& used, uint64_t& total) const {
    std::vector<zes_mem_handle_t> modules;
    if (ze_result_t r = enumerate(api_.memories, h, modules); r != ZE_RESULT_SUCCESS) return r;
    for (zes_mem_handle_t m : modules) {
      zes_mem_properties_t p{};
      p.stype = ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
      if (ze_result_t r = api_.memory_properties(m, &p); r != ZE_RESULT_SUCCESS) return r;
      if (p.location != ZES_MEM_LOC_DEVICE) continue;
      zes_mem_state_t s{};
      s.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
      if (ze_result_t r = api_.memory_state(m, &s); r != ZE_RESULT_SUCCESS) return r;
      total += s.size;
      used += s.size - std::min(s.free, s.size);
    }
    return ZE_RESULT_SUCCESS;
  }

  // The GPU sensors' hottest (each already the hottest of its part, one per tile or one for
  // the device).
  ze_result_t temperature(zes_device_handle_t h, std::optional<double>& celsius) const {
    std::vector<zes_temp_handle_t> sensors;
    if (ze_result_t r = enumerate(api_.sensors, h, sensors); r != ZE_RESULT_SUCCESS) return r;
    for (zes_temp_handle_t s : sensors) {
      zes_temp_properties_t p{};
      p.stype = ZES_STRUCTURE_TYPE_TEMP_PROPERTIES;
      if (ze_result_t r = api_.sensor_properties(s, &p); r != ZE_RESULT_SUCCESS) return r;
      if (p.type != ZES_TEMP_SENSORS_GPU) continue;
      double t = 0;
      if (ze_result_t r = api_.temperature(s, &t); r != ZE_RESULT_SUCCESS) return r;
      celsius = std::max(celsius.value_or(t), t);
    }
    return ZE_RESULT_SUCCESS;
  }

  // Watts since the last sample from the energy counters (microjoules per microsecond): the
  // device's own domains, else its tiles' summed. Empty on the first sample.
  ze_result_t power(Gpu& gpu, std::optional<double>& watts) const {
    std::vector<zes_pwr_handle_t> domains;
    if (ze_result_t r = enumerate(api_.power_domains, gpu.handle, domains);
        r != ZE_RESULT_SUCCESS) {
      return r;
    }
    std::vector<zes_pwr_handle_t> device, tiles;
    for (zes_pwr_handle_t p : domains) {
      zes_power_properties_t props{};
      props.stype = ZES_STRUCTURE_TYPE_POWER_PROPERTIES;
      if (ze_result_t r = api_.power_properties(p, &props); r != ZE_RESULT_SUCCESS) return r;
      (props.onSubdevice ? tiles : device).push_back(p);
    }
    std::map<zes_pwr_handle_t, zes_power_energy_counter_t> now;
    for (zes_pwr_handle_t p : device.empty() ? tiles : device) {
      zes_power_energy_counter_t e{};
      if (ze_result_t r = api_.energy(p, &e); r != ZE_RESULT_SUCCESS) return r;
      now[p] = e;
      auto last = gpu.energy.find(p);
      if (last != gpu.energy.end() && e.timestamp > last->second.timestamp &&
          e.energy >= last->second.energy) {
        watts = watts.value_or(0) + static_cast<double>(e.energy - last->second.energy) /
                                        (e.timestamp - last->second.timestamp);
      }
    }
    gpu.energy = std::move(now);
    return ZE_RESULT_SUCCESS;
  }

  // The GPU frequency domains' actual clock (the mean over tiles where each has its own);
  // a negative value is one the device does not know.
  ze_result_t clock(zes_device_handle_t h, std::optional<double>& mhz) const {
    std::vector<zes_freq_handle_t> domains;
    if (ze_result_t r = enumerate(api_.frequency_domains, h, domains); r != ZE_RESULT_SUCCESS) {
      return r;
    }
    double sum = 0;
    int n = 0;
    for (zes_freq_handle_t f : domains) {
      zes_freq_properties_t p{};
      p.stype = ZES_STRUCTURE_TYPE_FREQ_PROPERTIES;
      if (ze_result_t r = api_.frequency_properties(f, &p); r != ZE_RESULT_SUCCESS) return r;
      if (p.type != ZES_FREQ_DOMAIN_GPU) continue;
      zes_freq_state_t s{};
      s.stype = ZES_STRUCTURE_TYPE_FREQ_STATE;
      if (ze_result_t r = api_.frequency(f, &s); r != ZE_RESULT_SUCCESS) return r;
      if (s.actual < 0) continue;
      sum += s.actual;
      ++n;
    }
    if (n > 0) mhz = sum / n;
    return ZE_RESULT_SUCCESS;
  }

  // The processes with the device open: the count first, then as many as there are (a few
  // more, for those that start in between).
  ze_result_t processes(zes_device_handle_t h, std::vector<Process>& out) const {
    uint32_t n = 0;
    if (ze_result_t r = api_.processes(h, &n, nullptr); r != ZE_RESULT_SUCCESS) return r;
    if (n == 0) return ZE_RESULT_SUCCESS;
    zes_process_state_t blank{};
    blank.stype = ZES_STRUCTURE_TYPE_PROCESS_STATE;
    std::vector<zes_process_state_t> states(n + 8, blank);
    n = static_cast<uint32_t>(states.size());
    if (ze_result_t r = api_.processes(h, &n, states.data()); r != ZE_RESULT_SUCCESS) return r;
    for (uint32_t i = 0; i < n && i < states.size(); ++i) {
      Process p;
      p.pid = states[i].processId;
      p.name = vendor::process_name(states[i].processId);
      p.memory_bytes = states[i].memSize;
      out.push_back(std::move(p));
    }
    return ZE_RESULT_SUCCESS;
  }

  LevelZero api_;
  std::vector<Gpu> gpus_;
};

}  // namespace

std::unique_ptr<Source> level_zero_source(std::string* absent) {
  const char* env = std::getenv("PRISM_LEVEL_ZERO_LIBRARY");
  const std::string path = env && *env ? env : "libze_loader.so.1";
  auto fail = [&](const std::string& why) -> std::unique_ptr<Source> {
    if (absent) *absent = "level-zero: " + why;
    return nullptr;
  };
  vendor::Library library(path);
  if (!library) return fail(path + " not found (Debian's libze1 installs it)");
  LevelZero api;
  auto load = [&](auto& fn, const char* symbol) { library.load(fn, symbol); };
  load(api.init, "zeInit");
  load(api.drivers, "zeDriverGet");
  load(api.devices, "zeDeviceGet");
  load(api.core_properties, "zeDeviceGetProperties");
  load(api.properties, "zesDeviceGetProperties");
  load(api.engines, "zesDeviceEnumEngineGroups");
  load(api.engine_properties, "zesEngineGetProperties");
  load(api.engine_activity, "zesEngineGetActivity");
  load(api.memories, "zesDeviceEnumMemoryModules");
  load(api.memory_properties, "zesMemoryGetProperties");
  load(api.memory_state, "zesMemoryGetState");
  load(api.sensors, "zesDeviceEnumTemperatureSensors");
  load(api.sensor_properties, "zesTemperatureGetProperties");
  load(api.temperature, "zesTemperatureGetState");
  load(api.power_domains, "zesDeviceEnumPowerDomains");
  load(api.power_properties, "zesPowerGetProperties");
  load(api.energy, "zesPowerGetEnergyCounter");
  load(api.frequency_domains, "zesDeviceEnumFrequencyDomains");
  load(api.frequency_properties, "zesFrequencyGetProperties");
  load(api.frequency, "zesFrequencyGetState");
  load(api.processes, "zesDeviceProcessesGetState");
  if (!library.missing().empty()) {
    return fail(path + " has no " + library.missing() + " (not a Level Zero loader?)");
  }
  // Sysman answers only when this is set as the drivers start (a value the user set to 0
  // would leave every reading failing).
  setenv("ZES_ENABLE_SYSMAN", "1", 1);
  if (ze_result_t r = api.init(ZE_INIT_FLAG_GPU_ONLY); r != ZE_RESULT_SUCCESS) {
    // The loader's answer when it finds no driver for a GPU.
    if (r == ZE_RESULT_ERROR_UNINITIALIZED) {
      return fail("zeInit found no GPU driver (ZE_RESULT_ERROR_UNINITIALIZED)");
    }
    return fail("zeInit failed: " + error(r));
  }
  // The GPUs, in the drivers' order, found once: a handle stays the device's for the
  // process's life, and one that is lost later says so on its row. From here on the library
  // stays loaded (LevelZeroSource says why).
  library.release();
  std::vector<Gpu> gpus;
  uint32_t n = 0;
  ze_result_t r = api.drivers(&n, nullptr);
  std::vector<ze_driver_handle_t> drivers(n);
  if (r == ZE_RESULT_SUCCESS && n > 0) r = api.drivers(&n, drivers.data());
  for (uint32_t i = 0; r == ZE_RESULT_SUCCESS && i < n && i < drivers.size(); ++i) {
    uint32_t count = 0;
    r = api.devices(drivers[i], &count, nullptr);
    std::vector<ze_device_handle_t> handles(count);
    if (r == ZE_RESULT_SUCCESS && count > 0) r = api.devices(drivers[i], &count, handles.data());
    for (uint32_t j = 0; r == ZE_RESULT_SUCCESS && j < count && j < handles.size(); ++j) {
      ze_device_properties_t p{};
      p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
      r = api.core_properties(handles[j], &p);
      if (r == ZE_RESULT_SUCCESS && p.type == ZE_DEVICE_TYPE_GPU) {
        gpus.push_back({handles[j], p.name[0] ? p.name : "Intel GPU", {}, {}});
      }
    }
  }
  if (r != ZE_RESULT_SUCCESS) return fail("cannot list the devices: " + error(r));
  if (gpus.empty()) return fail("no GPU among the Level Zero drivers' devices");
  return std::make_unique<LevelZeroSource>(api, std::move(gpus));
}

#else  // built without level_zero/zes_api.h

std::unique_ptr<Source> level_zero_source(std::string* absent) {
  if (absent) {
    *absent =
        "level-zero: this prism was built without level_zero/zes_api.h (scripts/setup.sh "
        "installs it)";
  }
  return nullptr;
}

#endif

}  // namespace prism::smi
