// prism smi's samples as a table for people and as JSON for programs (smi.h).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

std::string gib(uint64_t bytes) { return fmt::format("{:.1f}", bytes / double(1ull << 30)); }

// Cut to `width` characters (the names are ASCII in practice; a cut never splits a UTF-8
// sequence: it backs up to the start of one).
std::string fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  size_t n = width;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

std::string table(const std::vector<Device>& devices, int width) {
  // DEVICE (8) NAME (the rest) UTIL (5) MEMORY (13) TEMP (6) POWER (7) CLOCK (9), spaced.
  const int fixed = 8 + 5 + 13 + 6 + 7 + 9 + 5;
  const size_t name_width = static_cast<size_t>(std::max(12, width - fixed));
  std::string out = fmt::format("{:<8}{:<{}} {:>5} {:>13} {:>6} {:>7} {:>9}\n", "DEVICE", "NAME",
                                name_width, "UTIL", "MEMORY GiB", "TEMP", "POWER", "CLOCK");
  const std::string none = "-";
  for (const Device& d : devices) {
    const std::string util = d.utilization ? fmt::format("{:.0f}%", *d.utilization * 100) : none;
    const std::string memory =
        d.memory_total ? fmt::format("{} / {}", d.memory_used ? gib(*d.memory_used) : "?",
                                     gib(*d.memory_total))
                       : none;
    const std::string temp = d.temperature_c ? fmt::format("{:.0f}C", *d.temperature_c) : none;
    const std::string power = d.power_w ? fmt::format("{:.1f}W", *d.power_w) : none;
    const std::string clock = d.clock_mhz ? fmt::format("{:.0f}MHz", *d.clock_mhz) : none;
    out += fmt::format("{:<8}{:<{}} {:>5} {:>13} {:>6} {:>7} {:>9}\n",
                       fmt::format("{}:{}", d.source, d.index), fit(d.name, name_width), name_width,
                       util, memory, temp, power, clock);
    // Per core, wrapped at the width: "  cores  0:12%  1:3% ..."
    if (!d.core_utilization.empty()) {
      std::string line = "        cores";
      for (size_t c = 0; c < d.core_utilization.size(); ++c) {
        const std::string item = fmt::format(" {:>3}:{:>3.0f}%", c, d.core_utilization[c] * 100);
        if (line.size() + item.size() > static_cast<size_t>(std::max(width, 20))) {
          out += line + "\n";
          line = "             ";
        }
        line += item;
      }
      out += line + "\n";
    }
    for (const std::string& e : d.errors) out += "        ! " + e + "\n";
    for (const Process& p : d.processes) {
      out += fmt::format("        pid {} {}{}\n", p.pid, p.name,
                         p.memory_bytes ? " " + gib(*p.memory_bytes) + " GiB" : "");
    }
  }
  return out;
}

std::string json(const std::vector<Device>& devices, double time) {
  using nlohmann::json;
  auto optional = [](const auto& v) -> json { return v ? json(*v) : json(nullptr); };
  json all = json::array();
  for (const Device& d : devices) {
    json processes = json::array();
    for (const Process& p : d.processes) {
      processes.push_back(
          {{"pid", p.pid}, {"name", p.name}, {"memory_bytes", optional(p.memory_bytes)}});
    }
    all.push_back({{"source", d.source},
                   {"index", d.index},
                   {"name", d.name},
                   {"utilization", optional(d.utilization)},
                   {"core_utilization", d.core_utilization},
                   {"memory_used_bytes", optional(d.memory_used)},
                   {"memory_total_bytes", optional(d.memory_total)},
                   {"temperature_c", optional(d.temperature_c)},
                   {"power_w", optional(d.power_w)},
                   {"clock_mhz", optional(d.clock_mhz)},
                   {"processes", processes},
                   {"errors", d.errors}});
  }
  // Names come from files and vendor libraries: replace what is not UTF-8 rather than throw.
  return json{{"time", time}, {"devices", all}}.dump(-1, ' ', false,
                                                     json::error_handler_t::replace);
}

std::string prometheus(const std::vector<Device>& devices) {
  // Label values escaped as the format says: backslash, double quote and newline.
  auto quoted = [](const std::string& v) {
    std::string out;
    for (char c : v) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  };
  auto labels = [&](const Device& d) {
    return fmt::format("source=\"{}\",index=\"{}\"", quoted(d.source), d.index);
  };
  std::string out;
  auto family = [&](const char* name, const char* help, auto value_of) {
    std::string lines;
    for (const Device& d : devices) lines += value_of(d);
    if (lines.empty()) return;
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name) + lines;
  };
  auto reading = [&](const char* name, auto get, double scale = 1) {
    return [=](const Device& d) -> std::string {
      const auto v = get(d);
      if (!v) return "";
      return fmt::format("{}{{{}}} {}\n", name, labels(d), static_cast<double>(*v) * scale);
    };
  };
  family("prism_device_info", "A device prism smi sees; its model in the name label.",
         [&](const Device& d) {
           return fmt::format("prism_device_info{{{},name=\"{}\"}} 1\n", labels(d), quoted(d.name));
         });
  family("prism_device_utilization_ratio", "Busy share of the last interval.",
         reading("prism_device_utilization_ratio", [](const Device& d) { return d.utilization; }));
  family("prism_device_core_utilization_ratio", "A CPU core's busy share of the last interval.",
         [&](const Device& d) {
           std::string lines;
           for (size_t c = 0; c < d.core_utilization.size(); ++c) {
             lines += fmt::format("prism_device_core_utilization_ratio{{{},core=\"{}\"}} {}\n",
                                  labels(d), c, d.core_utilization[c]);
           }
           return lines;
         });
  family("prism_device_memory_used_bytes", "Memory in use.",
         reading("prism_device_memory_used_bytes", [](const Device& d) { return d.memory_used; }));
  family(
      "prism_device_memory_total_bytes", "Memory in all.",
      reading("prism_device_memory_total_bytes", [](const Device& d) { return d.memory_total; }));
  family(
      "prism_device_temperature_celsius", "Temperature.",
      reading("prism_device_temperature_celsius", [](const Device& d) { return d.temperature_c; }));
  family("prism_device_power_watts", "Power drawn, over the last interval.",
         reading("prism_device_power_watts", [](const Device& d) { return d.power_w; }));
  family("prism_device_clock_hertz", "Clock (a CPU's: its cores' mean).",
         reading(
             "prism_device_clock_hertz", [](const Device& d) { return d.clock_mhz; }, 1e6));
  family("prism_device_read_errors", "Readings the source could not take in this sample.",
         [&](const Device& d) {
           return fmt::format("prism_device_read_errors{{{}}} {}\n", labels(d), d.errors.size());
         });
  return out;
}

}  // namespace prism::smi
