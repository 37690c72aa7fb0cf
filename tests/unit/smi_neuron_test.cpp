// prism smi's Neuron source: reports of neuron-monitor read into devices (utilization over each
// device's NeuronCores, memory from the applications' per-core usage, the applications as
// processes), bad reports, and the source running a stand-in neuron-monitor
// (tests/smi/fake_neuron_monitor.sh): readings, a monitor that stops, one that prints a line
// that is not a report, one without a driver, and one that is not there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

const char* const kReport = R"({"neuron_runtime_data": [
  {"pid": 4242, "error": "", "report": {
    "neuroncore_counters": {"neuroncores_in_use": {"0": {"neuroncore_utilization": 50.0},
                                                   "1": {"neuroncore_utilization": 30.0}}},
    "memory_used": {"neuron_runtime_used_bytes": {"neuron_device": 3000000000, "usage_breakdown":
      {"neuroncore_memory_usage": {"0": {"constants": 1000000000, "tensors": 1500000000},
                                   "1": {"tensors": 500000000}}}}}}},
  {"pid": 1, "error": "nrt: lost a core", "report": {
    "neuroncore_counters": {"neuroncores_in_use": {"2": {"neuroncore_utilization": 90.0},
                                                   "9": {"neuroncore_utilization": 90.0}}}}}],
  "neuron_hardware_info": {"neuron_device_type": "trainium2", "neuron_device_count": 2,
                           "neuroncore_per_device_count": 2,
                           "neuron_device_memory_size": 34359738368, "error": ""}})";

TEST(SmiNeuron, AReportsDevicesCoresMemoryAndApplications) {
  std::string line = kReport;
  for (char& c : line) c = c == '\n' ? ' ' : c;
  std::vector<Device> d = neuron_devices(line);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].source, "neuron");
  EXPECT_EQ(d[0].name, "AWS trainium2");
  EXPECT_DOUBLE_EQ(*d[0].utilization, 0.4);  // (50 % + 30 %) over the device's two cores
  EXPECT_EQ(d[0].memory_used, 3000000000u);
  EXPECT_EQ(d[0].memory_total, 34359738368u);
  ASSERT_EQ(d[0].processes.size(), 1u);
  EXPECT_EQ(d[0].processes[0].pid, 4242);
  EXPECT_EQ(d[0].processes[0].memory_bytes, 3000000000u);
  EXPECT_TRUE(d[0].errors.empty());
  // Device 1: one core of two busy; core 9 is past the devices' cores and left out.
  EXPECT_EQ(d[1].index, 1);
  EXPECT_DOUBLE_EQ(*d[1].utilization, 0.45);
  EXPECT_EQ(d[1].memory_used, 0u);
  ASSERT_EQ(d[1].processes.size(), 1u);
  EXPECT_EQ(d[1].processes[0].pid, 1);
  EXPECT_FALSE(d[1].processes[0].memory_bytes);
  EXPECT_EQ(d[1].errors, std::vector<std::string>{"pid 1: nrt: lost a core"});
  EXPECT_FALSE(d[0].temperature_c);  // neuron-monitor reports none
}

TEST(SmiNeuron, BadReportsAreOneRowSayingWhy) {
  for (const char* bad : {"", "not json", "[1, 2]", "{}", R"({"neuron_hardware_info": 7})",
                          R"({"neuron_hardware_info": {"neuron_device_count": -2,
                              "neuroncore_per_device_count": 2}})",
                          R"({"neuron_hardware_info": {"neuron_device_count": 1e12,
                              "neuroncore_per_device_count": 2}})",
                          R"({"neuron_runtime_data": 5, "neuron_hardware_info": {
                              "neuron_device_count": 1, "neuroncore_per_device_count": 1}})"}) {
    SCOPED_TRACE(bad);
    std::vector<Device> d = neuron_devices(bad);
    ASSERT_FALSE(d.empty());
    if (d.size() == 1 && !d[0].errors.empty()) {
      EXPECT_EQ(d[0].errors.size(), 1u);
    } else {
      EXPECT_EQ(d.size(), 1u);  // the last: one device, no application
      EXPECT_TRUE(d[0].processes.empty());
    }
  }
  EXPECT_EQ(neuron_devices(R"({"neuron_hardware_info": {"neuron_device_count": 0,
                              "neuroncore_per_device_count": 0, "error": "no driver"}})")[0]
                .errors,
            std::vector<std::string>{"hardware: no driver"});
}

struct FakeMonitor {
  explicit FakeMonitor(const char* script = "") {
    setenv("PRISM_NEURON_MONITOR", PRISM_FAKE_NEURON_MONITOR, 1);
    setenv("FAKE_NEURON_MONITOR", script, 1);
  }
  ~FakeMonitor() {
    unsetenv("PRISM_NEURON_MONITOR");
    unsetenv("FAKE_NEURON_MONITOR");
  }
};

TEST(SmiNeuron, TheSourceReadsWhatTheMonitorReports) {
  FakeMonitor fake;
  std::string absent;
  auto source = neuron_source(&absent);
  ASSERT_TRUE(source) << absent;
  EXPECT_EQ(source->name(), "neuron");
  for (int sample = 0; sample < 2; ++sample) {
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].name, "AWS trainium2");
    EXPECT_DOUBLE_EQ(*d[0].utilization, 0.4);
    EXPECT_EQ(d[0].memory_used, 3000000000u);
    ASSERT_EQ(d[0].processes.size(), 1u);
    EXPECT_EQ(d[0].processes[0].pid, getpid());
    EXPECT_EQ(d[0].processes[0].name, "prism-unit-test");
    EXPECT_DOUBLE_EQ(*d[1].utilization, 0.45);
    EXPECT_EQ(d[1].memory_used, 2000000000u);
    EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
  }
}

TEST(SmiNeuron, AMonitorThatStopsOrMisprintsIsSaid) {
  {
    FakeMonitor fake("exits");
    auto source = neuron_source();
    ASSERT_TRUE(source);
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u);
    for (int i = 0; i < 50 && d[0].errors.empty(); ++i) {  // it exits right after its report
      usleep(20000);
      d = source->sample();
    }
    EXPECT_EQ(d[0].errors,
              std::vector<std::string>{"neuron-monitor exited with status 3; its last report"});
    EXPECT_DOUBLE_EQ(*d[0].utilization, 0.4);
  }
  {
    FakeMonitor fake("garbage");
    auto source = neuron_source();
    ASSERT_TRUE(source);
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u) << (d[0].errors.empty() ? "" : d[0].errors[0]);
  }
  {
    FakeMonitor fake("no-driver");
    auto source = neuron_source();
    ASSERT_TRUE(source);
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].errors,
              std::vector<std::string>{"hardware: open /dev/neuron0: no such file or directory"});
  }
}

TEST(SmiNeuron, AMissingMonitorIsAbsent) {
  setenv("PRISM_NEURON_MONITOR", "/nonexistent/neuron-monitor", 1);
  std::string absent;
  EXPECT_FALSE(neuron_source(&absent));
  unsetenv("PRISM_NEURON_MONITOR");
  EXPECT_EQ(absent, "neuron: /nonexistent/neuron-monitor not found or not executable");
}

}  // namespace
}  // namespace prism::smi
