// fake_tpu_runtime.h: a scripted libtpu runtime metrics server, HTTP/2 and protobuf by hand.
#include "fake_tpu_runtime.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>

namespace prism::test {
namespace {

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kPing = 0x6,
                  kGoaway = 0x7, kWindowUpdate = 0x8, kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4, kPadded = 0x8;
constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr std::string_view kPath = "/tpu.monitoring.runtime.RuntimeMetricService/GetRuntimeMetric";
constexpr std::string_view kDutyCycle = "tpu.runtime.tensorcore.dutycycle.percent";
constexpr std::string_view kTotal = "tpu.runtime.hbm.memory.total.bytes";

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  const size_t n = payload.size();
  std::string out = {static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n),
                     static_cast<char>(type), static_cast<char>(flags)};
  out += be32(stream);
  out.append(payload);
  return out;
}

// An HPACK literal without indexing, its name new, neither Huffman coded (short strings only).
std::string literal(std::string_view name, std::string_view value) {
  std::string out(1, '\0');
  out.push_back(static_cast<char>(name.size()));
  out.append(name);
  out.push_back(static_cast<char>(value.size()));
  out.append(value);
  return out;
}

// Protobuf: a varint, and fields of the three wire types the messages use.
void varint(std::string& out, uint64_t v) {
  for (; v >= 128; v >>= 7) out.push_back(static_cast<char>(0x80 | (v & 0x7f)));
  out.push_back(static_cast<char>(v));
}
void field_varint(std::string& out, int field, uint64_t v) {
  varint(out, static_cast<uint64_t>(field) << 3);
  varint(out, v);
}
void field_bytes(std::string& out, int field, std::string_view bytes) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, bytes.size());
  out.append(bytes);
}
void field_double(std::string& out, int field, double v) {
  varint(out, static_cast<uint64_t>(field) << 3 | 1);
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}

// MetricResponse{metric: TPUMetric{name, metrics: [Metric{attribute: {key "device-id", value:
// {int_attr}}, timestamp, gauge: {as_int or as_double}}]}}.
std::string metric_response(std::string_view name, const std::vector<FakeTpuRuntime::Chip>& chips) {
  std::string tpu_metric;
  field_bytes(tpu_metric, 1, name);
  field_bytes(tpu_metric, 2, "scripted by the test");
  for (const FakeTpuRuntime::Chip& chip : chips) {
    std::string value, attribute, gauge, timestamp, metric;
    field_varint(value, 3, static_cast<uint64_t>(chip.id));
    field_bytes(attribute, 1, "device-id");
    field_bytes(attribute, 2, value);
    if (name == kDutyCycle) {
      field_double(gauge, 1, chip.duty);
    } else {
      field_varint(gauge, 2, static_cast<uint64_t>(name == kTotal ? chip.total : chip.used));
    }
    field_varint(timestamp, 1, 1700000000);  // seconds: a field the reader skips
    field_bytes(metric, 1, attribute);
    field_bytes(metric, 2, timestamp);
    field_bytes(metric, 3, gauge);
    field_bytes(tpu_metric, 3, metric);
  }
  std::string response;
  field_bytes(response, 1, tpu_metric);
  return response;
}

struct Closed {};  // the client went away, or the fake stops

// A connection's reads and writes; every wait also ends when the fake is woken to stop.
struct Peer {
  int fd, wake;
  void read(char* p, size_t n) const {
    while (n > 0) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {wake, POLLIN, 0}};
      if (poll(fds, 2, 10000) <= 0 || fds[1].revents) throw Closed{};
      const ssize_t got = recv(fd, p, n, 0);
      if (got <= 0) throw Closed{};
      p += got;
      n -= static_cast<size_t>(got);
    }
  }
  void write(std::string_view bytes) const {
    while (!bytes.empty()) {
      const ssize_t sent = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) throw Closed{};
      bytes.remove_prefix(static_cast<size_t>(sent));
    }
  }
};

}  // namespace

std::string fake_metric_response(std::string_view name,
                                 const std::vector<FakeTpuRuntime::Chip>& chips) {
  return metric_response(name, chips);
}

FakeTpuRuntime::FakeTpuRuntime() {
  if (pipe2(wake_, O_CLOEXEC) != 0) throw std::runtime_error("fake TPU runtime: pipe");
  listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      listen(listener_, 8) != 0 ||
      getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    throw std::runtime_error("fake TPU runtime: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { run(); });
}

FakeTpuRuntime::~FakeTpuRuntime() {
  stopping_ = true;
  (void)!::write(wake_[1], "x", 1);
  thread_.join();
  if (listener_ >= 0) close(listener_);
  close(wake_[0]);
  close(wake_[1]);
}

void FakeTpuRuntime::set_mode(Mode mode) {
  std::lock_guard lock(mutex_);
  mode_ = mode;
}

void FakeTpuRuntime::set_chips(std::vector<Chip> chips) {
  std::lock_guard lock(mutex_);
  chips_ = std::move(chips);
}

void FakeTpuRuntime::set_missing(std::string metric) {
  std::lock_guard lock(mutex_);
  missing_.insert(std::move(metric));
}

void FakeTpuRuntime::stop_listening() {
  stop_listening_ = true;
  (void)!::write(wake_[1], "x", 1);
  while (stop_listening_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void FakeTpuRuntime::run() {
  while (!stopping_) {
    pollfd fds[2] = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    poll(fds, listener_ >= 0 ? 2 : 1, -1);
    if (fds[0].revents) {
      char c;
      (void)!::read(wake_[0], &c, 1);
      if (stop_listening_) {
        close(listener_);
        listener_ = -1;
        stop_listening_ = false;
      }
      continue;
    }
    if (listener_ >= 0 && (fds[1].revents & POLLIN)) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve(fd);
      close(fd);
    }
  }
}

void FakeTpuRuntime::serve(int fd) {
  Mode mode;
  std::vector<Chip> chips;
  std::set<std::string> missing;
  {
    std::lock_guard lock(mutex_);
    mode = mode_;
    chips = chips_;
    missing = missing_;
  }
  const Peer peer{fd, wake_[0]};
  try {
    if (mode == Mode::kClose) return;
    if (mode == Mode::kStall) {
      for (char c;;) peer.read(&c, 1);  // until the client gives up
    }
    std::string preface(kPreface.size(), '\0');
    peer.read(preface.data(), preface.size());
    if (mode == Mode::kGarbage) return peer.write("this is not HTTP/2 at all\r\n");
    if (mode == Mode::kHttp1) {
      return peer.write(
          "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
    if (preface != kPreface) return;
    // SETTINGS (at most 100 streams at once), then a PING and a WINDOW_UPDATE to be handled.
    peer.write(frame(kSettings, 0, 0, std::string("\0\x03", 2) + be32(100)) +
               frame(kPing, 0, 0, "fakeping") + frame(kWindowUpdate, 0, 0, be32(1000)));
    if (mode == Mode::kGoaway) {
      peer.write(frame(kGoaway, 0, 0, be32(0) + be32(11) + "calm down"));
    }
    struct Request {
      std::string headers, data;
      bool complete = false, answered = false;
    };
    std::map<uint32_t, Request> requests;
    bool settings_acked = false, pinged = false;
    bool indexed = false;  // content-type is in the client's dynamic table (this connection's)
    for (;;) {
      char head[9];
      peer.read(head, 9);
      const size_t length = static_cast<size_t>(static_cast<uint8_t>(head[0])) << 16 |
                            static_cast<size_t>(static_cast<uint8_t>(head[1])) << 8 |
                            static_cast<uint8_t>(head[2]);
      if (length > (1 << 20)) return;
      const uint8_t type = static_cast<uint8_t>(head[3]), flags = static_cast<uint8_t>(head[4]);
      const uint32_t stream = (static_cast<uint32_t>(static_cast<uint8_t>(head[5])) << 24 |
                               static_cast<uint32_t>(static_cast<uint8_t>(head[6])) << 16 |
                               static_cast<uint32_t>(static_cast<uint8_t>(head[7])) << 8 |
                               static_cast<uint8_t>(head[8])) &
                              0x7fffffff;
      std::string payload(length, '\0');
      peer.read(payload.data(), length);
      if (type == kSettings && (flags & kAck)) settings_acked = true;
      if (type == kSettings && !(flags & kAck)) peer.write(frame(kSettings, kAck, 0, ""));
      if (type == kPing && (flags & kAck) && payload == "fakeping") {
        pinged = true;
        ++ping_acks_;
      }
      if (type == kPing && !(flags & kAck)) peer.write(frame(kPing, kAck, 0, payload));
      if (type == kHeaders) requests[stream].headers += payload;
      if (type == kData) requests[stream].data += payload;
      if ((type == kHeaders || type == kData) && (flags & kEndStream)) {
        requests[stream].complete = true;
      }
      if (!settings_acked || !pinged) continue;
      for (auto& [id, request] : requests) {
        if (!request.complete || request.answered) continue;
        request.answered = true;
        // The MetricRequest: 0x0a, the name's length (one byte: names are short), the name.
        const std::string& d = request.data;
        const std::string metric =
            d.size() >= 7 && d[5] == 0x0a ? d.substr(7, static_cast<uint8_t>(d[6])) : std::string();
        const std::string status_200(1, '\x88');  // :status 200, the static table's entry 8
        auto trailers_only = [&](std::string_view status, std::string_view message) {
          peer.write(frame(kHeaders, kEndStream | kEndHeaders, id,
                           status_200 + literal("content-type", "application/grpc") +
                               literal("grpc-status", status) + literal("grpc-message", message)));
        };
        if (request.headers.find(kPath) == std::string::npos) {
          trailers_only("12", "unknown%20method");
        } else if (mode == Mode::kReset) {
          peer.write(frame(kRstStream, 0, id, be32(2)));
        } else if (mode == Mode::kGrpcError) {
          trailers_only("13", "runtime%20metrics%20failed");
        } else if (missing.count(metric)) {
          trailers_only("5", "metric%20not%20found");
        } else {
          const std::string body =
              mode == Mode::kNotProto ? "\xff\xff\xff" : metric_response(metric, chips);
          // content-type: first a literal that enters the dynamic table (01, name index 31),
          // then that entry, index 62.
          std::string headers = status_200;
          headers += indexed ? std::string(1, '\xbe')
                             : "\x5f\x10"
                               "application/grpc";
          indexed = true;
          const std::string message = std::string(1, '\0') + be32(body.size()) + body;
          const std::string rest = message.substr(3);
          const std::string trailers = literal("grpc-status", "0");
          peer.write(frame(kHeaders, kEndHeaders, id, headers) +
                     frame(kData, 0, id, message.substr(0, 3)) +
                     frame(kData, kPadded, id, std::string(1, '\4') + rest + std::string(4, '\0')) +
                     frame(kHeaders, kEndStream, id, trailers.substr(0, 5)) +
                     frame(kContinuation, kEndHeaders, id, trailers.substr(5)));
        }
      }
    }
  } catch (const Closed&) {
  }
}

}  // namespace prism::test
