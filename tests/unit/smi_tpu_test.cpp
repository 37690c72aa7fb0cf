// prism smi's TPU source against a fake libtpu runtime metrics server of our own
// (tests/smi/fake_tpu_runtime.cpp), the whole path from the gRPC call over HTTP/2 to the rows:
// two chips' memory and duty cycle, a metric the runtime lacks, nothing listening (absent),
// servers that answer with garbage, HTTP/1, errors, resets, GOAWAY or nothing at all (a row
// says so and the good port's chips go on), a chip that disappears between samples and a
// runtime that stops; the chips' kind from PCI ids and their processes from /dev nodes under a
// root of the test's own; and HPACK's decoding with RFC 7541's own examples.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../smi/fake_tpu_runtime.h"
#include "prism/smi/grpc.h"
#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

namespace fs = std::filesystem;
using test::FakeTpuRuntime;

constexpr uint64_t kGiB = 1ull << 30;

// TPU_RUNTIME_METRICS_PORTS for a scope.
struct Ports {
  explicit Ports(const std::string& ports) {
    setenv("TPU_RUNTIME_METRICS_PORTS", ports.c_str(), 1);
  }
  ~Ports() { unsetenv("TPU_RUNTIME_METRICS_PORTS"); }
};

// A root for the source: two TPU v5e chips on the PCI bus (and a Google NIC, not a TPU), the
// real /proc unless `proc` is false (then an empty one the test fills).
struct Root {
  fs::path dir;
  explicit Root(bool proc = true) {
    char name[] = "/tmp/prism-smi-tpu-XXXXXX";
    dir = mkdtemp(name);
    chip("0000:00:04.0", "0x0063");
    chip("0000:00:05.0", "0x0063");
    chip("0000:00:06.0", "0x0042");
    if (proc) {
      fs::create_directory_symlink("/proc", dir / "proc");
    } else {
      fs::create_directories(dir / "proc");
    }
  }
  ~Root() { fs::remove_all(dir); }
  void chip(const std::string& slot, const std::string& device) {
    const fs::path d = dir / "sys/bus/pci/devices" / slot;
    fs::create_directories(d);
    std::ofstream(d / "vendor") << "0x1ae0\n";
    std::ofstream(d / "device") << device << "\n";
    std::ofstream(d / "subsystem_device") << "0x00a0\n";
  }
};

const std::vector<FakeTpuRuntime::Chip> kChips = {{0, 4 * kGiB, 16 * kGiB, 25.0},
                                                  {1, 1 * kGiB, 16 * kGiB, 75.0}};

std::string port_of(const FakeTpuRuntime& fake) { return std::to_string(fake.port()); }

// A port nothing listens on (bound a moment ago, then let go).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), n);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(SmiTpu, ReadsTheChipsMemoryAndDutyCycle) {
  FakeTpuRuntime fake;
  fake.set_chips(kChips);
  Ports ports(port_of(fake));
  Root root;
  std::string absent;
  auto source = tpu_source(&absent, root.dir);
  ASSERT_TRUE(source) << absent;
  EXPECT_EQ(source->name(), "tpu");
  for (int sample = 0; sample < 2; ++sample) {  // a new connection, a new HPACK table, each
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].source, "tpu");
    EXPECT_EQ(d[0].index, 0);
    EXPECT_EQ(d[0].name, "TPU v5e");
    EXPECT_DOUBLE_EQ(*d[0].utilization, 0.25);
    EXPECT_EQ(d[0].memory_used, 4 * kGiB);
    EXPECT_EQ(d[0].memory_total, 16 * kGiB);
    EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
    // The process serving the metrics (this one) uses the chips, and holds their memory.
    ASSERT_EQ(d[0].processes.size(), 1u);
    EXPECT_EQ(d[0].processes[0].pid, getpid());
    EXPECT_EQ(d[0].processes[0].name, "prism-unit-test");
    EXPECT_EQ(d[0].processes[0].memory_bytes, 4 * kGiB);
    EXPECT_EQ(d[1].index, 1);
    EXPECT_DOUBLE_EQ(*d[1].utilization, 0.75);
    EXPECT_EQ(d[1].memory_used, 1 * kGiB);
    EXPECT_FALSE(d[1].temperature_c);  // the runtime metrics have none
    EXPECT_FALSE(d[1].power_w);
  }
  EXPECT_GE(fake.ping_acks(), 2);  // the fake answers only once its PING is acknowledged
}

TEST(SmiTpu, AMetricTheRuntimeLacksIsLeftOut) {
  FakeTpuRuntime fake;
  fake.set_chips(kChips);
  fake.set_missing("tpu.runtime.tensorcore.dutycycle.percent");
  Ports ports(port_of(fake));
  auto source = tpu_source();
  ASSERT_TRUE(source);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].utilization);
  EXPECT_EQ(d[0].memory_used, 4 * kGiB);
  EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
  // A runtime with none of them: one row says so (rather than nothing at all).
  fake.set_missing("tpu.runtime.hbm.memory.usage.bytes");
  fake.set_missing("tpu.runtime.hbm.memory.total.bytes");
  source = tpu_source();
  d = source->sample();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].errors, std::vector<std::string>{
                             "localhost:" + port_of(fake) +
                             ": the TPU runtime has none of the metrics prism reads (gRPC status "
                             "5 (NOT_FOUND): metric not found)"});
}

TEST(SmiTpu, NothingListeningIsAbsent) {
  const int port = free_port();
  Ports ports(std::to_string(port));
  std::string absent;
  EXPECT_FALSE(tpu_source(&absent, "/nonexistent"));
  EXPECT_EQ(absent, "tpu: nothing listens on localhost:" + std::to_string(port) +
                        " (where libtpu serves its metrics)");
  Root root;
  EXPECT_FALSE(tpu_source(&absent, root.dir));
  EXPECT_EQ(absent, "tpu: 2 TPU v5e chips, but nothing listens on localhost:" +
                        std::to_string(port) + " (where libtpu serves its metrics)");
  for (const char* bad : {"84x1", "8431,,8432", "0", "70000", ","}) {
    Ports bad_ports(bad);
    EXPECT_FALSE(tpu_source(&absent));
    EXPECT_EQ(absent.rfind("tpu: TPU_RUNTIME_METRICS_PORTS", 0), 0u) << absent;
  }
}

TEST(SmiTpu, AServerThatMisbehavesIsARowAndTheOthersGoOn) {
  FakeTpuRuntime good, bad;
  good.set_chips(kChips);
  bad.set_chips(kChips);
  Ports ports(port_of(good) + "," + port_of(bad));
  const std::string where = "localhost:" + port_of(bad) + ": ";
  const std::pair<FakeTpuRuntime::Mode, std::string> cases[] = {
      {FakeTpuRuntime::Mode::kGarbage, "the server does not speak HTTP/2 (gRPC)"},
      {FakeTpuRuntime::Mode::kHttp1, "the server does not speak HTTP/2 (gRPC)"},
      {FakeTpuRuntime::Mode::kClose, "the server closed the connection"},
      {FakeTpuRuntime::Mode::kGrpcError, "gRPC status 13 (INTERNAL): runtime metrics failed"},
      {FakeTpuRuntime::Mode::kReset, "the server reset the call (HTTP/2 error 2)"},
      {FakeTpuRuntime::Mode::kGoaway,
       "the server ended the connection (GOAWAY, HTTP/2 error 11: calm down)"},
  };
  for (const auto& [mode, why] : cases) {
    SCOPED_TRACE(why);
    bad.set_mode(mode);
    auto source = tpu_source();
    ASSERT_TRUE(source);
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d[0].memory_used, 4 * kGiB);
    EXPECT_DOUBLE_EQ(*d[1].utilization, 0.75);
    EXPECT_TRUE(d[0].errors.empty() && d[1].errors.empty());
    EXPECT_EQ(d[2].name, "TPU");
    EXPECT_FALSE(d[2].memory_used);
    EXPECT_EQ(d[2].errors, std::vector<std::string>{where + why});
  }
  // Good gRPC, but a message that is not a MetricResponse: said for each metric.
  bad.set_mode(FakeTpuRuntime::Mode::kNotProto);
  auto source = tpu_source();
  ASSERT_TRUE(source);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 3u);
  ASSERT_EQ(d[2].errors.size(), 3u);
  EXPECT_EQ(d[2].errors[0],
            where + "the answer for tpu.runtime.hbm.memory.usage.bytes is not a MetricResponse");
  // Once its chips are known, a port that fails says so on their rows.
  bad.set_mode(FakeTpuRuntime::Mode::kServe);
  source = tpu_source();
  ASSERT_EQ(source->sample().size(), 4u);
  bad.set_mode(FakeTpuRuntime::Mode::kGarbage);
  d = source->sample();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_TRUE(d[1].errors.empty());
  EXPECT_EQ(d[3].errors,
            std::vector<std::string>{where + "the server does not speak HTTP/2 (gRPC)"});
  bad.set_mode(FakeTpuRuntime::Mode::kGrpcError);
  d = source->sample();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[2].errors,
            std::vector<std::string>{where + "gRPC status 13 (INTERNAL): runtime metrics failed"});
}

TEST(SmiTpu, AStallIsATimeoutNotAHang) {
  FakeTpuRuntime fake;
  fake.set_mode(FakeTpuRuntime::Mode::kStall);
  Ports ports(port_of(fake));
  auto source = tpu_source();
  ASSERT_TRUE(source);  // it listens
  const auto start = std::chrono::steady_clock::now();
  std::vector<Device> d = source->sample();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 2.0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].errors,
            std::vector<std::string>{"localhost:" + port_of(fake) + ": no answer within 0.5 s"});
}

TEST(SmiTpu, AChipThatDisappearsAndARuntimeThatStopsAreSaid) {
  FakeTpuRuntime fake;
  fake.set_chips(kChips);
  Ports ports(port_of(fake));
  const std::string where = "localhost:" + port_of(fake) + ": ";
  auto source = tpu_source();
  ASSERT_TRUE(source);
  ASSERT_EQ(source->sample().size(), 2u);
  fake.set_chips({kChips[0]});
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].errors.empty());
  EXPECT_EQ(d[0].memory_used, 4 * kGiB);
  EXPECT_EQ(d[1].index, 1);
  EXPECT_FALSE(d[1].memory_used);
  EXPECT_EQ(d[1].errors,
            std::vector<std::string>{where + "the TPU runtime no longer reports this device"});
  fake.set_chips(kChips);  // back
  d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[1].errors.empty());
  fake.stop_listening();
  d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  for (const Device& device : d) {
    EXPECT_FALSE(device.memory_used);
    EXPECT_EQ(device.errors, std::vector<std::string>{
                                 where + "the TPU runtime stopped answering (nothing listens)"});
  }
}

TEST(SmiTpu, ProcessesFromTheChipsDevNodes) {
  // No /proc/net here: the process serving the port is not found, so the chip's /dev node
  // tells who uses it (device 1: /dev/vfio/1, held by this process).
  FakeTpuRuntime fake;
  fake.set_chips(kChips);
  Ports ports(port_of(fake));
  Root root(false);
  const fs::path fd = root.dir / "proc" / std::to_string(getpid()) / "fd";
  fs::create_directories(fd);
  fs::create_symlink("/dev/vfio/1", fd / "7");
  fs::create_symlink("/dev/null", fd / "8");
  fs::create_directories(root.dir / "proc/1/fd");
  fs::create_symlink("/dev/accel9", root.dir / "proc/1/fd/3");
  auto source = tpu_source(nullptr, root.dir);
  ASSERT_TRUE(source);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].processes.empty());
  ASSERT_EQ(d[1].processes.size(), 1u);
  EXPECT_EQ(d[1].processes[0].pid, getpid());
  EXPECT_EQ(d[1].processes[0].memory_bytes, 1 * kGiB);
}

std::string bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The messages as the source reads them (smi::tpu_metric_values, also the fuzz target's way in):
// values by device, and nothing, not a throw, for bytes that are not a MetricResponse.
TEST(SmiTpu, MetricResponsesParseOrSayTheyDoNot) {
  const std::string good = test::fake_metric_response(
      "tpu.runtime.hbm.memory.usage.bytes", {{0, int64_t{1} << 30, 0, 0}, {3, 12345, 0, 0}});
  const auto values = smi::tpu_metric_values(good);
  ASSERT_TRUE(values.has_value());
  EXPECT_EQ(*values, (std::map<int64_t, double>{{0, 1073741824.0}, {3, 12345.0}}));
  EXPECT_EQ(smi::tpu_metric_values(""), (std::map<int64_t, double>{}));  // no metric: no values
  for (size_t cut = 1; cut < good.size(); ++cut) {  // every truncation: parsed or refused
    const auto partial = smi::tpu_metric_values(std::string_view(good).substr(0, cut));
    if (partial) {
      EXPECT_LE(partial->size(), 2u) << cut;
    }
  }
  EXPECT_FALSE(smi::tpu_metric_values(std::string_view(good).substr(0, good.size() - 1)));
  EXPECT_FALSE(smi::tpu_metric_values("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"));
  EXPECT_FALSE(smi::tpu_metric_values("not protobuf at all"));
}

TEST(SmiTpu, HuffmanAndHpackAsRfc7541GivesThem) {
  // Appendix C.4: Huffman-coded strings.
  EXPECT_EQ(grpc::huffman_decode(bytes("f1e3c2e5f23a6ba0ab90f4ff")), "www.example.com");
  EXPECT_EQ(grpc::huffman_decode(bytes("a8eb10649cbf")), "no-cache");
  EXPECT_EQ(grpc::huffman_decode(bytes("25a849e95ba97d7f")), "custom-key");
  EXPECT_EQ(grpc::huffman_decode(bytes("25a849e95bb8e8b4bf")), "custom-value");
  EXPECT_EQ(grpc::huffman_decode(""), "");
  EXPECT_FALSE(grpc::huffman_decode(bytes("00")));        // '0' and padding of zeros
  EXPECT_FALSE(grpc::huffman_decode(bytes("ffffffff")));  // EOS
  EXPECT_FALSE(grpc::huffman_decode(bytes("f1e3c2e5f23a6ba0ab90f4ffff")));  // padding > 7 bits
  // Appendix C.3 and C.4: requests on one connection, the dynamic table kept between them.
  for (const char* first :
       {"828684410f7777772e6578616d706c652e636f6d", "828684418cf1e3c2e5f23a6ba0ab90f4ff"}) {
    grpc::HpackDecoder decoder;
    std::optional<grpc::HpackDecoder::Fields> f = decoder.decode(bytes(first));
    ASSERT_TRUE(f);
    EXPECT_EQ(*f, (grpc::HpackDecoder::Fields{{":method", "GET"},
                                              {":scheme", "http"},
                                              {":path", "/"},
                                              {":authority", "www.example.com"}}));
    f = decoder.decode(bytes("828684be58086e6f2d6361636865"));
    ASSERT_TRUE(f);
    EXPECT_EQ(f->back(), (std::pair<std::string, std::string>{"cache-control", "no-cache"}));
    EXPECT_EQ((*f)[3].second, "www.example.com");  // index 62: the first request's :authority
  }
  grpc::HpackDecoder decoder;
  for (const char* bad : {"80", "c0", "ff00", "0f", "00", "0003616263", "00810f01", "3fe21f", "bf",
                          "ff8080808080808001"}) {
    EXPECT_FALSE(decoder.decode(bytes(bad))) << bad;
  }
  EXPECT_EQ(grpc::status_name(5), "NOT_FOUND");
  EXPECT_EQ(grpc::status_name(99), "");
}

}  // namespace
}  // namespace prism::smi
