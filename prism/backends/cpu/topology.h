// Which CPUs each device of a CPU mesh runs on: the CPUs this process may use, grouped by NUMA
// node (so that a mesh of one device per node gives each device one node's cores) and cut
// into contiguous sets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prism::cpu {

// The CPUs of each NUMA node, in node order, from /sys/devices/system/node (one group of
// every CPU where the machine says nothing). Only CPUs in `allowed` are kept.
std::vector<std::vector<int>> numa_cpus(const std::vector<int>& allowed);

// `n` sets of CPUs from `nodes` (numa_cpus' groups, taken in order): as even as they go, each
// node's CPUs kept together where the sets allow; with more devices than CPUs, device k shares
// CPU k modulo their number.
std::vector<std::vector<int>> device_cpus(const std::vector<std::vector<int>>& nodes, int64_t n);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; malformed parts are skipped.
std::vector<int> parse_cpu_list(const std::string& text);

// The CPU's model name (/proc/cpuinfo's "model name"), or "host CPU".
std::string cpu_model();

}  // namespace prism::cpu
