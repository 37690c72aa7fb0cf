// `prism smi [--json] [--interval=S] [--count=N] [--prometheus=PORT]`: the devices prism runs
// on, how busy, how full, how hot (prism/smi/smi.h; docs/smi.md). Rates need two samples: the
// first is taken and discarded, the next, an interval later, is shown; with --count, one every
// interval. --prometheus serves the latest sample at /metrics until interrupted; --watch is a
// live view in the terminal, until `q`.
#include "prism/smi/smi.h"

#include <fmt/chrono.h>
#include <httplib.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/smi/activity.h"

namespace {

struct Options {
  bool json = false;
  bool watch = false;
  double interval = 0.5;
  int64_t count = 1;    // 0: until interrupted
  int prometheus = -1;  // the exporter's port; -1: none
  std::string host = "127.0.0.1";
};

volatile std::sig_atomic_t interrupted = 0;

using Sources = std::vector<std::unique_ptr<prism::smi::Source>>;

// Every source that runs here; those that cannot, as "name: why", in `absent`.
Sources open_sources(std::vector<std::string>& absent) {
  Sources sources;
  sources.push_back(prism::smi::cpu_source());
  std::string why;
  std::unique_ptr<prism::smi::Source> nvml = prism::smi::nvml_source(&why);
  if (!nvml) absent.push_back(why);
  for (auto& s : prism::smi::platform_sources(!nvml, &absent)) sources.push_back(std::move(s));
  if (nvml) sources.push_back(std::move(nvml));
  if (auto level_zero = prism::smi::level_zero_source(&why)) {
    sources.push_back(std::move(level_zero));
  } else {
    absent.push_back(why);
  }
  if (auto rocm = prism::smi::rocm_smi_source(&why)) {
    sources.push_back(std::move(rocm));
  } else {
    absent.push_back(why);
  }
  if (auto neuron = prism::smi::neuron_source(&why)) {
    sources.push_back(std::move(neuron));
  } else {
    absent.push_back(why);
  }
  if (auto tpu = prism::smi::tpu_source(&why)) {
    sources.push_back(std::move(tpu));
  } else {
    absent.push_back(why);
  }
  return sources;
}

// Every source's devices, with what the prism processes running on them say they do.
std::vector<prism::smi::Device> sample(Sources& sources) {
  std::vector<prism::smi::Device> devices;
  for (auto& s : sources) {
    for (prism::smi::Device& d : s->sample()) devices.push_back(std::move(d));
  }
  prism::smi::attach(devices, prism::smi::read_activities());
  return devices;
}

// Sleeps `seconds` in short steps; false as soon as the process is interrupted.
bool wait(double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  while (!interrupted) {
    const auto now = Clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(end - now, std::chrono::milliseconds(50)));
  }
  return false;
}

// The terminal's columns and rows (80 x 24 when it does not say).
std::pair<int, int> terminal_size() {
  winsize w{};
  if (isatty(1) && ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 && w.ws_row > 0) {
    return {w.ws_col, w.ws_row};
  }
  return {80, 24};
}

// The terminal during the live view: keys read as they come, without echo, on the alternate
// screen with the cursor hidden; all restored however the view ends.
class LiveTerminal {
 public:
  LiveTerminal() {
    tcgetattr(0, &saved_);
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    tcsetattr(0, TCSANOW, &raw);
    std::fputs("\033[?1049h\033[?25l", stdout);
  }
  ~LiveTerminal() {
    std::fputs("\033[?25h\033[?1049l", stdout);
    std::fflush(stdout);
    tcsetattr(0, TCSANOW, &saved_);
  }
  LiveTerminal(const LiveTerminal&) = delete;
  LiveTerminal& operator=(const LiveTerminal&) = delete;

 private:
  termios saved_{};
};

// Waits `seconds` for a key; false when it was q (or the process was interrupted).
bool wait_unless_quit(double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  while (!interrupted) {
    const auto left = end - Clock::now();
    if (left <= Clock::duration::zero()) return true;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
    timeval tv{0, static_cast<suseconds_t>(us.count())};
    fd_set in;
    FD_ZERO(&in);
    FD_SET(0, &in);
    if (select(1, &in, nullptr, nullptr, &tv) > 0) {
      char c = 0;
      if (read(0, &c, 1) == 1 && (c == 'q' || c == 'Q')) return false;
    }
  }
  return false;
}

// The live view: a frame every interval, history growing to the right, until q.
int watch(const Options& o, Sources& sources, const std::vector<std::string>& absent) {
  PRISM_CHECK(isatty(0) && isatty(1),
              "smi: --watch needs a terminal (for a pipe: --json or --count)");
  prism::smi::History history;
  LiveTerminal terminal;
  do {
    const std::vector<prism::smi::Device> devices = sample(sources);
    history.add(devices);
    const auto [width, height] = terminal_size();
    const std::time_t now = std::time(nullptr);
    const std::string title =
        fmt::format("prism smi  {:%H:%M:%S}  every {}s  q quits", fmt::localtime(now), o.interval);
    std::fputs("\033[H\033[2J", stdout);
    std::fputs(prism::smi::frame(devices, history, title, width, height - 1, absent).c_str(),
               stdout);
    std::fflush(stdout);
  } while (wait_unless_quit(o.interval));
  return 0;
}

// The exporter: a sample every interval, the latest at /metrics.
int export_metrics(const Options& o, Sources& sources) {
  std::mutex mutex;
  std::string latest = prism::smi::prometheus(sample(sources));
  httplib::Server server;
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mutex);
    res.set_content(latest, "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("prism smi: the metrics are at /metrics\n", "text/plain");
  });
  const int port = o.prometheus == 0                           ? server.bind_to_any_port(o.host)
                   : server.bind_to_port(o.host, o.prometheus) ? o.prometheus
                                                               : -1;
  PRISM_CHECK(port > 0, "smi: cannot listen on {}:{}", o.host, o.prometheus);
  std::fprintf(stderr, "prism smi: metrics on http://%s:%d/metrics\n", o.host.c_str(), port);
  std::thread sampler([&] {
    while (wait(o.interval)) {
      std::string text = prism::smi::prometheus(sample(sources));
      std::lock_guard lock(mutex);
      latest = std::move(text);
    }
    server.stop();
  });
  server.listen_after_bind();
  interrupted = 1;  // the server stopped on its own: let the sampler go too
  sampler.join();
  return 0;
}

int run(const Options& o) {
  PRISM_CHECK(o.interval > 0 && o.interval <= 3600, "smi: --interval must be in (0, 3600], got {}",
              o.interval);
  PRISM_CHECK(o.count >= 0, "smi: --count must be >= 0, got {}", o.count);
  PRISM_CHECK(o.prometheus >= -1 && o.prometheus <= 65535,
              "smi: --prometheus must be a port, 0..65535, got {}", o.prometheus);
  std::signal(SIGINT, [](int) { interrupted = 1; });
  std::signal(SIGTERM, [](int) { interrupted = 1; });
  std::vector<std::string> absent;
  Sources sources = open_sources(absent);
  sample(sources);  // the baseline of the rates
  if (!wait(o.interval)) return 0;
  if (o.prometheus >= 0) return export_metrics(o, sources);
  if (o.watch) return watch(o, sources, absent);
  for (int64_t n = 0; o.count == 0 || n < o.count; ++n) {
    if (n > 0 && !wait(o.interval)) break;
    const std::vector<prism::smi::Device> devices = sample(sources);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string text = o.json ? prism::smi::json(devices, now, absent) + "\n"
                                    : prism::smi::table(devices, terminal_size().first, absent);
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
      app.add_flag("--watch", o->watch, "a live view with each device's history; q quits");
      app.add_option("--interval", o->interval, "seconds between samples")->capture_default_str();
      app.add_option("--count", o->count, "samples to show (0: until interrupted)")
          ->capture_default_str();
      app.add_option("--prometheus", o->prometheus,
                     "serve the latest sample at http://HOST:PORT/metrics (0: any free port)");
      app.add_option("--host", o->host, "the exporter's address")->capture_default_str();
      return [o] { return run(*o); };
    }};

}  // namespace
