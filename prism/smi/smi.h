// `prism smi`'s model of a fleet: the devices each source sees, sampled again and again. A
// source keeps what it needs between samples (a CPU's tick counters, an energy counter), so
// rates come from the difference of two samples; the first sample of a source has none.
//
// Every reading is optional: a source reports what it could not read in `errors`, one line
// each, and the other readings stay. A source that cannot run at all (a vendor library that is
// absent, or fails to start) is reported as absent, with why, and never stops the others.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prism::smi {

struct Process {
  int64_t pid = 0;
  std::string name;
  std::optional<uint64_t> memory_bytes;
  std::string doing;  // what a prism process says it does there (activity.h); empty: unknown
};

struct Device {
  std::string source;                    // "cpu", ...
  int index = 0;                         // within the source
  std::string name;                      // the model, as the vendor names it
  std::optional<double> utilization;     // busy share of the last interval, 0..1
  std::vector<double> core_utilization;  // a CPU's, per core (as the system numbers them)
  std::optional<uint64_t> memory_used, memory_total;  // bytes
  std::optional<double> temperature_c;
  std::optional<double> power_w;    // averaged over the last interval
  std::optional<double> clock_mhz;  // a CPU's: the mean of its cores' current clocks
  std::vector<Process> processes;
  std::vector<std::string> errors;  // what could not be read, one line each
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string name() const = 0;
  // The devices now. Readings that are rates (utilization, power) need a previous sample.
  virtual std::vector<Device> sample() = 0;
};

// The CPU: per-core utilization from /proc/stat, memory from /proc/meminfo, clocks from
// cpufreq (else /proc/cpuinfo), the package temperature from hwmon (coretemp, k10temp) or the
// thermal zones, package power from RAPL's energy counters under /sys/class/powercap where
// readable (Linux lets only root read them since 5.10). `root` is where / is: tests give a
// directory of their own.
std::unique_ptr<Source> cpu_source(std::string root = "/");

// prism's OpenCL and (unless `cuda` is false: NVML shows those devices) CUDA platforms'
// devices, as the platforms see them (name and memory in all; no rates: those come from the
// vendors' monitoring libraries). A platform that is not usable here is added to `absent` as
// "name: why", when given.
std::vector<std::unique_ptr<Source>> platform_sources(bool cuda = true,
                                                      std::vector<std::string>* absent = nullptr);

// NVIDIA GPUs through NVML (libnvidia-ml.so.1, or PRISM_NVML_LIBRARY's path): utilization,
// memory, temperature, power, SM clock and the compute processes with their memory. Null when
// the library is absent, lacks a function prism calls, or fails to start; `absent` then says
// why ("nvml: ...").
std::unique_ptr<Source> nvml_source(std::string* absent = nullptr);

// Intel GPUs through Level Zero Sysman (libze_loader.so.1, or PRISM_LEVEL_ZERO_LIBRARY's
// path): utilization of the compute engines and power, both from counters over the interval,
// memory, the GPU temperature, the GPU clock and the processes with their memory. Null when
// the library is absent, lacks a function prism calls, or fails to start; `absent` then says
// why ("level-zero: ...").
std::unique_ptr<Source> level_zero_source(std::string* absent = nullptr);

// AMD GPUs through ROCm SMI (librocm_smi64: PRISM_ROCM_SMI_LIBRARY's path, else Debian's and
// ROCm's sonames): utilization, VRAM, temperature (edge, else hotspot), power, system clock and
// the compute processes with their VRAM. Null when the library is absent, lacks a function
// prism calls, or fails to start; `absent` then says why ("rocm-smi: ...").
std::unique_ptr<Source> rocm_smi_source(std::string* absent = nullptr);

// AWS Trainium and Inferentia through neuron-monitor (PRISM_NEURON_MONITOR's path, else
// /opt/aws/neuron/bin's or PATH's), started by the source with a configuration of its own and
// read as it reports, once a second: per device the NeuronCores' utilization, device memory
// used (the applications' per-core usage) and total, and the Neuron applications with their
// memory there. Null when neuron-monitor is not there or cannot start; `absent` says why.
std::unique_ptr<Source> neuron_source(std::string* absent = nullptr);
// The devices of one neuron-monitor report (a line of its JSON) as the source shows them.
std::vector<Device> neuron_devices(const std::string& report_line);

// Google's Cloud TPUs through libtpu's runtime metrics, which a program using the TPU serves
// over gRPC on localhost:8431 (or the ports TPU_RUNTIME_METRICS_PORTS lists): per device, the
// TensorCores' duty cycle as utilization, HBM used and total, and the processes using it (the
// one serving the metrics, else those with the chip's /dev node open); the chips' kind from
// their PCI ids. Null when nothing listens on those ports (no program uses the TPU); `absent`
// then says so ("tpu: ..."), with the chips sysfs shows. `root` is where / is (/proc, /sys):
// tests give a directory of their own.
std::unique_ptr<Source> tpu_source(std::string* absent = nullptr, std::string root = "/");

// The values of one of libtpu's MetricResponse messages (its bytes, as the runtime sends them)
// by device id, as the TPU source reads them; nothing when they do not parse. Values without a
// device or a finite number are left out.
std::optional<std::map<int64_t, double>> tpu_metric_values(std::string_view response);

// A sample as text: one line per device and a line of per-core utilization for a CPU, what
// could not be read under its device; `width` is the terminal's.
// `absent`: the sources that could not run, as "name: why", listed at the end.
std::string table(const std::vector<Device>& devices, int width = 80,
                  const std::vector<std::string>& absent = {});

// A sample as one JSON object on one line (docs/smi.md has its schema): {"time": seconds since
// the epoch, "devices": [...], "absent": ["name: why", ...]}.
std::string json(const std::vector<Device>& devices, double time,
                 const std::vector<std::string>& absent = {});

// A sample in Prometheus's text format (docs/smi.md names the metrics): gauges in base units
// (ratios, bytes, degrees Celsius, watts, hertz), labelled by source, index and, on
// prism_device_info, name; a reading that is absent is left out.
std::string prometheus(const std::vector<Device>& devices);

// The last samples of each device's utilization and memory, for the live view.
class History {
 public:
  explicit History(size_t keep = 240) : keep_(keep) {}
  void add(const std::vector<Device>& devices);
  // The device's values, oldest first (a missing reading is NaN).
  const std::vector<double>& utilization(const Device& d) const;
  const std::vector<double>& memory(const Device& d) const;

 private:
  struct Series {
    std::vector<double> utilization, memory;
  };
  static std::string key(const Device& d) { return d.source + ":" + std::to_string(d.index); }
  size_t keep_;
  std::vector<std::pair<std::string, Series>> series_;
  Series empty_;
};

// One screen of the live view (`prism smi --watch`), `width` x `height` characters at most:
// a title line, the table, and per device its utilization and memory over the last samples as
// rows of block characters (newest on the right). `title` goes on the first line.
std::string frame(const std::vector<Device>& devices, const History& history,
                  const std::string& title, int width, int height,
                  const std::vector<std::string>& absent = {});

}  // namespace prism::smi
