#include "prism/smi/activity.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace prism::smi {

namespace fs = std::filesystem;

std::string activity_dir() {
  if (const char* dir = std::getenv("PRISM_ACTIVITY_DIR"); dir && *dir) return dir;
  if (const char* run = std::getenv("XDG_RUNTIME_DIR"); run && *run) {
    return std::string(run) + "/prism";
  }
  return fmt::format("/tmp/prism-{}", getuid());
}

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool running(int64_t pid) {
  return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

uint64_t process_start(int64_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // After the command's name (in parentheses, which may hold anything), the state is field 3
  // and the start time field 22.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return 0;
  }
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

Publisher::Publisher(Activity activity, std::string dir) : activity_(std::move(activity)) {
  activity_.pid = getpid();
  activity_.started = process_start(activity_.pid);
  std::error_code error;
  fs::create_directories(dir, error);
  // Only its owner may read what the processes do (models, paths), as under $XDG_RUNTIME_DIR.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) return;
  ::chmod(dir.c_str(), 0700);
  path_ = fmt::format("{}/{}.json", dir, activity_.pid);
  std::lock_guard lock(mutex_);
  write();
}

Publisher::~Publisher() {
  if (path_.empty()) return;
  std::error_code error;
  fs::remove(path_, error);
}

void Publisher::update(uint64_t tokens, double tokens_per_second, uint64_t memory_bytes) {
  std::lock_guard lock(mutex_);
  activity_.tokens = tokens;
  activity_.tokens_per_second = tokens_per_second;
  activity_.memory_bytes = memory_bytes;
  write();
}

void Publisher::write() {
  if (path_.empty()) return;
  activity_.updated = now();
  const nlohmann::json j{
      {"pid", activity_.pid},         {"command", activity_.command},
      {"model", activity_.model},     {"platform", activity_.platform},
      {"devices", activity_.devices}, {"memory_bytes", activity_.memory_bytes},
      {"tokens", activity_.tokens},   {"tokens_per_second", activity_.tokens_per_second},
      {"updated", activity_.updated}, {"started", activity_.started}};
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string partial = path_ + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    if (!(out << text << "\n")) return;
  }
  std::error_code error;
  fs::rename(partial, path_, error);
}

std::vector<Activity> read_activities(const std::string& dir) {
  std::vector<Activity> out;
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, error)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) continue;
    try {
      Activity a;
      a.pid = j.at("pid").get<int64_t>();
      a.command = j.at("command").get<std::string>();
      a.model = j.at("model").get<std::string>();
      a.platform = j.at("platform").get<std::string>();
      a.devices = j.at("devices").get<std::vector<int>>();
      a.memory_bytes = j.at("memory_bytes").get<uint64_t>();
      a.tokens = j.at("tokens").get<uint64_t>();
      a.tokens_per_second = j.at("tokens_per_second").get<double>();
      a.updated = j.at("updated").get<double>();
      a.started = j.value("started", uint64_t{0});
      // (A file without a start time, or a system that does not say one: the pid alone.)
      const uint64_t now_started = a.started != 0 ? process_start(a.pid) : 0;
      if (running(a.pid) && (now_started == 0 || now_started == a.started)) {
        out.push_back(std::move(a));
      }
    } catch (const nlohmann::json::exception&) {
      continue;  // not an activity
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Activity& a, const Activity& b) { return a.pid < b.pid; });
  return out;
}

void attach(std::vector<Device>& devices, const std::vector<Activity>& activities) {
  bool nvml = false;
  for (const Device& d : devices) nvml = nvml || d.source == "nvml";
  for (const Activity& a : activities) {
    const bool on_cpu = a.platform == "cpu" || a.platform == "xla-cpu";
    const std::string source =
        on_cpu ? "cpu" : (a.platform == "cuda" && nvml ? "nvml" : a.platform);
    std::vector<int> indices = on_cpu ? std::vector<int>{0} : a.devices;
    for (Device& d : devices) {
      if (d.source != source) continue;
      if (std::find(indices.begin(), indices.end(), d.index) == indices.end()) continue;
      // NVML may list the same process already: add what prism says it does.
      auto it = std::find_if(d.processes.begin(), d.processes.end(),
                             [&](const Process& p) { return p.pid == a.pid; });
      if (it == d.processes.end()) {
        d.processes.push_back({a.pid, "prism " + a.command, std::nullopt, {}});
        it = d.processes.end() - 1;
      }
      if (!it->memory_bytes) it->memory_bytes = a.memory_bytes / indices.size();
      it->doing = fmt::format("{} on {}: {} tokens, {:.1f} tok/s", a.model, a.platform, a.tokens,
                              a.tokens_per_second);
    }
  }
}

}  // namespace prism::smi
