// prism smi's CPU source on a made-up /proc and /sys (the figures are known, so the rates can
// be checked), on files that cannot be read, and on this machine's own; its table and JSON.
#include "prism/smi/smi.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "prism/backends/registry.h"
#include "prism/smi/activity.h"

namespace prism::smi {
namespace {

namespace fs = std::filesystem;

class FakeRoot {
 public:
  FakeRoot() : root_(fs::temp_directory_path() / ("prism-smi-" + std::to_string(getpid()))) {
    fs::remove_all(root_);
    write("proc/cpuinfo",
          "processor\t: 0\nmodel name\t: Test CPU 9000\ncpu MHz\t\t: 2000.000\n\n"
          "processor\t: 1\nmodel name\t: Test CPU 9000\ncpu MHz\t\t: 3000.000\n");
    write("proc/meminfo", "MemTotal:       16384 kB\nMemFree:  1 kB\nMemAvailable:    4096 kB\n");
    // Two cores; ticks: user nice system idle iowait irq softirq steal guest guest_nice.
    stat(0, 0);
    write("sys/class/hwmon/hwmon0/name", "acpitz\n");
    write("sys/class/hwmon/hwmon1/name", "coretemp\n");
    write("sys/class/hwmon/hwmon1/temp1_input", "47000\n");
    write("sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    write("sys/class/powercap/intel-rapl:0/max_energy_range_uj", "262143328850\n");
    write("sys/class/powercap/intel-rapl:0:0/energy_uj", "5\n");  // a subdomain: not added
  }
  ~FakeRoot() { fs::remove_all(root_); }
  std::string path() const { return root_.string(); }

  void write(const std::string& file, const std::string& text) {
    fs::create_directories((root_ / file).parent_path());
    std::ofstream(root_ / file) << text;
  }
  // /proc/stat after core 0 spent `busy0` more busy ticks and core 1 `busy1`, of 100 each.
  void stat(int busy0, int busy1) {
    ticks_ += 100;
    b0_ += busy0;
    b1_ += busy1;
    auto line = [&](const char* name, int64_t busy, int64_t total) {
      return fmt_line(name, busy, total - busy);
    };
    write("proc/stat", line("cpu", b0_ + b1_, 2 * ticks_) + line("cpu0", b0_, ticks_) +
                           line("cpu1", b1_, ticks_) + "intr 1 2 3\nctxt 5\n");
  }

 private:
  static std::string fmt_line(const char* name, int64_t busy, int64_t idle) {
    // busy split over user and system; idle over idle and iowait; guest counted in user too.
    return std::string(name) + " " + std::to_string(busy - busy / 2) + " 0 " +
           std::to_string(busy / 2) + " " + std::to_string(idle - idle / 4) + " " +
           std::to_string(idle / 4) + " 0 0 0 " + std::to_string(busy / 4) + " 0\n";
  }
  fs::path root_;
  int64_t ticks_ = 1000, b0_ = 100, b1_ = 300;
};

TEST(SmiCpu, ReadingsAndRatesFromProcAndSys) {
  FakeRoot root;
  auto source = cpu_source(root.path());
  std::vector<Device> first = source->sample();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].name, "Test CPU 9000");
  EXPECT_FALSE(first[0].utilization);  // no rates before a second sample
  EXPECT_FALSE(first[0].power_w);
  EXPECT_EQ(first[0].memory_total, 16384u * 1024);
  EXPECT_EQ(first[0].memory_used, (16384u - 4096) * 1024);
  EXPECT_EQ(first[0].temperature_c, 47.0);
  EXPECT_EQ(first[0].clock_mhz, 2500.0);  // no cpufreq here: /proc/cpuinfo's mean
  EXPECT_TRUE(first[0].errors.empty()) << first[0].errors[0];

  root.stat(25, 75);
  root.write("sys/class/powercap/intel-rapl:0/energy_uj", "1500000\n");  // half a joule later
  std::vector<Device> second = source->sample();
  ASSERT_TRUE(second[0].utilization);
  EXPECT_DOUBLE_EQ(*second[0].utilization, 0.5);
  ASSERT_EQ(second[0].core_utilization.size(), 2u);
  EXPECT_DOUBLE_EQ(second[0].core_utilization[0], 0.25);
  EXPECT_DOUBLE_EQ(second[0].core_utilization[1], 0.75);
  ASSERT_TRUE(second[0].power_w);
  EXPECT_GT(*second[0].power_w, 0);

  // The counter wraps: the range is added back.
  root.stat(0, 0);
  root.write("sys/class/powercap/intel-rapl:0/energy_uj", "10\n");
  std::vector<Device> third = source->sample();
  ASSERT_TRUE(third[0].power_w);
  EXPECT_GT(*third[0].power_w, 0);
  EXPECT_DOUBLE_EQ(*third[0].utilization, 0.0);
}

TEST(SmiCpu, WhatCannotBeReadIsSaidAndTheRestStays) {
  FakeRoot root;
  root.write("proc/stat", "intr 1\n");
  fs::remove(fs::path(root.path()) / "proc/meminfo");
  fs::remove(fs::path(root.path()) / "sys/class/hwmon/hwmon1/temp1_input");
  fs::remove(fs::path(root.path()) / "sys/class/powercap/intel-rapl:0/energy_uj");
  auto source = cpu_source(root.path());
  source->sample();
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].name, "Test CPU 9000");
  EXPECT_EQ(d[0].clock_mhz, 2500.0);
  EXPECT_FALSE(d[0].utilization);
  EXPECT_FALSE(d[0].memory_total);
  EXPECT_EQ(d[0].errors, (std::vector<std::string>{
                             "utilization: /proc/stat has no cpu line",
                             "memory: cannot read MemTotal and MemAvailable from /proc/meminfo",
                             "temperature: cannot read coretemp's temp1_input",
                             "power: RAPL's energy counters are not readable (only root may "
                             "read them)"}));
}

TEST(SmiCpu, ThisMachine) {
  auto source = cpu_source();
  source->sample();
  usleep(50000);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(d[0].utilization);
  EXPECT_GE(*d[0].utilization, 0.0);
  EXPECT_LE(*d[0].utilization, 1.0);
  EXPECT_EQ(static_cast<long>(d[0].core_utilization.size()), sysconf(_SC_NPROCESSORS_CONF));
  ASSERT_TRUE(d[0].memory_total);
  EXPECT_GT(*d[0].memory_total, 0u);
  EXPECT_LE(*d[0].memory_used, *d[0].memory_total);
}

#ifdef PRISM_FAKE_NVML
// The NVML source against a fake library (tests/smi/fake_nvml.cpp) with NVML's own header.
struct FakeNvml {
  explicit FakeNvml(const char* script = "") {
    setenv("PRISM_NVML_LIBRARY", PRISM_FAKE_NVML, 1);
    setenv("FAKE_NVML", script, 1);
  }
  ~FakeNvml() {
    unsetenv("PRISM_NVML_LIBRARY");
    unsetenv("FAKE_NVML");
  }
};

TEST(SmiNvml, ReadingsAndProcesses) {
  FakeNvml fake;
  std::string absent;
  auto source = nvml_source(&absent);
  ASSERT_TRUE(source) << absent;
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].source, "nvml");
  EXPECT_EQ(d[0].name, "NVIDIA H200 (fake)");
  EXPECT_EQ(d[0].utilization, 0.37);
  EXPECT_EQ(d[0].memory_used, 12000000000u);
  EXPECT_EQ(d[0].memory_total, 150000000000u);
  EXPECT_EQ(d[0].temperature_c, 41.0);
  EXPECT_EQ(d[0].power_w, 123.456);
  EXPECT_EQ(d[0].clock_mhz, 1980.0);
  ASSERT_EQ(d[0].processes.size(), 1u);
  EXPECT_EQ(d[0].processes[0].pid, getpid());
  EXPECT_EQ(d[0].processes[0].name, "prism-unit-test");  // /proc's comm: 15 characters
  EXPECT_EQ(d[0].processes[0].memory_bytes, 8ull << 30);
  EXPECT_TRUE(d[0].errors.empty());
  // GPU 1 does not support power readings: left out, not an error.
  EXPECT_EQ(d[1].index, 1);
  EXPECT_FALSE(d[1].power_w);
  EXPECT_TRUE(d[1].errors.empty()) << d[1].errors[0];
  EXPECT_TRUE(d[1].processes.empty());
}

TEST(SmiNvml, AGpuLostBetweenSamplesIsSaidAndTheOtherStays) {
  FakeNvml fake("lose-gpu-1");
  auto source = nvml_source();
  ASSERT_TRUE(source);
  ASSERT_EQ(source->sample().size(), 2u);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].name, "NVIDIA H200 (fake)");
  EXPECT_EQ(d[0].utilization, 0.37);
  EXPECT_EQ(d[1].errors, std::vector<std::string>{"device: GPU is lost"});
  EXPECT_FALSE(d[1].utilization);
}

TEST(SmiNvml, ALibraryThatFailsToStartOrIsMissingIsAbsent) {
  {
    FakeNvml fake("init-fails");
    std::string absent;
    EXPECT_FALSE(nvml_source(&absent));
    EXPECT_EQ(absent, "nvml: nvmlInit failed: Driver Not Loaded");
  }
  setenv("PRISM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  std::string absent;
  EXPECT_FALSE(nvml_source(&absent));
  unsetenv("PRISM_NVML_LIBRARY");
  EXPECT_EQ(absent, "nvml: /nonexistent/libnvidia-ml.so.1 not found (NVIDIA's driver installs it)");
}
#endif

// A process's activity file: written (in a directory only its owner reads) while the publisher
// lives, updated, read back, and gone with it; files of processes that ended and files that are
// not activities are skipped.
TEST(SmiActivity, PublishedReadAndRemoved) {
  const fs::path dir = fs::temp_directory_path() / ("prism-activity-" + std::to_string(getpid()));
  fs::remove_all(dir);
  {
    Publisher p({.command = "llm",
                 .model = "hf://org/model",
                 .platform = "opencl",
                 .devices = {1},
                 .memory_bytes = 1000},
                (dir / "activity").string());
    struct stat st {};
    ASSERT_EQ(::stat((dir / "activity").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    p.update(12, 3.5, 2000);
    std::vector<Activity> a = read_activities((dir / "activity").string());
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].pid, getpid());
    EXPECT_EQ(a[0].command, "llm");
    EXPECT_EQ(a[0].model, "hf://org/model");
    EXPECT_EQ(a[0].platform, "opencl");
    EXPECT_EQ(a[0].devices, std::vector<int>{1});
    EXPECT_EQ(a[0].tokens, 12u);
    EXPECT_EQ(a[0].tokens_per_second, 3.5);
    EXPECT_EQ(a[0].memory_bytes, 2000u);
    EXPECT_GT(a[0].updated, 1e9);

    // A process that has ended (a child reaped), and files that are no activities.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    std::ofstream(dir / "activity" / (std::to_string(child) + ".json"))
        << R"({"pid":)" << child
        << R"(,"command":"serve","model":"m","platform":"cpu","devices":[0],"memory_bytes":1,)"
        << R"("tokens":0,"tokens_per_second":0,"updated":1})";
    std::ofstream(dir / "activity" / "junk.json") << "{not json";
    std::ofstream(dir / "activity" / "other.json") << R"({"pid": 1})";
    EXPECT_EQ(read_activities((dir / "activity").string()).size(), 1u);
    // A file left by a process whose pid another has since (here: this one, started at
    // another time) is stale too.
    EXPECT_GT(process_start(getpid()), 0u);
    EXPECT_EQ(a[0].started, process_start(getpid()));
    std::ofstream(dir / "activity" / "reused.json")
        << R"({"pid":)" << getpid()
        << R"(,"command":"serve","model":"m","platform":"cpu","devices":[0],"memory_bytes":1,)"
        << R"("tokens":0,"tokens_per_second":0,"updated":1,"started":)"
        << process_start(getpid()) + 1 << "}";
    EXPECT_EQ(read_activities((dir / "activity").string()).size(), 1u);
  }
  EXPECT_FALSE(fs::exists(dir / "activity" / (std::to_string(getpid()) + ".json")));
  EXPECT_TRUE(read_activities((dir / "nowhere").string()).empty());
  // A directory that cannot be made is no error: nothing is published.
  std::ofstream(dir / "file") << "x";
  Publisher nowhere({.command = "llm"}, (dir / "file" / "activity").string());
  nowhere.update(1, 1, 1);
  fs::remove_all(dir);
}

// The OpenCL platform's device comes from its probe, as the platform itself describes it, so
// that `prism smi` lists it without opening a context on it (on a GPU a context takes memory
// and made the monitor one of the GPU's processes).
TEST(SmiPlatforms, OpenClDeviceListedWithoutOpeningThePlatform) {
  PlatformStatus opencl;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name == "opencl") opencl = s;
  }
  if (!opencl.available) GTEST_SKIP() << "no OpenCL device here: " << opencl.reason;
  ASSERT_EQ(opencl.devices.size(), 1u);
  std::vector<Device> listed;
  for (auto& source : platform_sources(false)) {
    for (Device& d : source->sample()) {
      if (d.source == "opencl") listed.push_back(d);
    }
  }
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, opencl.devices[0].name);
  EXPECT_EQ(listed[0].memory_total, static_cast<uint64_t>(opencl.devices[0].memory_bytes));
  const std::vector<DeviceInfo> opened = get_platform("opencl").devices();
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].name, opencl.devices[0].name);
  EXPECT_EQ(opened[0].memory_bytes, opencl.devices[0].memory_bytes);
}

// Activities join the devices they run on: the CPU platform's and the XLA CPU plugin's the one
// CPU, OpenCL's their device, CUDA's NVML's device where NVML reports it.
TEST(SmiActivity, AttachedToTheirDevices) {
  auto device = [](std::string source, int index) {
    Device d;
    d.source = std::move(source);
    d.index = index;
    return d;
  };
  std::vector<Device> devices{device("cpu", 0), device("opencl", 0), device("opencl", 1),
                              device("nvml", 0)};
  devices[3].processes.push_back({77, "prism", 5ull << 30, {}});  // NVML knows its memory
  std::vector<Activity> a(4);
  a[0] = {.pid = 10,
          .command = "llm",
          .model = "m",
          .platform = "cpu",
          .devices = {0, 1},
          .memory_bytes = 100,
          .tokens = 7,
          .tokens_per_second = 2.5};
  a[1] = {.pid = 11, .command = "serve", .model = "m", .platform = "opencl", .devices = {1}};
  a[2] = {.pid = 77,
          .command = "llm",
          .model = "m",
          .platform = "cuda",
          .devices = {0},
          .memory_bytes = 9};
  a[3] = {.pid = 12, .command = "llm", .model = "m", .platform = "xla-cpu", .devices = {0, 1}};
  attach(devices, a);
  ASSERT_EQ(devices[0].processes.size(), 2u);
  EXPECT_EQ(devices[0].processes[0].pid, 10);
  EXPECT_EQ(devices[0].processes[0].name, "prism llm");
  EXPECT_EQ(devices[0].processes[0].memory_bytes, 100u);
  EXPECT_EQ(devices[0].processes[0].doing, "m on cpu: 7 tokens, 2.5 tok/s");
  EXPECT_EQ(devices[0].processes[1].pid, 12);
  EXPECT_TRUE(devices[1].processes.empty());
  ASSERT_EQ(devices[2].processes.size(), 1u);
  EXPECT_EQ(devices[2].processes[0].name, "prism serve");
  ASSERT_EQ(devices[3].processes.size(), 1u);  // NVML's own entry, with what prism says
  EXPECT_EQ(devices[3].processes[0].memory_bytes, 5ull << 30);
  EXPECT_EQ(devices[3].processes[0].doing, "m on cuda: 0 tokens, 0.0 tok/s");
  const std::string t = table(devices, 80);
  EXPECT_NE(t.find("pid 10 prism llm"), std::string::npos) << t;
  EXPECT_NE(t.find("m on cpu: 7 tokens, 2.5 tok/s"), std::string::npos) << t;
  const auto j = nlohmann::json::parse(json(devices, 1));
  EXPECT_EQ(j["devices"][0]["processes"][0]["doing"], "m on cpu: 7 tokens, 2.5 tok/s");
  EXPECT_TRUE(j["devices"][3]["processes"].size() == 1);
}

TEST(SmiFormat, TableAndJson) {
  Device d;
  d.source = "cpu";
  d.name = "A very long processor name that will not fit in eighty columns at all";
  d.utilization = 0.13;
  d.core_utilization = {0.1, 0.15};
  d.memory_used = 3ull << 30;
  d.memory_total = 16ull << 30;
  d.clock_mhz = 2400;
  d.errors = {"power: not readable"};
  const std::string t = table({d}, 80);
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_NE(t.find("13%"), std::string::npos) << t;
  EXPECT_NE(t.find("3.0 / 16.0"), std::string::npos) << t;
  EXPECT_NE(t.find("2400MHz"), std::string::npos) << t;
  EXPECT_NE(t.find("! power: not readable"), std::string::npos) << t;
  EXPECT_NE(t.find("0: 10%"), std::string::npos) << t;

  const auto j = nlohmann::json::parse(json({d}, 1.5));
  EXPECT_EQ(j["time"], 1.5);
  const auto& jd = j["devices"][0];
  EXPECT_EQ(jd["source"], "cpu");
  EXPECT_EQ(jd["utilization"], 0.13);
  EXPECT_EQ(jd["memory_total_bytes"], 16ull << 30);
  EXPECT_TRUE(jd["temperature_c"].is_null());
  EXPECT_EQ(jd["core_utilization"].size(), 2u);
  EXPECT_EQ(jd["errors"][0], "power: not readable");
  EXPECT_TRUE(j["absent"].empty());
  const auto with_absent = nlohmann::json::parse(json({d}, 1.5, {"nvml: not here"}));
  EXPECT_EQ(with_absent["absent"][0], "nvml: not here");
  EXPECT_NE(table({d}, 80, {"nvml: not here"}).find("\nabsent: nvml: not here\n"),
            std::string::npos);
}

TEST(SmiFormat, Prometheus) {
  Device d;
  d.source = "cpu";
  d.name = "Odd \"name\" \\ with\na newline";
  d.utilization = 0.5;
  d.core_utilization = {0.25, 0.75};
  d.clock_mhz = 2400;
  d.errors = {"power: not readable"};
  const std::string text = prometheus({d});
  EXPECT_NE(text.find("prism_device_info{source=\"cpu\",index=\"0\",name=\"Odd \\\"name\\\" "
                      "\\\\ with\\na newline\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prism_device_core_utilization_ratio{source=\"cpu\",index=\"0\",core=\"1\"} "
                      "0.75\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prism_device_clock_hertz{source=\"cpu\",index=\"0\"} 2400000000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prism_device_read_errors{source=\"cpu\",index=\"0\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(text.find("temperature"), std::string::npos);  // absent readings are left out
}

TEST(SmiFormat, LiveViewFrame) {
  Device d;
  d.source = "cpu";
  d.name = "CPU";
  d.memory_used = 1;
  d.memory_total = 2;
  History history(3);
  for (double u : {0.0, 0.5, 1.0, 0.99}) {
    d.utilization = u;
    history.add({d});
  }
  d.utilization.reset();  // a sample without the reading: a blank at the right
  history.add({d});
  EXPECT_EQ(history.utilization(d).size(), 3u);  // kept: the last 3
  const std::string f = frame({d}, history, "title", 40, 24);
  std::istringstream lines(f);
  std::vector<std::string> all;
  for (std::string l; std::getline(lines, l);) all.push_back(l);
  EXPECT_EQ(all.front(), "title");
  // util: 28 cells (40 - 12), right-aligned: blanks, then 1.0 and 0.99 as full blocks, then
  // the missing reading as a blank.
  const std::string util = "  util      " + std::string(25, ' ') + "\u2588\u2588 ";
  EXPECT_NE(std::find(all.begin(), all.end(), util), all.end()) << f;
  const std::string memory = "  memory    " + std::string(25, ' ') + "\u2585\u2585\u2585";
  EXPECT_NE(std::find(all.begin(), all.end(), memory), all.end()) << f;
  const std::string small = frame({d}, history, "title", 40, 3);  // at most 3 lines
  EXPECT_EQ(std::count(small.begin(), small.end(), '\n'), 3) << small;
}

}  // namespace
}  // namespace prism::smi
