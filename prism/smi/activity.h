// What a running `prism llm` or `prism serve` is doing, published where `prism smi` reads it:
// one small JSON file per process, `<pid>.json` in the activity directory, replaced atomically
// (written beside it, then renamed) as it changes and removed when the process ends. `prism
// smi` shows each beside the devices it runs on and skips the files of processes that are gone
// (a process killed before it could remove its own), also where another process has its pid
// since (its start time differs from the one the file recorded).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "prism/smi/smi.h"

namespace prism::smi {

struct Activity {
  int64_t pid = 0;
  std::string command;           // "llm", "serve"
  std::string model;             // the model's URI
  std::string platform;          // "cpu", "opencl", "cuda", "xla-cpu", ...
  std::vector<int> devices;      // the platform's devices it runs on
  uint64_t memory_bytes = 0;     // what it holds on them: weights, caches and states
  uint64_t tokens = 0;           // generated so far
  double tokens_per_second = 0;  // generated, lately
  double updated = 0;            // seconds since the epoch
  // When the process started (Linux: clock ticks since boot, /proc/<pid>/stat), so that a file
  // left by a killed process is not taken for another that got its pid; 0 where unknown.
  uint64_t started = 0;
};

// When process `pid` started (clock ticks since boot), or 0 where that cannot be read.
uint64_t process_start(int64_t pid);

// PRISM_ACTIVITY_DIR, else $XDG_RUNTIME_DIR/prism, else /tmp/prism-<uid>.
std::string activity_dir();

// Publishes one process's activity from construction to destruction. The directory is made
// (mode 0700) when missing; a directory that cannot be written is no error: nothing is
// published (monitoring must never stop a model from running).
class Publisher {
 public:
  explicit Publisher(Activity activity, std::string dir = activity_dir());
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // New counts (thread-safe); the file is rewritten.
  void update(uint64_t tokens, double tokens_per_second, uint64_t memory_bytes);

 private:
  void write();
  std::mutex mutex_;
  Activity activity_;
  std::string path_;
};

// The activities published in `dir` by processes that are still running. Files that are not
// activities (unreadable, malformed) are skipped.
std::vector<Activity> read_activities(const std::string& dir = activity_dir());

// Each activity as a process of the devices it runs on (a CPU platform's devices are sets of
// the one CPU's cores; PJRT's XLA CPU plugin runs on the CPU too; CUDA devices are NVML's
// where NVML reports them).
void attach(std::vector<Device>& devices, const std::vector<Activity>& activities);

}  // namespace prism::smi
