// `prism smi [--json] [--interval=S] [--count=N]`: the devices prism runs on, how busy, how
// full, how hot (prism/smi/smi.h; docs/smi.md). Rates need two samples: the first is taken
// and discarded, the next, an interval later, is shown; with --count, one every interval.
#include "prism/smi/smi.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "prism/core/error.h"

namespace {

struct Options {
  bool json = false;
  double interval = 0.5;
  int64_t count = 1;  // 0: until interrupted
};

volatile std::sig_atomic_t interrupted = 0;

int terminal_width() {
  winsize w{};
  if (isatty(1) && ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

int run(const Options& o) {
  PRISM_CHECK(o.interval > 0 && o.interval <= 3600, "smi: --interval must be in (0, 3600], got {}",
              o.interval);
  PRISM_CHECK(o.count >= 0, "smi: --count must be >= 0, got {}", o.count);
  std::signal(SIGINT, [](int) { interrupted = 1; });
  std::vector<std::unique_ptr<prism::smi::Source>> sources;
  sources.push_back(prism::smi::cpu_source());
  for (auto& s : sources) s->sample();  // the baseline of the rates
  const auto interval = std::chrono::duration<double>(o.interval);
  for (int64_t n = 0; (o.count == 0 || n < o.count) && !interrupted; ++n) {
    std::this_thread::sleep_for(interval);
    if (interrupted) break;
    std::vector<prism::smi::Device> devices;
    for (auto& s : sources) {
      for (prism::smi::Device& d : s->sample()) devices.push_back(std::move(d));
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string text = o.json ? prism::smi::json(devices, now) + "\n"
                                    : prism::smi::table(devices, terminal_width());
    if (!o.json && n > 0) std::fputc('\n', stdout);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

const prism::cli::RegisterCommand kSmi{
    "smi", "Show the devices prism runs on: utilization, memory, temperature, power, clocks",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_flag("--json", o->json, "one JSON object per sample, one a line (docs/smi.md)");
      app.add_option("--interval", o->interval, "seconds between samples")->capture_default_str();
      app.add_option("--count", o->count, "samples to show (0: until interrupted)")
          ->capture_default_str();
      return [o] { return run(*o); };
    }};

}  // namespace
