#include "prism/backends/cpu/topology.h"

#include <dirent.h>
#include <sched.h>

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

std::vector<std::vector<int>> numa_cpus(const std::vector<int>& allowed) {
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::vector<std::pair<int, std::vector<int>>> nodes;
  std::set<int> placed;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("node", 0) != 0 || name.size() == 4 ||
          !std::all_of(name.begin() + 4, name.end(), ::isdigit)) {
        continue;
      }
      std::ifstream f("/sys/devices/system/node/" + name + "/cpulist");
      std::string text;
      std::getline(f, text);
      std::vector<int> cpus;
      for (int c : parse_cpu_list(text)) {
        if (ok.contains(c)) cpus.push_back(c), placed.insert(c);
      }
      if (!cpus.empty()) nodes.emplace_back(std::stoi(name.substr(4)), std::move(cpus));
    }
    closedir(d);
  }
  std::sort(nodes.begin(), nodes.end());
  std::vector<std::vector<int>> out;
  for (auto& [id, cpus] : nodes) out.push_back(std::move(cpus));
  std::vector<int> rest;
  for (int c : allowed) {
    if (!placed.contains(c)) rest.push_back(c);
  }
  if (!rest.empty()) out.push_back(std::move(rest));
  return out;
}

std::vector<std::vector<int>> device_cpus(const std::vector<std::vector<int>>& nodes, int64_t n) {
  std::vector<int> all;
  for (const auto& node : nodes) all.insert(all.end(), node.begin(), node.end());
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
