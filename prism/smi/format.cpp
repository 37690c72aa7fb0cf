// prism smi's samples as a table for people and as JSON for programs (smi.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
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

std::string table(const std::vector<Device>& devices, int width,
                  const std::vector<std::string>& absent) {
  // DEVICE (10, or the longest "source:index" and a space) NAME (the rest) UTIL (5) MEMORY (13)
  // TEMP (6) POWER (6) CLOCK (8), spaced.
  size_t device_width = 10;
  for (const Device& d : devices) {
    device_width = std::max(device_width, fmt::format("{}:{} ", d.source, d.index).size());
  }
  const int fixed = static_cast<int>(device_width) + 5 + 13 + 6 + 6 + 8 + 5;
  const size_t name_width = static_cast<size_t>(std::max(12, width - fixed));
  std::string out =
      fmt::format("{:<{}}{:<{}} {:>5} {:>13} {:>6} {:>6} {:>8}\n", "DEVICE", device_width, "NAME",
                  name_width, "UTIL", "MEMORY GiB", "TEMP", "POWER", "CLOCK");
  const std::string none = "-";
  for (const Device& d : devices) {
    const std::string util = d.utilization ? fmt::format("{:.0f}%", *d.utilization * 100) : none;
    const std::string memory =
        d.memory_total ? fmt::format("{} / {}", d.memory_used ? gib(*d.memory_used) : none,
                                     gib(*d.memory_total))
                       : none;
    const std::string temp = d.temperature_c ? fmt::format("{:.0f}C", *d.temperature_c) : none;
    const std::string power = d.power_w ? fmt::format("{:.1f}W", *d.power_w) : none;
    const std::string clock = d.clock_mhz ? fmt::format("{:.0f}MHz", *d.clock_mhz) : none;
    out += fmt::format("{:<{}}{:<{}} {:>5} {:>13} {:>6} {:>6} {:>8}\n",
                       fmt::format("{}:{}", d.source, d.index), device_width,
                       fit(d.name, name_width), name_width, util, memory, temp, power, clock);
    // Per core, wrapped at the width: "  cores  0:12%  1:3% ..."
    if (!d.core_utilization.empty()) {
      std::string line = "          cores";
      for (size_t c = 0; c < d.core_utilization.size(); ++c) {
        const std::string item = fmt::format(" {:>3}:{:>3.0f}%", c, d.core_utilization[c] * 100);
        if (line.size() + item.size() > static_cast<size_t>(std::max(width, 20))) {
          out += line + "\n";
          line = "               ";
        }
        line += item;
      }
      out += line + "\n";
    }
    for (const std::string& e : d.errors) out += "          ! " + e + "\n";
    for (const Process& p : d.processes) {
      out += fmt::format("          pid {} {}{}\n", p.pid, p.name,
                         p.memory_bytes ? " " + gib(*p.memory_bytes) + " GiB" : "");
      if (!p.doing.empty()) {
        out += fit("            " + p.doing, static_cast<size_t>(std::max(width, 20))) + "\n";
      }
    }
  }
  for (const std::string& a : absent) out += fit("absent: " + a, static_cast<size_t>(width)) + "\n";
  return out;
}

std::string json(const std::vector<Device>& devices, double time,
                 const std::vector<std::string>& absent) {
  using nlohmann::json;
  auto optional = [](const auto& v) -> json { return v ? json(*v) : json(nullptr); };
  json all = json::array();
  for (const Device& d : devices) {
    json processes = json::array();
    for (const Process& p : d.processes) {
      processes.push_back({{"pid", p.pid},
                           {"name", p.name},
                           {"memory_bytes", optional(p.memory_bytes)},
                           {"doing", p.doing.empty() ? json(nullptr) : json(p.doing)}});
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
  return json{{"time", time}, {"devices", all}, {"absent", absent}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

void History::add(const std::vector<Device>& devices) {
  for (const Device& d : devices) {
    const std::string k = key(d);
    auto it =
        std::find_if(series_.begin(), series_.end(), [&](const auto& s) { return s.first == k; });
    if (it == series_.end()) it = series_.insert(series_.end(), {k, Series{}});
    Series& s = it->second;
    s.utilization.push_back(d.utilization.value_or(NAN));
    s.memory.push_back(d.memory_total && d.memory_used && *d.memory_total > 0
                           ? double(*d.memory_used) / double(*d.memory_total)
                           : NAN);
    for (std::vector<double>* v : {&s.utilization, &s.memory}) {
      if (v->size() > keep_) v->erase(v->begin(), v->end() - static_cast<std::ptrdiff_t>(keep_));
    }
  }
}

const std::vector<double>& History::utilization(const Device& d) const {
  for (const auto& [k, s] : series_)
    if (k == key(d)) return s.utilization;
  return empty_.utilization;
}

const std::vector<double>& History::memory(const Device& d) const {
  for (const auto& [k, s] : series_)
    if (k == key(d)) return s.memory;
  return empty_.memory;
}

std::string frame(const std::vector<Device>& devices, const History& history,
                  const std::string& title, int width, int height,
                  const std::vector<std::string>& absent) {
  width = std::max(width, 40);
  // Eighths of a cell, as block characters; a missing reading is a blank.
  static const char* const kBlocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                        "\u2585", "\u2586", "\u2587", "\u2588"};
  auto spark = [&](const std::vector<double>& v, size_t cells) {
    std::string out;
    const size_t from = v.size() > cells ? v.size() - cells : 0;
    for (size_t i = v.size() - from; i < cells; ++i) out += ' ';  // right-aligned
    for (size_t i = from; i < v.size(); ++i) {
      if (std::isnan(v[i])) {
        out += ' ';
        continue;
      }
      out += kBlocks[std::clamp(static_cast<int>(v[i] * 8), 0, 7)];
    }
    return out;
  };
  std::vector<std::string> lines;
  lines.push_back(fit(title, static_cast<size_t>(width)));
  lines.push_back("");
  std::istringstream t(table(devices, width, absent));
  for (std::string line; std::getline(t, line);) lines.push_back(line);
  const size_t cells = static_cast<size_t>(width - 12);
  for (const Device& d : devices) {
    lines.push_back("");
    lines.push_back(fmt::format("{}:{} over the last {} samples", d.source, d.index,
                                std::min(history.utilization(d).size(), cells)));
    lines.push_back(fmt::format("{:<11} {}", "  util", spark(history.utilization(d), cells)));
    lines.push_back(fmt::format("{:<11} {}", "  memory", spark(history.memory(d), cells)));
  }
  if (static_cast<int>(lines.size()) > height) lines.resize(std::max(height, 1));
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
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
