#include "prism/backends/cpu/core_sharing.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace prism::cpu {
namespace {

std::optional<std::string> read_proc_stat() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double own_cpu_seconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

std::optional<int64_t> busy_ticks(std::string_view text, const std::vector<int>& cpus) {
  std::map<int, int64_t> busy;  // per CPU with a line
  while (!text.empty()) {
    const size_t eol = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(std::min(eol + 1, text.size()));
    // "cpuN user nice system idle iowait irq softirq steal ...": not the "cpu " total.
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    int cpu = -1;
    const char* p = line.data() + 3;
    const char* end = line.data() + line.size();
    auto [after, ec] = std::from_chars(p, end, cpu);
    if (ec != std::errc()) return std::nullopt;
    p = after;
    int64_t field[7] = {};
    for (int64_t& f : field) {
      while (p < end && *p == ' ') ++p;
      auto [next, err] = std::from_chars(p, end, f);
      if (err != std::errc()) return std::nullopt;
      p = next;
    }
    busy[cpu] = field[0] + field[1] + field[2] + field[5] + field[6];
  }
  int64_t sum = 0;
  for (int c : cpus) {
    auto it = busy.find(c);
    if (it == busy.end()) return std::nullopt;
    sum += it->second;
  }
  return sum;
}

CoreSharing::CoreSharing() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus_.push_back(c);
    }
  }
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz > 0) seconds_per_tick_ = 1.0 / static_cast<double>(hz);
}

std::optional<double> CoreSharing::look(std::chrono::milliseconds every) {
  const auto now = std::chrono::steady_clock::now();
  if (looked_ && now - at_ < every) return std::nullopt;
  const std::optional<std::string> text = read_proc_stat();
  const std::optional<int64_t> busy = text ? busy_ticks(*text, cpus_) : std::nullopt;
  if (!busy) return std::nullopt;
  const double own = own_cpu_seconds();
  std::optional<double> others;
  if (looked_) {
    const double seconds = std::chrono::duration<double>(now - at_).count();
    others = ((*busy - busy_) * seconds_per_tick_ - (own - own_)) / seconds;
  }
  looked_ = true;
  at_ = now;
  busy_ = *busy;
  own_ = own;
  return others;
}

}  // namespace prism::cpu
