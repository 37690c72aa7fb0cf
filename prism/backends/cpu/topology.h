// Which CPUs each device of a CPU mesh runs on: the CPUs this process may use, grouped by NUMA
// node (so that a mesh of one device per node gives each device one node's cores) and cut
// into contiguous sets; and the node a device's memory is placed on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prism::cpu {

// A NUMA node and the CPUs of it this process may use. Node -1 holds the CPUs the machine
// places in no node.
struct NumaNode {
  int id = -1;
  std::vector<int> cpus;
  bool operator==(const NumaNode&) const = default;
};

// The nodes of `root` (the kernel's /sys/devices/system/node), in node order, each with its
// CPUs in `allowed`; nodes without any are left out. One node -1 of every CPU where the
// machine says nothing.
std::vector<NumaNode> numa_nodes(const std::vector<int>& allowed,
                                 const std::string& root = "/sys/devices/system/node");

// `n` sets of CPUs from `nodes` (taken in order): as even as they go, each node's CPUs kept
// together where the sets allow; with more devices than CPUs, device k shares CPU k modulo
// their number.
std::vector<std::vector<int>> device_cpus(const std::vector<NumaNode>& nodes, int64_t n);

// The node holding every CPU of `cpus`, or -1 where they span several or lie in none.
int node_of(const std::vector<int>& cpus, const std::vector<NumaNode>& nodes);

// Asks the kernel to place the pages of [p, p + bytes) on `node` from now on (MPOL_PREFERRED:
// another node's memory where that one is full), moving those already placed. `p` is
// page-aligned. Returns false where the kernel refuses (no NUMA support, a seccomp filter).
bool prefer_node(void* p, size_t bytes, int node);

// The node the memory policy of the page holding `p` prefers, or -1 where it has none.
int preferred_node(const void* p);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; malformed parts are skipped.
std::vector<int> parse_cpu_list(const std::string& text);

// The CPU's model name (/proc/cpuinfo's "model name"), or "host CPU".
std::string cpu_model();

}  // namespace prism::cpu
