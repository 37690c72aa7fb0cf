// A stand-in for libtpu's runtime metrics server, for the tests of prism smi's TPU source: a
// small HTTP/2 gRPC server of our own (it shares no code with prism's client), on 127.0.0.1 at a
// port the kernel picks, serving GetRuntimeMetric from a thread of its own with scripted chips,
// or misbehaving as told. One connection at a time, as prism's source makes them.
//
// A good answer exercises what a real server may send: a PING and a WINDOW_UPDATE before it
// answers (it waits for the PING's and its SETTINGS' acknowledgements), the response headers
// first with a literal that enters HPACK's dynamic table and then by its index, the message in
// two DATA frames (one padded), and the trailers split over HEADERS and CONTINUATION.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace prism::test {

class FakeTpuRuntime {
 public:
  enum class Mode {
    kServe,      // the chips' metrics
    kClose,      // close each connection at once
    kGarbage,    // bytes that are not HTTP/2
    kHttp1,      // an HTTP/1.1 answer
    kGrpcError,  // every call: grpc-status 13 (INTERNAL) with a message, and no answer
    kReset,      // every call: RST_STREAM (INTERNAL_ERROR)
    kGoaway,     // GOAWAY (ENHANCE_YOUR_CALM) instead of answers
    kNotProto,   // gRPC answers whose message is not a MetricResponse
    kStall,      // accept, then say nothing
  };
  struct Chip {
    int64_t id = 0;
    int64_t used = 0, total = 0;  // HBM bytes
    double duty = 0;              // TensorCore duty cycle, percent
  };

  FakeTpuRuntime();
  ~FakeTpuRuntime();
  FakeTpuRuntime(const FakeTpuRuntime&) = delete;
  FakeTpuRuntime& operator=(const FakeTpuRuntime&) = delete;

  int port() const { return port_; }
  void set_mode(Mode mode);
  void set_chips(std::vector<Chip> chips);
  // A metric this runtime does not have: answered NOT_FOUND.
  void set_missing(std::string metric);
  // Stops listening: connections are refused from now on.
  void stop_listening();
  // PING acknowledgements received, over all connections.
  int ping_acks() const { return ping_acks_; }

 private:
  void run();
  void serve(int fd);

  int listener_ = -1, port_ = 0;
  int wake_[2] = {-1, -1};  // written to stop waiting
  std::atomic<bool> stopping_{false}, stop_listening_{false};
  std::atomic<int> ping_acks_{0};
  std::mutex mutex_;
  Mode mode_ = Mode::kServe;
  std::vector<Chip> chips_;
  std::set<std::string> missing_;
  std::thread thread_;
};

// The MetricResponse the fake serves for metric `name` and these chips (its bytes).
std::string fake_metric_response(std::string_view name,
                                 const std::vector<FakeTpuRuntime::Chip>& chips);

}  // namespace prism::test
