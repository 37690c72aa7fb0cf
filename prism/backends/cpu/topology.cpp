#include "prism/backends/cpu/topology.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace prism::cpu {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    int first = 0, last = 0;
    char dash = 0;
    std::stringstream p(part);
    if (!(p >> first)) continue;
    if (p >> dash && dash == '-' && p >> last) {
      for (int c = first; c <= last; ++c) cpus.push_back(c);
    } else {
      cpus.push_back(first);
    }
  }
  return cpus;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

std::vector<NumaNode> numa_nodes(const std::vector<int>& allowed, const std::string& root) {
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::vector<NumaNode> nodes;
  std::set<int> placed;
  if (DIR* d = opendir(root.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("node", 0) != 0 || name.size() == 4 || name.size() > 9 ||
          !std::all_of(name.begin() + 4, name.end(), ::isdigit)) {
        continue;
      }
      std::ifstream f(root + "/" + name + "/cpulist");
      std::string text;
      std::getline(f, text);
      NumaNode node{std::stoi(name.substr(4)), {}};
      for (int c : parse_cpu_list(text)) {
        if (ok.contains(c) && placed.insert(c).second) node.cpus.push_back(c);
      }
      if (!node.cpus.empty()) nodes.push_back(std::move(node));
    }
    closedir(d);
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  NumaNode rest;
  for (int c : allowed) {
    if (!placed.contains(c)) rest.cpus.push_back(c);
  }
  if (!rest.cpus.empty()) nodes.push_back(std::move(rest));
  return nodes;
}

std::vector<std::vector<int>> device_cpus(const std::vector<NumaNode>& nodes, int64_t n) {
  std::vector<int> all;
  for (const NumaNode& node : nodes) all.insert(all.end(), node.cpus.begin(), node.cpus.end());
  std::vector<std::vector<int>> sets(n);
  if (all.empty()) return sets;
  const int64_t count = static_cast<int64_t>(all.size());
  for (int64_t k = 0; k < n; ++k) {
    if (n > count) {
      sets[k] = {all[k % count]};
      continue;
    }
    for (int64_t i = count * k / n; i < count * (k + 1) / n; ++i) sets[k].push_back(all[i]);
  }
  return sets;
}

int node_of(const std::vector<int>& cpus, const std::vector<NumaNode>& nodes) {
  for (const NumaNode& node : nodes) {
    const bool inside = !cpus.empty() && std::all_of(cpus.begin(), cpus.end(), [&](int c) {
      return std::find(node.cpus.begin(), node.cpus.end(), c) != node.cpus.end();
    });
    if (inside) return node.id;
  }
  return -1;
}

// The kernel's memory policy calls (mbind(2), get_mempolicy(2)) without libnuma: their
// constants are the kernel's ABI.
namespace {
constexpr int kMpolPreferred = 1;
constexpr unsigned kMpolMfMove = 1u << 1;
constexpr unsigned long kMpolFAddr = 1ul << 1;
constexpr unsigned long kMaxNodes = 1024;
}  // namespace

bool prefer_node(void* p, size_t bytes, int node) {
  if (node < 0 || node >= static_cast<int>(kMaxNodes)) return false;
  unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
  return syscall(SYS_mbind, p, bytes, kMpolPreferred, mask, kMaxNodes + 1, kMpolMfMove) == 0;
}

int preferred_node(const void* p) {
  int mode = 0;
  unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  if (syscall(SYS_get_mempolicy, &mode, mask, kMaxNodes + 1, p, kMpolFAddr) != 0 ||
      mode != kMpolPreferred) {
    return -1;
  }
  for (size_t node = 0; node < kMaxNodes; ++node) {
    if (mask[node / (8 * sizeof(unsigned long))] >> (node % (8 * sizeof(unsigned long))) & 1) {
      return static_cast<int>(node);
    }
  }
  return -1;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "host CPU";
}

}  // namespace prism::cpu
