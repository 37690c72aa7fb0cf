// grpc.h: gRPC unary calls over plaintext HTTP/2, and the HPACK decoding their answers need.
#include "prism/smi/grpc.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace prism::smi::grpc {
namespace {

using Clock = std::chrono::steady_clock;

// HPACK's Huffman code (RFC 7541, appendix B) is canonical: the codes of one length are
// consecutive, in the order of their symbols, and follow those of the shorter lengths. So each
// symbol's length defines the code; here are the 256 octets' and, last, EOS's.
constexpr uint8_t kHuffmanLengths[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,  // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,  // 0x10
    6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,   // 0x20
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10,  // 0x30
    13, 6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,   // 0x40
    7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,   // 0x50
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,   // 0x60
    6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7,  15, 11, 14, 13, 28,  // 0x70
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,  // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,  // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,  // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,  // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,  // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,  // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,  // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,  // 0xf0
    30};                                                             // EOS

constexpr int kEos = 256;
constexpr int kLongest = 30;

// The canonical code's tables: per length, its first code, how many codes it has, and where
// its symbols start in `symbols` (ordered by length, then symbol).
struct Huffman {
  uint32_t first[kLongest + 1] = {};
  uint32_t count[kLongest + 1] = {};
  uint32_t offset[kLongest + 1] = {};
  uint16_t symbols[257] = {};
  Huffman() {
    for (uint8_t length : kHuffmanLengths) ++count[length];
    for (int length = 1, at = 0; length <= kLongest; ++length) {
      offset[length] = at;
      at += count[length];
    }
    uint32_t placed[kLongest + 1] = {};
    for (int s = 0; s < 257; ++s) {
      const int length = kHuffmanLengths[s];
      symbols[offset[length] + placed[length]++] = static_cast<uint16_t>(s);
    }
    for (int length = 1; length <= kLongest; ++length) {
      first[length] = (first[length - 1] + count[length - 1]) << 1;
    }
  }
};

// RFC 7541, appendix A.
constexpr std::pair<const char*, const char*> kStaticTable[61] = {
    {":authority", ""},
    {":method", "GET"},
    {":method", "POST"},
    {":path", "/"},
    {":path", "/index.html"},
    {":scheme", "http"},
    {":scheme", "https"},
    {":status", "200"},
    {":status", "204"},
    {":status", "206"},
    {":status", "304"},
    {":status", "400"},
    {":status", "404"},
    {":status", "500"},
    {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"},
    {"accept-language", ""},
    {"accept-ranges", ""},
    {"accept", ""},
    {"access-control-allow-origin", ""},
    {"age", ""},
    {"allow", ""},
    {"authorization", ""},
    {"cache-control", ""},
    {"content-disposition", ""},
    {"content-encoding", ""},
    {"content-language", ""},
    {"content-length", ""},
    {"content-location", ""},
    {"content-range", ""},
    {"content-type", ""},
    {"cookie", ""},
    {"date", ""},
    {"etag", ""},
    {"expect", ""},
    {"expires", ""},
    {"from", ""},
    {"host", ""},
    {"if-match", ""},
    {"if-modified-since", ""},
    {"if-none-match", ""},
    {"if-range", ""},
    {"if-unmodified-since", ""},
    {"last-modified", ""},
    {"link", ""},
    {"location", ""},
    {"max-forwards", ""},
    {"proxy-authenticate", ""},
    {"proxy-authorization", ""},
    {"range", ""},
    {"referer", ""},
    {"refresh", ""},
    {"retry-after", ""},
    {"server", ""},
    {"set-cookie", ""},
    {"strict-transport-security", ""},
    {"transfer-encoding", ""},
    {"user-agent", ""},
    {"vary", ""},
    {"via", ""},
    {"www-authenticate", ""},
};

// HTTP/2's frame types and flags (RFC 9113, section 6).
enum : uint8_t {
  kData = 0x0,
  kHeaders = 0x1,
  kPriority = 0x2,
  kRstStream = 0x3,
  kSettings = 0x4,
  kPushPromise = 0x5,
  kPing = 0x6,
  kGoaway = 0x7,
  kWindowUpdate = 0x8,
  kContinuation = 0x9,
};
enum : uint8_t {
  kEndStream = 0x1,
  kAck = 0x1,
  kEndHeaders = 0x4,
  kPadded = 0x8,
  kPriorityFlag = 0x20,
};

constexpr size_t kMostFrame = 1 << 20;     // bytes of one frame's payload
constexpr size_t kMostData = 1 << 20;      // bytes of answers, all calls together
constexpr size_t kMostBlock = 64 << 10;    // bytes of one header block
constexpr size_t kMostReceived = 4 << 20;  // bytes from the server, frames of every type
constexpr uint32_t kWindow = 1 << 20;      // the flow-control window granted to the server

struct Failure {
  std::string why;
};

std::string seconds(std::chrono::milliseconds t) { return fmt::format("{:g} s", t.count() / 1e3); }

uint32_t be32(std::string_view p) {
  return static_cast<uint32_t>(static_cast<uint8_t>(p[0])) << 24 |
         static_cast<uint32_t>(static_cast<uint8_t>(p[1])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(p[2])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(p[3]));
}

void put32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}

std::string frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string out;
  const size_t n = payload.size();
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  put32(out, stream & 0x7fffffff);
  out.append(payload);
  return out;
}

// An HPACK integer with an N-bit prefix (RFC 7541, section 5.1); `high` holds the first
// octet's bits above the prefix.
void put_integer(std::string& out, int prefix, uint8_t high, uint64_t value) {
  const uint32_t mask = (1u << prefix) - 1;
  if (value < mask) {
    out.push_back(static_cast<char>(high | value));
    return;
  }
  out.push_back(static_cast<char>(high | mask));
  for (value -= mask; value >= 128; value >>= 7) {
    out.push_back(static_cast<char>(0x80 | (value & 0x7f)));
  }
  out.push_back(static_cast<char>(value));
}

// A header field as a literal without indexing, its name and value literal and not Huffman
// coded: the simplest representation, which every decoder takes.
void put_field(std::string& out, std::string_view name, std::string_view value) {
  out.push_back(0);
  put_integer(out, 7, 0, name.size());
  out.append(name);
  put_integer(out, 7, 0, value.size());
  out.append(value);
}

// A socket with a deadline: every wait ends by it.
class Connection {
 public:
  Connection(int fd, Clock::time_point deadline, std::chrono::milliseconds timeout)
      : fd_(fd), deadline_(deadline), timeout_(timeout) {}
  ~Connection() { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait(POLLOUT);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        throw Failure{"the server closed the connection"};
      } else {
        throw Failure{std::string("cannot send: ") + std::strerror(errno)};
      }
    }
  }

  struct Frame {
    uint8_t type = 0, flags = 0;
    uint32_t stream = 0;
    std::string payload;
  };

  Frame next() {
    fill(9);
    const std::string_view head(in_.data(), 9);
    const size_t length = static_cast<size_t>(static_cast<uint8_t>(head[0])) << 16 |
                          static_cast<size_t>(static_cast<uint8_t>(head[1])) << 8 |
                          static_cast<uint8_t>(head[2]);
    if (first_ && (length > kMostFrame || head[3] != kSettings)) {
      // An HTTP/2 server's first frame is its SETTINGS; anything else is not HTTP/2 (an
      // HTTP/1 server's status line, say, reads as a frame too long or of another type).
      throw Failure{"the server does not speak HTTP/2 (gRPC)"};
    }
    first_ = false;
    if (length > kMostFrame) {
      throw Failure{fmt::format("a frame of {} bytes (at most {} taken)", length, kMostFrame)};
    }
    Frame f;
    f.type = static_cast<uint8_t>(head[3]);
    f.flags = static_cast<uint8_t>(head[4]);
    f.stream = be32(head.substr(5)) & 0x7fffffff;
    fill(9 + length);
    f.payload.assign(in_, 9, length);
    in_.erase(0, 9 + length);  // (what is left is at most a read's worth: little to move)
    return f;
  }

 private:
  // Until `n` bytes are buffered.
  void fill(size_t n) {
    while (in_.size() < n) {
      wait(POLLIN);
      char buffer[16384];
      const ssize_t got = recv(fd_, buffer, sizeof buffer, 0);
      if (got > 0) {
        in_.append(buffer, static_cast<size_t>(got));
        received_ += static_cast<size_t>(got);
        if (received_ > kMostReceived) {
          throw Failure{fmt::format("more than {} bytes from the server", kMostReceived)};
        }
      } else if (got == 0 || errno == ECONNRESET) {
        throw Failure{"the server closed the connection"};
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw Failure{std::string("cannot read: ") + std::strerror(errno)};
      }
    }
  }

  void wait(short event) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) throw Failure{"no answer within " + seconds(timeout_)};
      pollfd p{fd_, event, 0};
      const int r = poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (r > 0) return;  // ready, or an error that the next call reports
      if (r < 0 && errno != EINTR) throw Failure{std::string("poll: ") + std::strerror(errno)};
    }
  }

  int fd_;
  Clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  std::string in_;
  size_t received_ = 0;
  bool first_ = true;
};

// A connected socket, or -1 when the connection is refused (nothing listens).
int connect_to(const std::string& address, int port, Clock::time_point deadline,
               std::chrono::milliseconds timeout) {
  sockaddr_storage storage{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    size = sizeof *v4;
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    size = sizeof *v6;
  } else {
    throw Failure{"'" + address + "' is not an IP address"};
  }
  const int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Failure{std::string("socket: ") + std::strerror(errno)};
  int error = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&storage), size) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      error = ETIMEDOUT;
      for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLOUT, 0};
        const int r = poll(&p, 1, static_cast<int>(left.count()) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) {
          socklen_t n = sizeof error;
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &n) != 0) error = errno;
        }
        break;
      }
    }
  }
  if (error == ECONNREFUSED) {
    close(fd);
    return -1;
  }
  if (error != 0) {
    close(fd);
    if (error == ETIMEDOUT) throw Failure{"no connection within " + seconds(timeout)};
    throw Failure{std::string("cannot connect: ") + std::strerror(error)};
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// grpc-message is percent-encoded (gRPC over HTTP/2); shown on one line, shortened. Other
// text from the server (GOAWAY's debug data, a content-type) is opaque: `ascii` keeps only
// printable ASCII of it.
std::string readable_message(std::string_view m, bool ascii = false) {
  std::string out;
  for (size_t i = 0; i < m.size() && out.size() < 200; ++i) {
    char c = m[i];
    if (c == '%' && i + 2 < m.size() && std::isxdigit(static_cast<unsigned char>(m[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(m[i + 2]))) {
      c = static_cast<char>(std::stoi(std::string(m.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? ' ' : ascii && u >= 0x80 ? '?' : c);
  }
  return out;
}

}  // namespace

std::optional<std::string> huffman_decode(std::string_view coded) {
  static const Huffman code;
  std::string out;
  uint32_t bits = 0;
  int length = 0;
  for (const char c : coded) {
    for (int bit = 7; bit >= 0; --bit) {
      bits = bits << 1 | ((static_cast<uint8_t>(c) >> bit) & 1);
      if (++length > kLongest) return std::nullopt;
      const uint32_t k = bits - code.first[length];  // wraps past count when below the first
      if (k < code.count[length]) {
        const int symbol = code.symbols[code.offset[length] + k];
        if (symbol == kEos) return std::nullopt;
        out.push_back(static_cast<char>(symbol));
        bits = 0;
        length = 0;
      }
    }
  }
  // What is left is padding: fewer than 8 bits, all ones (EOS's first bits).
  if (length > 7 || bits != (1u << length) - 1) return std::nullopt;
  return out;
}

void HpackDecoder::insert(std::string name, std::string value) {
  const size_t size = name.size() + value.size() + 32;  // RFC 7541, section 4.1
  while (!table_.empty() && size_ + size > max_size_) {
    size_ -= table_.front().first.size() + table_.front().second.size() + 32;
    table_.erase(table_.begin());
  }
  if (size <= max_size_) {  // (a larger one empties the table and is not kept)
    table_.emplace_back(std::move(name), std::move(value));
    size_ += size;
  }
}

std::optional<HpackDecoder::Fields> HpackDecoder::decode(std::string_view block) {
  Fields fields;
  size_t at = 0;
  auto integer = [&](int prefix, uint64_t& value) {
    if (at >= block.size()) return false;
    const uint32_t mask = (1u << prefix) - 1;
    value = static_cast<uint8_t>(block[at++]) & mask;
    if (value < mask) return true;
    for (int shift = 0; shift <= 28; shift += 7) {  // past 2^35: no length or index is that big
      if (at >= block.size()) return false;
      const uint8_t b = static_cast<uint8_t>(block[at++]);
      value += static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  auto string = [&](std::string& out) {
    if (at >= block.size()) return false;
    const bool huffman = static_cast<uint8_t>(block[at]) & 0x80;
    uint64_t length = 0;
    if (!integer(7, length) || length > block.size() - at) return false;
    const std::string_view raw = block.substr(at, length);
    at += length;
    if (!huffman) {
      out.assign(raw);
      return true;
    }
    std::optional<std::string> decoded = huffman_decode(raw);
    if (!decoded) return false;
    out = std::move(*decoded);
    return true;
  };
  // Index 1..61: the static table's; from 62, the dynamic table's, newest first.
  auto entry = [&](uint64_t index, std::string& name, std::string* value) {
    if (index == 0) return false;
    if (index <= 61) {
      name = kStaticTable[index - 1].first;
      if (value) *value = kStaticTable[index - 1].second;
      return true;
    }
    if (index - 62 >= table_.size()) return false;
    const auto& e = table_[table_.size() - 1 - (index - 62)];
    name = e.first;
    if (value) *value = e.second;
    return true;
  };
  while (at < block.size()) {
    const uint8_t first = static_cast<uint8_t>(block[at]);
    uint64_t index = 0;
    std::string name, value;
    if (first & 0x80) {  // an indexed field
      if (!integer(7, index) || !entry(index, name, &value)) return std::nullopt;
    } else if ((first & 0xe0) == 0x20) {  // a dynamic table size update
      uint64_t size = 0;
      if (!integer(5, size) || size > 4096) return std::nullopt;  // (4096: HTTP/2's default)
      max_size_ = size;
      while (!table_.empty() && size_ > max_size_) {
        size_ -= table_.front().first.size() + table_.front().second.size() + 32;
        table_.erase(table_.begin());
      }
      continue;
    } else {  // a literal: with incremental indexing (01), without or never indexed (000x)
      const bool indexing = first & 0x40;
      if (!integer(indexing ? 6 : 4, index)) return std::nullopt;
      if (index ? !entry(index, name, nullptr) : !string(name)) return std::nullopt;
      if (!string(value)) return std::nullopt;
      if (indexing) insert(name, value);
    }
    fields.emplace_back(std::move(name), std::move(value));
  }
  return fields;
}

std::string_view status_name(int status) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  return status >= 0 && status < 17 ? kNames[status] : "";
}

Result unary(const std::string& address, int port, const std::vector<Call>& calls,
             std::chrono::milliseconds timeout) {
  Result result;
  const Clock::time_point deadline = Clock::now() + timeout;
  // What each call's stream (1, 3, 5, ...) has received.
  struct Stream {
    HpackDecoder::Fields fields;  // headers and trailers together
    std::string data;
    std::string reset;  // why the server reset it
    bool ended = false;
  };
  std::vector<Stream> streams(calls.size());
  try {
    const int fd = connect_to(address, port, deadline, timeout);
    if (fd < 0) {
      result.refused = true;
      return result;
    }
    result.connected = true;
    Connection connection(fd, deadline, timeout);

    // The preface, SETTINGS (no server push; a window of kWindow per stream) and as large a
    // window for the connection; then each call, whole.
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    std::string settings;
    settings += std::string("\0\x02", 2);  // SETTINGS_ENABLE_PUSH
    put32(settings, 0);
    settings += std::string("\0\x04", 2);  // SETTINGS_INITIAL_WINDOW_SIZE
    put32(settings, kWindow);
    out += frame(kSettings, 0, 0, settings);
    std::string increment;
    put32(increment, kWindow - 65535);
    out += frame(kWindowUpdate, 0, 0, increment);
    const std::string authority = "localhost:" + std::to_string(port);
    const std::string grpc_timeout = std::to_string(timeout.count()) + "m";
    for (size_t i = 0; i < calls.size(); ++i) {
      const uint32_t id = static_cast<uint32_t>(2 * i + 1);
      std::string block;
      put_field(block, ":method", "POST");
      put_field(block, ":scheme", "http");
      put_field(block, ":path", calls[i].path);
      put_field(block, ":authority", authority);
      put_field(block, "content-type", "application/grpc");
      put_field(block, "te", "trailers");
      put_field(block, "grpc-timeout", grpc_timeout);
      put_field(block, "user-agent", "prism-smi");
      out += frame(kHeaders, kEndHeaders, id, block);
      std::string message(1, '\0');  // not compressed
      put32(message, static_cast<uint32_t>(calls[i].request.size()));
      message += calls[i].request;
      out += frame(kData, kEndStream, id, message);
    }
    connection.send(out);

    HpackDecoder hpack;
    size_t open = calls.size(), received = 0;
    uint32_t block_stream = 0;  // the stream of a header block still in CONTINUATION frames
    bool block_ends = false;
    std::string block;
    auto stream_of = [&](uint32_t id) -> Stream* {
      return id % 2 == 1 && (id - 1) / 2 < streams.size() ? &streams[(id - 1) / 2] : nullptr;
    };
    auto end = [&](Stream* s) {
      if (s && !s->ended) {
        s->ended = true;
        --open;
      }
    };
    // The payload less its padding (and a HEADERS frame's priority fields).
    auto unpad = [](const Connection::Frame& f, bool priority) {
      std::string_view p = f.payload;
      size_t pad = 0;
      if (f.flags & kPadded) {
        if (p.empty()) throw Failure{"a padded frame without its padding length"};
        pad = static_cast<uint8_t>(p[0]);
        p.remove_prefix(1);
      }
      if (priority && (f.flags & kPriorityFlag)) {
        if (p.size() < 5) throw Failure{"a HEADERS frame shorter than its priority fields"};
        p.remove_prefix(5);
      }
      if (pad > p.size()) throw Failure{"a frame with more padding than payload"};
      p.remove_suffix(pad);
      return p;
    };
    auto finish_block = [&](uint32_t id) {
      std::optional<HpackDecoder::Fields> fields = hpack.decode(block);
      if (!fields) throw Failure{"a header block that is not valid HPACK"};
      if (Stream* s = stream_of(id)) {
        for (auto& field : *fields) s->fields.push_back(std::move(field));
        if (block_ends) end(s);
      }
      block.clear();
      block_stream = 0;
    };

    while (open > 0) {
      Connection::Frame f = connection.next();
      if (block_stream != 0 && (f.type != kContinuation || f.stream != block_stream)) {
        throw Failure{"a header block interrupted by another frame"};
      }
      switch (f.type) {
        case kData: {
          if (f.stream == 0) throw Failure{"a DATA frame on stream 0"};
          const std::string_view p = unpad(f, false);
          received += f.payload.size();
          if (received > kMostData) {
            throw Failure{fmt::format("answers of more than {} bytes", kMostData)};
          }
          Stream* s = stream_of(f.stream);
          if (s && !s->ended) s->data.append(p);
          if (f.flags & kEndStream) end(s);
          break;
        }
        case kHeaders:
        case kContinuation: {
          if (f.stream == 0) throw Failure{"a header block on stream 0"};
          if (f.type == kHeaders) {
            block.assign(unpad(f, true));
            block_ends = f.flags & kEndStream;
          } else if (block_stream == 0) {
            throw Failure{"a CONTINUATION frame without a header block"};
          } else {
            block.append(f.payload);
          }
          if (block.size() > kMostBlock) {
            throw Failure{fmt::format("a header block of more than {} bytes", kMostBlock)};
          }
          if (f.flags & kEndHeaders) {
            finish_block(f.stream);
          } else {
            block_stream = f.stream;
          }
          break;
        }
        case kRstStream: {
          if (f.payload.size() != 4) throw Failure{"a RST_STREAM frame of the wrong size"};
          Stream* s = stream_of(f.stream);
          if (s && !s->ended) {
            s->reset = fmt::format("the server reset the call (HTTP/2 error {})", be32(f.payload));
          }
          end(s);
          break;
        }
        case kSettings:
          if (f.stream != 0) throw Failure{"a SETTINGS frame on a stream"};
          if (f.flags & kAck) break;
          if (f.payload.size() % 6 != 0) throw Failure{"a SETTINGS frame of the wrong size"};
          connection.send(frame(kSettings, kAck, 0, ""));
          break;
        case kPing:
          if (f.stream != 0 || f.payload.size() != 8) throw Failure{"a malformed PING frame"};
          if (!(f.flags & kAck)) connection.send(frame(kPing, kAck, 0, f.payload));
          break;
        case kGoaway: {
          if (f.payload.size() < 8) throw Failure{"a GOAWAY frame of the wrong size"};
          const uint32_t last = be32(f.payload) & 0x7fffffff, code = be32(f.payload.substr(4));
          // A graceful one (no error) still answers the streams up to `last`.
          bool spared = code == 0;
          for (size_t i = 0; i < streams.size(); ++i) {
            if (!streams[i].ended && 2 * i + 1 > last) spared = false;
          }
          if (!spared) {
            const std::string debug = readable_message(f.payload.substr(8), true);
            throw Failure{fmt::format("the server ended the connection (GOAWAY, HTTP/2 error {}{})",
                                      code, debug.empty() ? "" : ": " + debug)};
          }
          break;
        }
        case kPushPromise:
          throw Failure{"the server pushed a stream, which prism's SETTINGS forbid"};
        default:  // PRIORITY, WINDOW_UPDATE and types this client does not know: nothing to do
          break;
      }
    }
  } catch (const Failure& failure) {
    result.error = failure.why;
    return result;
  }

  for (Stream& s : streams) {
    Reply reply;
    std::string status, content_type, grpc_status, grpc_message;
    bool has_grpc_status = false;
    for (const auto& [name, value] : s.fields) {
      if (name == ":status") status = value;
      if (name == "content-type") content_type = value;
      if (name == "grpc-status") {
        grpc_status = value;
        has_grpc_status = true;
      }
      if (name == "grpc-message") grpc_message = value;
    }
    if (!s.reset.empty()) {
      reply.error = s.reset;
    } else if (status != "200") {
      reply.error = status.empty() ? "an answer without an HTTP status" : "HTTP status " + status;
    } else if (content_type.rfind("application/grpc", 0) != 0) {
      reply.error =
          "not a gRPC answer (content-type '" + readable_message(content_type, true) + "')";
    } else if (!has_grpc_status) {
      reply.error = "an answer without a gRPC status";
    } else if (grpc_status.empty() || grpc_status.size() > 3 ||
               grpc_status.find_first_not_of("0123456789") != std::string::npos) {
      reply.error =
          "a gRPC status that is not a number ('" + readable_message(grpc_status, true) + "')";
    } else if ((reply.status = std::stoi(grpc_status)) != 0) {
      const std::string_view name = status_name(reply.status);
      const std::string message = readable_message(grpc_message);
      reply.error = fmt::format("gRPC status {}{}{}", reply.status,
                                name.empty() ? "" : " (" + std::string(name) + ")",
                                message.empty() ? "" : ": " + message);
    } else if (s.data.size() < 5) {
      reply.error = "an answer without its message";
    } else if (s.data[0] != 0) {
      reply.error = "a compressed answer (prism asks for none)";
    } else if (be32(std::string_view(s.data).substr(1)) != s.data.size() - 5) {
      reply.error = "an answer that is not one gRPC message";
    } else {
      reply.message = s.data.substr(5);
    }
    result.replies.push_back(std::move(reply));
  }
  return result;
}

}  // namespace prism::smi::grpc
