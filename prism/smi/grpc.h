// A minimal gRPC client for prism smi's TPU source (tpu_source.cpp): unary calls over plaintext
// HTTP/2 ("h2c" with prior knowledge, RFC 9113), the way libtpu serves its runtime metrics on
// localhost, without a gRPC library. Several calls share one connection, one stream each, under
// one deadline, so a server that stalls costs a sample that deadline and never hangs it.
//
// What it speaks: the connection preface and SETTINGS (its own, and an ACK of the server's),
// one HEADERS frame per call (HPACK literals, no Huffman, no dynamic table), the request as one
// DATA frame with gRPC's 5-byte message prefix; then it reads frames until every stream has
// ended: DATA is collected, the response headers and trailers are HPACK-decoded in full (static
// and dynamic tables, Huffman strings) for :status, content-type, grpc-status and grpc-message,
// PING and SETTINGS are answered, WINDOW_UPDATE and PRIORITY need nothing (requests are small,
// and the windows it grants cover every answer it accepts), RST_STREAM fails its call and GOAWAY
// the connection (unless it is graceful and spares every call's stream). Frames over 1 MiB, or
// more than 1 MiB of answers in all, are refused; so is anything that is not HTTP/2.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::smi::grpc {

struct Call {
  std::string path;     // "/package.Service/Method"
  std::string request;  // the request message, serialized
};

struct Reply {
  std::string error;  // empty: the call succeeded and `message` is its answer
  int status = -1;    // grpc-status where the server gave one (0: OK)
  std::string message;
};

struct Result {
  bool refused = false;        // nothing listens there (no error: the server is not running)
  bool connected = false;      // a connection was made (whatever happened next)
  std::string error;           // the connection failed; then `replies` is empty
  std::vector<Reply> replies;  // one per call, in order
};

// The calls on a new connection to `address` (an IPv4 or IPv6 literal) and `port`, all within
// `timeout` (connecting included).
Result unary(const std::string& address, int port, const std::vector<Call>& calls,
             std::chrono::milliseconds timeout);

// gRPC's name of a status code ("NOT_FOUND"), or "" for one it does not define.
std::string_view status_name(int status);

// HPACK (RFC 7541), decoding only: the header fields of each block, in order, with the dynamic
// table kept from block to block as a connection does. Nothing when the block is malformed.
class HpackDecoder {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  std::optional<Fields> decode(std::string_view block);

 private:
  void insert(std::string name, std::string value);
  std::vector<std::pair<std::string, std::string>> table_;  // newest last
  size_t size_ = 0, max_size_ = 4096;
};

// A string in HPACK's Huffman code (RFC 7541, appendix B), decoded; nothing when it is not
// valid (a code past the table, EOS inside, or padding that is not a prefix of EOS).
std::optional<std::string> huffman_decode(std::string_view coded);

}  // namespace prism::smi::grpc
