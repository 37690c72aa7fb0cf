// The CPU source of prism smi (smi.h): procfs and sysfs, read as text files under a root.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The file's text, or nothing when it cannot be read.
std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return s.str();
}

// The file's first number, or nothing.
std::optional<double> read_number(const fs::path& path) {
  std::optional<std::string> text = read_text(path);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  double v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

std::string trim(std::string s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  return s;
}

// A line of /proc/stat's CPU times: busy (all but idle and iowait) and total ticks.
struct Ticks {
  uint64_t busy = 0, total = 0;
};

class CpuSource final : public Source {
 public:
  explicit CpuSource(fs::path root) : root_(std::move(root)), model_(model()) {}
  std::string name() const override { return "cpu"; }

  std::vector<Device> sample() override {
    Device d;
    d.source = "cpu";
    d.name = model_;
    utilization(d);
    memory(d);
    clock(d);
    temperature(d);
    power(d);
    return {std::move(d)};
  }

 private:
  fs::path at(const char* path) const { return root_ / path; }

  std::string model() const {
    if (std::optional<std::string> info = read_text(at("proc/cpuinfo"))) {
      std::istringstream in(*info);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) == 0) {
          const size_t colon = line.find(':');
          if (colon != std::string::npos) return trim(line.substr(colon + 1));
        }
      }
    }
    return "CPU";
  }

  // /proc/stat: "cpu" then "cpuN" lines of user nice system idle iowait irq softirq steal ...
  void utilization(Device& d) {
    std::optional<std::string> stat = read_text(at("proc/stat"));
    if (!stat) {
      d.errors.push_back("utilization: cannot read /proc/stat");
      return;
    }
    std::map<std::string, Ticks> now;
    std::istringstream in(*stat);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("cpu", 0) != 0) continue;
      std::istringstream fields(line);
      std::string name;
      fields >> name;
      std::vector<uint64_t> v;
      for (uint64_t x; fields >> x;) v.push_back(x);
      if (v.size() < 4) continue;
      Ticks t;
      // guest and guest_nice (fields 9 and 10) are already counted in user and nice.
      for (size_t i = 0; i < std::min<size_t>(v.size(), 8); ++i) t.total += v[i];
      const uint64_t idle = v[3] + (v.size() > 4 ? v[4] : 0);
      t.busy = t.total - idle;
      now[name] = t;
    }
    if (!now.count("cpu")) {
      d.errors.push_back("utilization: /proc/stat has no cpu line");
      return;
    }
    auto share = [&](const std::string& name) -> std::optional<double> {
      auto before = ticks_.find(name);
      if (before == ticks_.end()) return std::nullopt;
      const Ticks& a = before->second;
      const Ticks& b = now.at(name);
      if (b.total <= a.total || b.busy < a.busy) return std::nullopt;
      return std::clamp(double(b.busy - a.busy) / double(b.total - a.total), 0.0, 1.0);
    };
    d.utilization = share("cpu");
    // Cores by number (cpu10 after cpu9), each from its own line.
    std::vector<std::pair<int, std::string>> cores;
    for (const auto& [name, t] : now) {
      if (name.size() > 3) cores.emplace_back(std::stoi(name.substr(3)), name);
    }
    std::sort(cores.begin(), cores.end());
    for (const auto& [n, name] : cores) d.core_utilization.push_back(share(name).value_or(0.0));
    if (!d.utilization) d.core_utilization.clear();  // the first sample has no rates
    ticks_ = std::move(now);
  }

  void memory(Device& d) const {
    std::optional<std::string> info = read_text(at("proc/meminfo"));
    std::optional<uint64_t> total, available;
    if (info) {
      std::istringstream in(*info);
      for (std::string key; in >> key;) {
        uint64_t kib = 0;
        in >> kib;
        if (key == "MemTotal:") total = kib * 1024;
        if (key == "MemAvailable:") available = kib * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      }
    }
    if (!total || !available || *available > *total) {
      d.errors.push_back("memory: cannot read MemTotal and MemAvailable from /proc/meminfo");
      return;
    }
    d.memory_total = total;
    d.memory_used = *total - *available;
  }

  // The mean of the cores' clocks: cpufreq where the system has it (not in most VMs), else
  // the "cpu MHz" lines of /proc/cpuinfo.
  void clock(Device& d) const {
    double sum = 0;
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(at("sys/devices/system/cpu"), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("cpu", 0) != 0 || name.size() == 3 || !std::isdigit(name[3])) continue;
      if (std::optional<double> khz = read_number(e.path() / "cpufreq/scaling_cur_freq")) {
        sum += *khz / 1000;
        ++n;
      }
    }
    if (n == 0) {
      if (std::optional<std::string> info = read_text(at("proc/cpuinfo"))) {
        std::istringstream in(*info);
        for (std::string line; std::getline(in, line);) {
          if (line.rfind("cpu MHz", 0) != 0) continue;
          const size_t colon = line.find(':');
          if (colon == std::string::npos) continue;
          sum += std::strtod(line.c_str() + colon + 1, nullptr);
          ++n;
        }
      }
    }
    if (n > 0) d.clock_mhz = sum / n;
  }

  // The package's temperature: hwmon's coretemp (its first input is the package) or k10temp
  // (Tctl), else a thermal zone of type x86_pkg_temp. Virtual machines usually have neither:
  // then there is no reading, and no error (there is nothing to read).
  void temperature(Device& d) const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(at("sys/class/hwmon"), ec)) {
      std::optional<std::string> name = read_text(e.path() / "name");
      if (!name) continue;
      const std::string n = trim(*name);
      if (n != "coretemp" && n != "k10temp" && n != "zenpower") continue;
      if (std::optional<double> milli = read_number(e.path() / "temp1_input")) {
        d.temperature_c = *milli / 1000;
        return;
      }
      d.errors.push_back("temperature: cannot read " + n + "'s temp1_input");
      return;
    }
    for (const auto& e : fs::directory_iterator(at("sys/class/thermal"), ec)) {
      std::optional<std::string> type = read_text(e.path() / "type");
      if (!type || trim(*type) != "x86_pkg_temp") continue;
      if (std::optional<double> milli = read_number(e.path() / "temp")) {
        d.temperature_c = *milli / 1000;
        return;
      }
    }
  }

  // Package power from RAPL: the energy counters of the package domains (intel-rapl:N, also
  // on AMD since Linux 5.8), differenced over the interval, allowing for one wrap.
  void power(Device& d) {
    std::error_code ec;
    bool any = false, unreadable = false;
    double joules = 0;
    std::map<std::string, double> now;
    for (const auto& e : fs::directory_iterator(at("sys/class/powercap"), ec)) {
      const std::string name = e.path().filename().string();
      // Packages are intel-rapl:N; their subdomains (intel-rapl:N:M) are inside them.
      if (name.rfind("intel-rapl:", 0) != 0 || name.find(':', 11) != std::string::npos) continue;
      any = true;
      std::optional<double> uj = read_number(e.path() / "energy_uj");
      if (!uj) {
        unreadable = true;
        continue;
      }
      now[name] = *uj;
      auto before = energy_.find(name);
      if (before != energy_.end()) {
        double delta = *uj - before->second;
        if (delta < 0) delta += read_number(e.path() / "max_energy_range_uj").value_or(0);
        joules += delta / 1e6;
      }
    }
    const Clock::time_point t = Clock::now();
    if (unreadable) {
      d.errors.push_back(
          "power: RAPL's energy counters are not readable (only root may read them)");
    } else if (any && !energy_.empty()) {
      const double seconds = std::chrono::duration<double>(t - energy_time_).count();
      if (seconds > 0) d.power_w = joules / seconds;
    }
    energy_ = std::move(now);
    energy_time_ = t;
  }

  fs::path root_;
  std::string model_;  // read once: it does not change
  std::map<std::string, Ticks> ticks_;
  std::map<std::string, double> energy_;  // microjoules, by domain
  Clock::time_point energy_time_;
};

}  // namespace

std::unique_ptr<Source> cpu_source(std::string root) {
  return std::make_unique<CpuSource>(std::move(root));
}

}  // namespace prism::smi
