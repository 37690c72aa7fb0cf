// Google's Cloud TPUs through libtpu's runtime metrics (smi.h). A program that uses the TPU
// (JAX, PyTorch/XLA, ...) runs libtpu, which serves the chips' metrics over gRPC on localhost:
// port 8431, or the ports TPU_RUNTIME_METRICS_PORTS lists (one per process where several share
// a host), service tpu.monitoring.runtime.RuntimeMetricService, method GetRuntimeMetric(
// MetricRequest) returns (MetricResponse). The messages are those of the proto Google publishes
// with its tpu-info tool; a MetricResponse holds a TPUMetric whose Metrics carry, each, a
// device id (an Attribute's integer value) and a Gauge. Three metrics make a row, as tpu-info
// reads them: HBM in use and in all, per device, and the TensorCores' duty cycle, per chip.
//
// The calls go over grpc.h's small HTTP/2 client, all three on one connection per port, within
// half a second. Nothing listening is not an error (no program uses the TPU), a port that
// answers otherwise than with gRPC or with a message that does not parse is one, said on its
// rows. The chips' kind comes from their PCI ids in sysfs (Google's vendor id, 0x1ae0, and the
// device ids tpu-info tells apart), the processes from /proc: the one serving the port, else
// (as tpu-info finds them) those holding the chip's /dev/accelN or /dev/vfio/N open.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "prism/smi/grpc.h"
#include "prism/smi/smi.h"
#include "prism/smi/vendor.h"

namespace prism::smi {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMethod = "/tpu.monitoring.runtime.RuntimeMetricService/GetRuntimeMetric";
constexpr int kDefaultPort = 8431;
constexpr std::chrono::milliseconds kTimeout{500};
constexpr size_t kMostValues = 4096;  // values in one answer

// The metrics a row is made of, in the order they are asked.
enum { kUsed, kTotal, kDutyCycle, kMetrics };
constexpr const char* kMetricNames[kMetrics] = {"tpu.runtime.hbm.memory.usage.bytes",
                                                "tpu.runtime.hbm.memory.total.bytes",
                                                "tpu.runtime.tensorcore.dutycycle.percent"};

// Protobuf's wire format, read with every length checked against what is left; anything that
// does not fit throws Malformed.
struct Malformed {};

class Wire {
 public:
  explicit Wire(std::string_view data) : data_(data) {}
  // Steps to the next field; false at the end.
  bool next() {
    if (at_ >= data_.size()) return false;
    const uint64_t key = varint();
    field_ = key >> 3;
    type_ = static_cast<int>(key & 7);
    if (field_ == 0) throw Malformed{};
    return true;
  }
  uint64_t field() const { return field_; }
  int type() const { return type_; }

  uint64_t as_varint() {
    if (type_ != 0) throw Malformed{};
    return varint();
  }
  double as_double() {  // fixed64, little-endian
    if (type_ != 1 || data_.size() - at_ < 8) throw Malformed{};
    uint64_t bits = 0;
    for (int i = 7; i >= 0; --i) bits = bits << 8 | static_cast<uint8_t>(data_[at_ + i]);
    at_ += 8;
    return std::bit_cast<double>(bits);
  }
  std::string_view as_bytes() {
    if (type_ != 2) throw Malformed{};
    const uint64_t n = varint();
    if (n > data_.size() - at_) throw Malformed{};
    const std::string_view bytes = data_.substr(at_, n);
    at_ += n;
    return bytes;
  }
  void skip() {
    switch (type_) {
      case 0:
        varint();
        break;
      case 1:
        as_double();
        break;
      case 2:
        as_bytes();
        break;
      case 5:
        if (data_.size() - at_ < 4) throw Malformed{};
        at_ += 4;
        break;
      default:  // groups (3, 4), long deprecated, and types that do not exist
        throw Malformed{};
    }
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= data_.size()) throw Malformed{};
      const uint8_t b = static_cast<uint8_t>(data_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw Malformed{};
  }

  std::string_view data_;
  size_t at_ = 0;
  uint64_t field_ = 0;
  int type_ = 0;
};

// MetricRequest{metric_name = 1}.
std::string request(std::string_view metric) {
  std::string out(1, '\x0a');
  for (uint64_t n = metric.size();; n >>= 7) {
    out.push_back(static_cast<char>((n & 0x7f) | (n >= 128 ? 0x80 : 0)));
    if (n < 128) break;
  }
  out.append(metric);
  return out;
}

std::optional<int64_t> digits(std::string_view s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::stoll(std::string(s));
}

std::optional<int64_t> device_of(std::string_view attr_value, bool nested = false);

// An Attribute{key = 1, value = 2 (AttrValue)}: its key and value.
std::pair<std::string_view, std::string_view> attribute(std::string_view a) {
  std::pair<std::string_view, std::string_view> kv;
  Wire w(a);
  while (w.next()) {
    if (w.field() == 1) {
      kv.first = w.as_bytes();
    } else if (w.field() == 2) {
      kv.second = w.as_bytes();
    } else {
      w.skip();
    }
  }
  return kv;
}

// The device an AttrValue names: its int_attr (3) as tpu-info reads it, or a string_attr (1) of
// digits; in a kvlist_attr (6: KeyValueList{attributes = 1}), its device_ordinal's (or
// device-id's), the way libtpu labels some metrics.
std::optional<int64_t> device_of(std::string_view attr_value, bool nested) {
  std::optional<int64_t> id;
  Wire w(attr_value);
  while (w.next()) {
    if (w.field() == 3) {
      id = static_cast<int64_t>(w.as_varint());
    } else if (w.field() == 1) {
      if (auto d = digits(w.as_bytes())) id = d;
    } else if (w.field() == 6 && !nested) {
      Wire list(w.as_bytes());
      while (list.next()) {
        if (list.field() != 1) {
          list.skip();
          continue;
        }
        const auto [key, value] = attribute(list.as_bytes());
        if (key == "device_ordinal" || key == "device-id" || key == "device_id") {
          if (auto d = device_of(value, true)) id = d;
        }
      }
    } else {
      w.skip();
    }
  }
  return id;
}

// A Gauge{as_double = 1, as_int = 2, ...} or Counter{as_double = 1, as_int = 2 (unsigned)}.
std::optional<double> number_of(std::string_view measure, bool counter) {
  std::optional<double> value;
  Wire w(measure);
  while (w.next()) {
    if (w.field() == 1) {
      value = w.as_double();
    } else if (w.field() == 2) {
      const uint64_t v = w.as_varint();
      value = counter ? static_cast<double>(v) : static_cast<double>(static_cast<int64_t>(v));
    } else {
      w.skip();
    }
  }
  return value;
}

// The values of a MetricResponse{metric = 1 (TPUMetric{metrics = 3 (Metric{attribute = 1,
// gauge = 3, counter = 4})})} by device; values without a device or a number are left out.
std::map<int64_t, double> values_of(std::string_view response) {
  std::map<int64_t, double> values;
  size_t seen = 0;
  Wire r(response);
  while (r.next()) {
    if (r.field() != 1) {
      r.skip();
      continue;
    }
    Wire t(r.as_bytes());
    while (t.next()) {
      if (t.field() != 3) {
        t.skip();
        continue;
      }
      if (++seen > kMostValues) throw Malformed{};
      std::optional<int64_t> device;
      std::optional<double> value;
      Wire m(t.as_bytes());
      while (m.next()) {
        if (m.field() == 1) {
          device = device_of(attribute(m.as_bytes()).second);
        } else if (m.field() == 3 || m.field() == 4) {
          value = number_of(m.as_bytes(), m.field() == 4);
        } else {
          m.skip();
        }
      }
      if (device && value && std::isfinite(*value)) values[*device] = *value;
    }
  }
  return values;
}

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The chips' kind, by their PCI device ids (and v2's and v3's subsystem ids), as tpu-info
// tells them apart; `per_chip`: the devices libtpu reports per chip (v2, v3 and 7x have two
// TensorCores that are devices of their own).
struct Kind {
  std::string name = "TPU";
  int per_chip = 1;
};

std::pair<Kind, int> pci_chips(const fs::path& root) {
  std::map<std::string, std::pair<Kind, int>> kinds;
  std::error_code ec;
  for (fs::directory_iterator it(root / "sys/bus/pci/devices", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (read_line(it->path() / "vendor") != "0x1ae0") continue;
    const std::string device = read_line(it->path() / "device");
    const std::string subsystem = read_line(it->path() / "subsystem_device");
    Kind kind;
    if (device == "0x0027" && subsystem == "0x004e") {
      kind = {"TPU v2", 2};
    } else if (device == "0x0027" && subsystem == "0x004f") {
      kind = {"TPU v3", 2};
    } else if (device == "0x005e") {
      kind = {"TPU v4", 1};
    } else if (device == "0x0063") {
      kind = {"TPU v5e", 1};
    } else if (device == "0x0062") {
      kind = {"TPU v5p", 1};
    } else if (device == "0x006f") {
      kind = {"TPU v6e", 1};
    } else if (device == "0x0076") {
      kind = {"TPU7x", 2};
    } else {
      continue;  // another Google PCI device (gVNIC, say)
    }
    auto& [k, count] = kinds[kind.name];
    k = kind;
    ++count;
  }
  if (kinds.empty()) return {Kind{}, 0};
  int count = 0;
  for (const auto& [_, kc] : kinds) count += kc.second;
  // Chips of one kind (as on every TPU VM); a mix is named only "TPU".
  return {kinds.size() == 1 ? kinds.begin()->second.first : Kind{}, count};
}

// TPU_RUNTIME_METRICS_PORTS's ports ("8431,8432"), else 8431.
std::vector<int> metric_ports(std::string& why) {
  const char* env = std::getenv("TPU_RUNTIME_METRICS_PORTS");
  std::string text = env ? env : "";
  if (text.find_first_not_of(" \t") == std::string::npos) return {kDefaultPort};
  std::vector<int> ports;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    const std::optional<int64_t> port = digits(item);
    if (!port || *port < 1 || *port > 65535 || ports.size() >= 64) {
      why = "TPU_RUNTIME_METRICS_PORTS must be up to 64 ports, separated by commas; got '" + text +
            "'";
      return {};
    }
    if (std::find(ports.begin(), ports.end(), *port) == ports.end()) {
      ports.push_back(static_cast<int>(*port));
    }
  }
  if (ports.empty()) why = "TPU_RUNTIME_METRICS_PORTS names no port";
  return ports;
}

// One port's calls, on IPv4's loopback, else IPv6's (a server may listen on either).
grpc::Result ask(int port, const std::vector<grpc::Call>& calls) {
  grpc::Result r = grpc::unary("127.0.0.1", port, calls, kTimeout);
  if (!r.refused) return r;
  grpc::Result r6 = grpc::unary("::1", port, calls, kTimeout);
  return r6.connected ? r6 : r;
}

// Who uses what: the processes with a TPU's /dev node open ("/dev/accel0", "/dev/vfio/0"),
// and those holding the sockets that listen on the metrics' ports.
struct Users {
  std::map<std::string, std::set<int64_t>> nodes;
  std::map<int, std::set<int64_t>> ports;
};

bool tpu_node(std::string_view path) {
  for (std::string_view prefix : {"/dev/accel", "/dev/vfio/"}) {
    if (path.starts_with(prefix) && digits(path.substr(prefix.size()))) return true;
  }
  return false;
}

Users users(const fs::path& root, const std::vector<int>& ports) {
  Users u;
  // The listening sockets' inodes, from the kernel's tables (state 0A: LISTEN).
  std::map<std::string, int> listening;  // "socket:[inode]" -> port
  for (const char* table : {"proc/net/tcp", "proc/net/tcp6"}) {
    std::ifstream in(root / table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode) ||
          state != "0A") {
        continue;
      }
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      const int port = static_cast<int>(std::strtol(local.c_str() + colon + 1, nullptr, 16));
      if (std::find(ports.begin(), ports.end(), port) != ports.end()) {
        listening["socket:[" + inode + "]"] = port;
      }
    }
  }
  // Every process's open files (those of other users' processes are not readable: skipped).
  std::error_code ec;
  for (fs::directory_iterator it(root / "proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> pid = digits(it->path().filename().string());
    if (!pid) continue;
    std::error_code fd_ec;
    for (fs::directory_iterator fd(it->path() / "fd", fd_ec), fd_end; !fd_ec && fd != fd_end;
         fd.increment(fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd->path(), link_ec).string();
      if (link_ec) continue;
      if (tpu_node(target)) {
        u.nodes[target].insert(*pid);
      } else if (auto l = listening.find(target); l != listening.end()) {
        u.ports[l->second].insert(*pid);
      }
    }
  }
  return u;
}

class TpuSource final : public Source {
 public:
  TpuSource(std::vector<int> ports, fs::path root, Kind kind)
      : ports_(std::move(ports)), root_(std::move(root)), kind_(std::move(kind)) {}
  std::string name() const override { return "tpu"; }

  std::vector<Device> sample() override {
    std::vector<grpc::Call> calls;
    for (const char* metric : kMetricNames) calls.push_back({kMethod, request(metric)});
    std::vector<Device> rows;
    std::optional<Users> using_;  // found once a row needs it
    for (const int port : ports_) {
      const std::string where = "localhost:" + std::to_string(port);
      const grpc::Result r = ask(port, calls);
      const std::vector<int64_t> known = known_devices(port);
      if (r.refused || !r.error.empty()) {
        // Nothing listens: no program uses these chips (now). Something else went wrong: it is
        // said on the port's rows, or on one for the port where it has none yet.
        if (r.refused && !answered_.count(port)) continue;
        const std::string why =
            where + ": " +
            (r.refused ? "the TPU runtime stopped answering (nothing listens)" : r.error);
        if (known.empty()) rows.emplace_back(blank(port, kPortRow)).errors.push_back(why);
        for (const int64_t id : known) rows.emplace_back(blank(port, id)).errors.push_back(why);
        continue;
      }
      answered_.insert(port);
      // Each metric's values by device, or why there are none. A metric that this libtpu does
      // not have (NOT_FOUND, UNIMPLEMENTED) leaves its reading out without an error.
      std::map<int64_t, double> values[kMetrics];
      std::vector<std::string> failures;
      std::set<std::string> errors;  // the calls' own
      std::string lacking;           // why the runtime has no such metric
      for (int k = 0; k < kMetrics; ++k) {
        const grpc::Reply& reply = r.replies[k];
        if (!reply.error.empty()) {
          if (reply.status != 5 && reply.status != 12) {
            failures.push_back(where + ": " + kMetricNames[k] + ": " + reply.error);
            errors.insert(reply.error);
          } else {
            lacking = reply.error;
          }
          continue;
        }
        try {
          values[k] = values_of(reply.message);
        } catch (const Malformed&) {
          failures.push_back(where + ": the answer for " + kMetricNames[k] +
                             " is not a MetricResponse");
        }
      }
      // Every call failed the same way (a server that answers nothing but errors): said once.
      if (failures.size() == static_cast<size_t>(kMetrics) && errors.size() == 1) {
        failures = {where + ": " + *errors.begin()};
      }
      std::set<int64_t> ids;
      for (const auto& v : values) {
        for (const auto& [id, _] : v) ids.insert(id);
      }
      if (ids.empty() && known.empty() && !failures.empty()) {
        rows.emplace_back(blank(port, kPortRow)).errors = failures;
      }
      // A runtime without any of the metrics would show nothing at all: said on a row.
      if (ids.empty() && known.empty() && failures.empty() && !lacking.empty()) {
        rows.emplace_back(blank(port, kPortRow))
            .errors.push_back(where + ": the TPU runtime has none of the metrics prism reads (" +
                              lacking + ")");
      }
      // The duty cycle is per chip; where the memory is per TensorCore (two a chip, each a
      // device: v2, v3), a chip's cores share its duty cycle, as tpu-info shows it.
      const size_t cores = std::max(values[kUsed].size(), values[kTotal].size());
      const bool per_chip_duty = kind_.per_chip > 1 && !values[kDutyCycle].empty() &&
                                 values[kDutyCycle].size() * kind_.per_chip == cores;
      for (const int64_t id : ids) {
        Device& d = rows.emplace_back(blank(port, id));
        if (auto u = values[kUsed].find(id); u != values[kUsed].end() && u->second >= 0) {
          d.memory_used = static_cast<uint64_t>(u->second);
        }
        if (auto t = values[kTotal].find(id); t != values[kTotal].end() && t->second >= 0) {
          d.memory_total = static_cast<uint64_t>(t->second);
        }
        const int64_t duty_id = per_chip_duty ? id / kind_.per_chip : id;
        if (auto c = values[kDutyCycle].find(duty_id); c != values[kDutyCycle].end()) {
          d.utilization = std::clamp(c->second / 100.0, 0.0, 1.0);
        }
        d.errors = failures;
        if (!using_) using_ = users(root_, ports_);
        processes(d, port, id, *using_);
      }
      // Devices seen before and not now: gone, or not read for the reasons said.
      for (const int64_t id : known) {
        if (ids.count(id)) continue;
        Device& d = rows.emplace_back(blank(port, id));
        d.errors = failures;
        if (failures.empty()) {
          d.errors.push_back(where + ": the TPU runtime no longer reports this device");
        }
      }
    }
    std::sort(rows.begin(), rows.end(),
              [](const Device& a, const Device& b) { return a.index < b.index; });
    return rows;
  }

  // Whether anything listens on the ports (it need not speak gRPC: that is said on a row).
  bool listened_to() const {
    for (const int port : ports_) {
      if (!ask(port, {}).refused) return true;
    }
    return false;
  }

 private:
  static constexpr int64_t kPortRow = INT64_MIN;  // a row for a port that reports no device

  // A row for the device `id` of `port`, numbered the first time it is seen and so on.
  Device blank(int port, int64_t id) {
    auto [it, added] = index_.try_emplace({port, id}, static_cast<int>(index_.size()));
    Device d;
    d.source = "tpu";
    d.index = it->second;
    d.name = kind_.name;
    return d;
  }

  std::vector<int64_t> known_devices(int port) const {
    std::vector<int64_t> ids;
    for (const auto& [key, _] : index_) {
      if (key.first == port && key.second != kPortRow) ids.push_back(key.second);
    }
    return ids;
  }

  // The process that serves the port uses its chips; where it cannot be found (another user's,
  // another network namespace), those that hold the chip's /dev node open, taking the device
  // id for the chip's number as tpu-info does. One process on a chip holds its memory in use.
  void processes(Device& d, int port, int64_t id, const Users& u) const {
    std::set<int64_t> pids;
    if (auto p = u.ports.find(port); p != u.ports.end()) pids = p->second;
    if (pids.empty()) {
      const std::string chip = std::to_string(id / kind_.per_chip);
      for (const std::string& node : {"/dev/accel" + chip, "/dev/vfio/" + chip}) {
        if (auto n = u.nodes.find(node); n != u.nodes.end())
          pids.insert(n->second.begin(), n->second.end());
      }
    }
    for (const int64_t pid : pids) {
      Process p;
      p.pid = pid;
      p.name = vendor::process_name(pid);
      if (pids.size() == 1) p.memory_bytes = d.memory_used;
      d.processes.push_back(std::move(p));
    }
  }

  std::vector<int> ports_;
  fs::path root_;
  Kind kind_;
  std::map<std::pair<int, int64_t>, int> index_;
  std::set<int> answered_;  // ports that have answered once
};

}  // namespace

std::optional<std::map<int64_t, double>> tpu_metric_values(std::string_view response) {
  try {
    return values_of(response);
  } catch (const Malformed&) {
    return std::nullopt;
  }
}

std::unique_ptr<Source> tpu_source(std::string* absent, std::string root) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<Source> {
    if (absent) *absent = "tpu: " + why;
    return nullptr;
  };
  std::string why;
  std::vector<int> ports = metric_ports(why);
  if (ports.empty()) return fail(why);
  const auto [kind, chips] = pci_chips(root);
  std::string where = "localhost:" + std::to_string(ports[0]);
  for (size_t i = 1; i < ports.size(); ++i) where += "," + std::to_string(ports[i]);
  auto source = std::make_unique<TpuSource>(ports, root, kind);
  if (source->listened_to()) return source;
  std::string have;
  if (chips > 0) {
    have = std::to_string(chips) + " " + kind.name + (chips == 1 ? " chip" : " chips") + ", but ";
  }
  return fail(have + "nothing listens on " + where + " (where libtpu serves its metrics)");
}

}  // namespace prism::smi
