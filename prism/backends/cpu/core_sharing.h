// How much of this process's CPUs other processes are taking: the CPUs' busy time
// (/proc/stat) less this process's own CPU time (getrusage), between two looks. The thread
// pool (thread_pool.h) spins less while it is high: on a shared machine a spinning thread
// spends its share of a core on nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace prism::cpu {

// The busy clock ticks (user, nice, system, irq, softirq: not idle, iowait or time the
// hypervisor took) of CPUs `cpus` in the text of /proc/stat, summed; nullopt where a CPU's line
// is missing or malformed.
std::optional<int64_t> busy_ticks(std::string_view proc_stat, const std::vector<int>& cpus);

class CoreSharing {
 public:
  // Over the CPUs this process may run on (its affinity when made).
  CoreSharing();

  // Where at least `every` has passed since the last look (or this is the first), looks
  // again; returns how many CPUs' worth of time other processes took on this process's CPUs
  // between the last two looks (1.0: one whole CPU), or nullopt where it did not look, it is
  // the first look, or /proc/stat cannot be read.
  std::optional<double> look(std::chrono::milliseconds every = std::chrono::milliseconds(100));

 private:
  std::vector<int> cpus_;
  double seconds_per_tick_ = 0.01;
  bool looked_ = false;
  std::chrono::steady_clock::time_point at_;
  int64_t busy_ = 0;  // ticks of cpus_ at the last look
  double own_ = 0;    // this process's CPU seconds at the last look
};

}  // namespace prism::cpu
