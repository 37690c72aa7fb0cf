// https:// against a real nginx on 127.0.0.1 with a self-signed certificate.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <regex>
#include <thread>

#include "io_test_util.h"
#include "prism/core/error.h"
#include "prism/io/store.h"
#include "prism/io/vfs.h"
#include "test_servers.h"
#include "test_util.h"

namespace prism::io {
namespace {

using namespace std::chrono_literals;
using test::NginxServer;
using test::ScopedEnv;
using test::TempDir;

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

using testing::error_of;

// Names from listings (S3 keys, repository files) become local paths only under their base.
TEST(LocalPaths, NamesFromListingsStayUnderTheirBase) {
  EXPECT_TRUE(stays_inside("a"));
  EXPECT_TRUE(stays_inside("a/b.c/..d"));
  for (std::string_view bad :
       std::initializer_list<std::string_view>{"", "/abs", "a//b", "a/", "./a", "a/./b", "..",
                                               "a/../../b", "a\\b", std::string_view("a\0b", 3)}) {
    EXPECT_FALSE(stays_inside(bad)) << bad;
  }
  TempDir base, outside;
  EXPECT_EQ(local_path_under(base.str(), "d/e/f.bin", "test"), base.str("d/e/f.bin"));
  EXPECT_TRUE(std::filesystem::is_directory(base.str("d/e")));
  EXPECT_EQ(error_of([&] { local_path_under(base.str(), "../x", "s3://b/k"); }),
            "s3://b/k: the name '../x' leaves " + base.str());
  // A directory inside that links outside: nothing goes through it.
  std::filesystem::create_directory_symlink(outside.str(), base.str("link"));
  EXPECT_EQ(
      error_of([&] { local_path_under(base.str(), "link/x", "s3://b/k"); }),
      "s3://b/k: 'link/x' would be written outside " + base.str() + " (through a symbolic link)");
  EXPECT_TRUE(std::filesystem::is_empty(outside.str()));
}

class Https : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NginxServer::available()) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh)";
    test::write_bytes(www_.str("data/blob.bin"), blob_);
    test::write_bytes(www_.str("slow/big.bin"), slow_);
    test::write_bytes(www_.str("private/secret.txt"), "secret\n");
    test::write_bytes(www_.str("forbidden/x.txt"), "x");
    test::write_single(www_.str("model"), test::tiny_model());
    server_.emplace(www_.str());
    env_.emplace(std::map<std::string, std::optional<std::string>>{
        {"CURL_CA_BUNDLE", NginxServer::ca_file()},
        {"SSL_CERT_FILE", std::nullopt},
        {"PRISM_HTTP_BACKOFF_MS", "20"},
        {"PRISM_HTTP_RETRIES", "4"}});
  }

  // The order matters: the environment is restored before the server stops.
  TempDir www_;
  TempDir out_;
  std::string blob_ = random_bytes(1 << 20, 1);
  std::string slow_ = random_bytes(384 << 10, 2);
  std::optional<NginxServer> server_;
  std::optional<ScopedEnv> env_;
};

TEST_F(Https, ReadsRangesWithManyInFlight) {
  auto file = open(server_->url() + "/data/blob.bin");
  EXPECT_EQ(file->size(), blob_.size());
  std::string part(1000, '\0');
  file->read_at(12345, std::as_writable_bytes(std::span(part)));
  EXPECT_EQ(part, blob_.substr(12345, 1000));
  std::string all(blob_.size(), '\0');
  ReadRange range{file.get(), 0, std::as_writable_bytes(std::span(all))};
  read_ranges(std::span(&range, 1), {.parallelism = 8, .chunk_size = 64 << 10});
  EXPECT_TRUE(all == blob_);
  EXPECT_TRUE(std::regex_search(server_->wait_for_log("bytes=983040-1048575"),
                                std::regex("GET /data/blob.bin 206 range=bytes=983040-1048575")));
  EXPECT_NE(error_of([&] {
              file->read_at(blob_.size() - 1, std::as_writable_bytes(std::span(part)));
            }).find("is past the end of the file"),
            std::string::npos);
}

TEST_F(Https, OpensACheckpoint) {
  Store store = Store::open(server_->url() + "/model");
  auto model = test::tiny_model();
  ASSERT_EQ(store.size(), model.size());
  for (const auto& t : model) {
    std::vector<float> values(t.values.size());
    store.read_tensor_bytes(t.name, std::as_writable_bytes(std::span(values)));
    EXPECT_EQ(values, t.values);
  }
  EXPECT_TRUE(store.mapped_bytes("lm_head.weight").empty());  // nothing to map over https
}

TEST_F(Https, ReportsNotFoundUnauthorizedAndForbidden) {
  std::string url = server_->url();
  EXPECT_EQ(error_of([&] { open(url + "/nope.bin"); }), url + "/nope.bin: not found (HTTP 404)");
  EXPECT_FALSE(exists(url + "/nope.bin"));
  EXPECT_TRUE(error_of([&] {
                open(url + "/private/secret.txt");
              }).starts_with(url + "/private/secret.txt: unauthorized (HTTP 401)"));
  EXPECT_THROW(exists(url + "/private/secret.txt"), Error);  // not "absent": access failed
  EXPECT_TRUE(error_of([&] {
                open(url + "/forbidden/x.txt");
              }).starts_with(url + "/forbidden/x.txt: access denied (HTTP 403)"));
  EXPECT_NE(error_of([&] { list(url + "/data", false); }).find("listing is not supported"),
            std::string::npos);
}

TEST_F(Https, RetriesServerErrorsThenGivesUp) {
  std::string error = error_of([&] { open(server_->url() + "/broken/x.bin"); });
  EXPECT_TRUE(error.starts_with(server_->url() + "/broken/x.bin: HTTP 503")) << error;
  std::string log = server_->wait_for_log("(HEAD /broken/x.bin 503[\\s\\S]*){4}");
  size_t attempts = 0;
  for (size_t at = 0; (at = log.find("HEAD /broken/x.bin 503", at)) != std::string::npos; ++at) {
    ++attempts;
  }
  EXPECT_EQ(attempts, 4u);
}

TEST_F(Https, RefusesToMixVersionsOfAFileReplacedWhileOpen) {
  auto file = open(server_->url() + "/data/blob.bin");
  // Same size, other bytes, another modification time: another ETag.
  std::string path = www_.str("data/blob.bin");
  test::write_bytes(path, random_bytes(blob_.size(), 9));
  std::filesystem::last_write_time(path,
                                   std::filesystem::last_write_time(path) - std::chrono::hours(1));
  std::string part(100, '\0');
  std::string error = error_of([&] { file->read_at(0, std::as_writable_bytes(std::span(part))); });
  EXPECT_NE(error.find("the file changed while being read"), std::string::npos) << error;
}

TEST_F(Https, RejectsAnUntrustedCertificate) {
  ScopedEnv no_ca("CURL_CA_BUNDLE", std::nullopt);
  std::string error = error_of([&] { open(server_->url() + "/data/blob.bin"); });
  EXPECT_NE(error.find("set CURL_CA_BUNDLE"), std::string::npos) << error;
}

TEST_F(Https, TimesOutStalledTransfersAndRetriesThem) {
  // 100 B/s is under the 1 KiB/s floor: each attempt is dropped after the 1 s timeout and
  // retried. (Resuming after a partial transfer is what the kill tests below check: curl
  // averages speed over several seconds, so a stall after a burst takes too long to detect
  // for a unit test.)
  ScopedEnv fast_timeout(std::map<std::string, std::optional<std::string>>{
      {"PRISM_HTTP_TIMEOUT_S", "1"}, {"PRISM_HTTP_RETRIES", "2"}});
  test::write_bytes(www_.str("stall/file.bin"), random_bytes(64 << 10, 3));
  std::string error = error_of([&] { read_text(server_->url() + "/stall/file.bin"); });
  EXPECT_TRUE(error.starts_with(server_->url() + "/stall/file.bin: Operation too slow")) << error;
  EXPECT_NE(error.find("after 2 attempts"), std::string::npos) << error;
}

// Starts copying /slow/big.bin and returns once part of it has arrived, so that the server
// can be killed mid-transfer.
std::jthread start_slow_copy(const std::string& url, const std::string& dest, std::string& error) {
  std::jthread copy([url, dest, &error] {
    error = error_of([&] { copy_to_local(url + "/slow/big.bin", dest); });
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  std::error_code ec;
  while (std::filesystem::file_size(dest + ".partial", ec) <= (256u << 10) || ec) {
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(2ms);
  }
  return copy;
}

TEST_F(Https, ResumesWhenTheServerIsKilledMidTransfer) {
  std::string dest = out_.str("big.bin");
  std::string error;
  {
    std::jthread copy = start_slow_copy(server_->url(), dest, error);
    server_->kill();
    server_->start();
  }
  EXPECT_EQ(error, "no error");
  EXPECT_TRUE(test::read_bytes(dest) == slow_);
  // The retry asked only for what was missing.
  std::smatch resumed;
  const char* resumed_request = R"(GET /slow/big.bin 206 range=bytes=([1-9]\d*)-393215)";
  std::string log = server_->wait_for_log(resumed_request);
  ASSERT_TRUE(std::regex_search(log, resumed, std::regex(resumed_request))) << log;
  EXPECT_GT(std::stoul(resumed[1]), 256u << 10);
  EXPECT_FALSE(std::filesystem::exists(dest + ".partial"));
}

TEST_F(Https, LeavesNoPartialFileWhenTheServerStaysDown) {
  std::string dest = out_.str("big.bin");
  std::string error;
  {
    std::jthread copy = start_slow_copy(server_->url(), dest, error);
    server_->kill();
  }
  EXPECT_NE(error.find(server_->url() + "/slow/big.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("after 4 attempts"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(dest));
  EXPECT_FALSE(std::filesystem::exists(dest + ".partial"));
}

}  // namespace
}  // namespace prism::io
