// AWS Trainium and Inferentia through neuron-monitor (smi.h), the monitor that AWS's
// aws-neuronx-tools installs: prism starts it with a configuration of its own (every Neuron
// application's NeuronCore counters and memory, once a second) and reads the JSON report it
// prints on each line, on a thread of its own; a sample takes the latest report. The report
// lists the NeuronCores in use by each application (numbered across devices) and the device
// memory each uses, per core; the hardware part gives the devices' count, cores and memory.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "prism/smi/smi.h"
#include "prism/smi/vendor.h"

extern char** environ;

namespace prism::smi {
namespace {

using Json = nlohmann::json;

// A non-negative integer field of `j`, or nothing.
std::optional<uint64_t> count_of(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number() || it->get<double>() < 0) return std::nullopt;
  return it->get<uint64_t>();
}

std::string error_of(const Json& j) {
  auto it = j.find("error");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

class NeuronSource final : public Source {
 public:
  NeuronSource(pid_t child, int out, std::string config) : child_(child), config_(config) {
    reader_ = std::thread([this, out] { read(out); });
  }
  ~NeuronSource() override {
    {
      std::lock_guard lock(mutex_);  // (the reader reaps it under the lock: no other pid is hit)
      if (!reaped_) kill(child_, SIGTERM);
    }
    reader_.join();  // the pipe ends with the child
    if (!reaped_) waitpid(child_, nullptr, 0);
    std::remove(config_.c_str());
  }
  std::string name() const override { return "neuron"; }

  // The devices of the latest report: the first sample waits for one (neuron-monitor prints
  // its first after a period).
  std::vector<Device> sample() override {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(3), [&] { return report_ || ended_; });
    if (!report_) {
      Device d = blank(0);
      d.name = "Neuron";
      d.errors.push_back(ended_ ? "neuron-monitor " + ending_ : "no report from neuron-monitor");
      return {std::move(d)};
    }
    std::vector<Device> devices = from_report(*report_);
    for (Device& d : devices) {
      if (ended_) d.errors.push_back("neuron-monitor " + ending_ + "; its last report");
      if (!bad_line_.empty()) d.errors.push_back(bad_line_);
    }
    return devices;
  }

  // The devices of a report (one with no hardware part has none: said on a row).
  static std::vector<Device> from_report(const Json& report) {
    const Json* hardware =
        report.contains("neuron_hardware_info") && report["neuron_hardware_info"].is_object()
            ? &report["neuron_hardware_info"]
            : nullptr;
    const std::optional<uint64_t> count =
        hardware ? count_of(*hardware, "neuron_device_count") : std::nullopt;
    const std::optional<uint64_t> per =
        hardware ? count_of(*hardware, "neuroncore_per_device_count") : std::nullopt;
    if (!count || *count == 0 || !per || *per == 0 || *count > 4096 || *per > 4096) {
      Device d = blank(0);
      d.name = "Neuron";
      const std::string why = hardware ? error_of(*hardware) : "";
      d.errors.push_back("hardware: " + (why.empty() ? "no Neuron devices in the report" : why));
      return {std::move(d)};
    }
    std::string type = "Neuron device";
    if (auto it = hardware->find("neuron_device_type"); it != hardware->end() && it->is_string())
      type = "AWS " + it->get<std::string>();
    const std::optional<uint64_t> memory = count_of(*hardware, "neuron_device_memory_size");
    std::vector<Device> devices(*count);
    std::vector<double> busy(*count, 0.0);  // the device's cores' utilization, summed
    for (uint64_t i = 0; i < *count; ++i) {
      devices[i] = blank(static_cast<int>(i));
      devices[i].name = type;
      devices[i].memory_total = memory;
    }
    auto device_of = [&](const std::string& core) -> std::optional<uint64_t> {
      char* end = nullptr;
      const unsigned long long c = std::strtoull(core.c_str(), &end, 10);
      if (core.empty() || *end || c >= *count * *per) return std::nullopt;
      return c / *per;
    };
    auto runtimes = report.find("neuron_runtime_data");
    if (runtimes != report.end() && runtimes->is_array()) {
      for (const Json& runtime : *runtimes) {
        if (!runtime.is_object() || !runtime.contains("report")) continue;
        const Json& r = runtime["report"];
        const int64_t pid = runtime.value("pid", int64_t{0});
        std::map<uint64_t, uint64_t> bytes;  // this application's memory, per device
        std::map<uint64_t, bool> uses;
        if (r.contains("neuroncore_counters")) {
          const Json& counters = r["neuroncore_counters"];
          if (auto in_use = counters.find("neuroncores_in_use");
              in_use != counters.end() && in_use->is_object()) {
            for (const auto& [core, c] : in_use->items()) {
              const std::optional<uint64_t> d = device_of(core);
              if (!d || !c.is_object()) continue;
              uses[*d] = true;
              if (auto u = c.find("neuroncore_utilization"); u != c.end() && u->is_number()) {
                busy[*d] += u->get<double>() / 100.0;
              }
            }
          }
        }
        if (r.contains("memory_used")) {
          const Json& used = r["memory_used"];
          const Json* breakdown = nullptr;
          if (auto b = used.find("neuron_runtime_used_bytes"); b != used.end() && b->is_object()) {
            if (auto u = b->find("usage_breakdown"); u != b->end() && u->is_object()) {
              if (auto n = u->find("neuroncore_memory_usage"); n != u->end() && n->is_object())
                breakdown = &*n;
            }
          }
          if (breakdown) {
            for (const auto& [core, kinds] : breakdown->items()) {
              const std::optional<uint64_t> d = device_of(core);
              if (!d || !kinds.is_object()) continue;
              uses[*d] = true;
              for (const auto& [kind, value] : kinds.items()) {
                if (value.is_number_unsigned()) bytes[*d] += value.get<uint64_t>();
              }
            }
          }
        }
        for (const auto& [d, _] : uses) {
          Process p;
          p.pid = pid;
          p.name = vendor::process_name(pid);
          if (auto b = bytes.find(d); b != bytes.end()) {
            p.memory_bytes = b->second;
            devices[d].memory_used = devices[d].memory_used.value_or(0) + b->second;
          }
          devices[d].processes.push_back(std::move(p));
        }
        if (const std::string e = error_of(runtime); !e.empty()) {
          for (const auto& [d, _] : uses)
            devices[d].errors.push_back("pid " + std::to_string(pid) + ": " + e);
        }
      }
    }
    for (uint64_t i = 0; i < *count; ++i) {
      // Cores no application uses are idle: the device's share is over all its cores.
      devices[i].utilization = busy[i] / static_cast<double>(*per);
      if (!devices[i].memory_used) devices[i].memory_used = 0;
    }
    return devices;
  }

 private:
  static Device blank(int index) {
    Device d;
    d.source = "neuron";
    d.index = index;
    return d;
  }

  // The reader thread: one report a line, until the pipe ends.
  void read(int out) {
    FILE* in = fdopen(out, "r");
    std::string line;
    for (int c; in && (c = std::fgetc(in)) != EOF;) {
      if (c != '\n') {
        if (line.size() < (64u << 20)) line.push_back(static_cast<char>(c));
        continue;
      }
      Json report = Json::parse(line, nullptr, false);
      std::lock_guard lock(mutex_);
      if (report.is_discarded() || !report.is_object()) {
        bad_line_ = "neuron-monitor printed a line that is not a JSON report";
      } else {
        report_ = std::move(report);
        bad_line_.clear();
      }
      line.clear();
      changed_.notify_all();
    }
    if (in) std::fclose(in);
    std::lock_guard lock(mutex_);
    int status = 0;
    ending_ = "ended";
    if (waitpid(child_, &status, 0) == child_) {
      ending_ = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                  : "was stopped by signal " + std::to_string(WTERMSIG(status));
      reaped_ = true;
    }
    ended_ = true;
    changed_.notify_all();
  }

  pid_t child_;
  std::string config_;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Json> report_;
  bool ended_ = false, reaped_ = false;
  std::string ending_, bad_line_;
};

}  // namespace

std::vector<Device> neuron_devices(const std::string& report_line) {
  Json report = Json::parse(report_line, nullptr, false);
  if (report.is_discarded() || !report.is_object()) {
    Device d;
    d.source = "neuron";
    d.name = "Neuron";
    d.errors.push_back("not a JSON report");
    return {std::move(d)};
  }
  return NeuronSource::from_report(report);
}

std::unique_ptr<Source> neuron_source(std::string* absent) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<Source> {
    if (absent) *absent = "neuron: " + why;
    return nullptr;
  };
  std::string monitor;
  if (const char* env = std::getenv("PRISM_NEURON_MONITOR"); env && *env) {
    monitor = env;
  } else {
    for (std::string dir : {"/opt/aws/neuron/bin"}) {
      if (access((dir + "/neuron-monitor").c_str(), X_OK) == 0) monitor = dir + "/neuron-monitor";
    }
    if (monitor.empty()) {
      const char* path = std::getenv("PATH");
      std::string dirs = path ? path : "";
      for (size_t at = 0; monitor.empty() && at <= dirs.size();) {
        const size_t end = std::min(dirs.find(':', at), dirs.size());
        const std::string candidate = dirs.substr(at, end - at) + "/neuron-monitor";
        if (end > at && access(candidate.c_str(), X_OK) == 0) monitor = candidate;
        at = end + 1;
      }
    }
  }
  if (monitor.empty()) return fail("neuron-monitor not found (aws-neuronx-tools installs it)");
  if (access(monitor.c_str(), X_OK) != 0) return fail(monitor + " not found or not executable");
  // Its configuration: every application's NeuronCore counters and memory, once a second.
  char config[] = "/tmp/prism-neuron-monitor-XXXXXX";
  const int fd = mkstemp(config);
  if (fd < 0) return fail("cannot write its configuration in /tmp");
  const std::string text =
      R"({"period": "1s", "neuron_runtimes": [{"tag_filter": ".*", "metrics": [)"
      R"({"type": "neuroncore_counters"}, {"type": "memory_used"}]}], "system_metrics": []})";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) {
    std::remove(config);
    return fail("cannot write its configuration in /tmp");
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    std::remove(config);
    return fail("cannot make a pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const std::string flag = "-c";
  char* argv[] = {monitor.data(), const_cast<char*>(flag.c_str()), config, nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, monitor.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    std::remove(config);
    return fail("cannot start " + monitor + ": " + std::strerror(spawned));
  }
  return std::make_unique<NeuronSource>(child, pipe_fds[0], config);
}

}  // namespace prism::smi
