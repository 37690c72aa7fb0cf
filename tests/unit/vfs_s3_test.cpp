// s3:// against moto's S3 server (tests/tools/s3_server.py) on 127.0.0.1, path-style through
// AWS_ENDPOINT_URL. It checks every request's SigV4 signature against the secret key, as AWS
// does; sigv4_test.cpp also checks the signatures against AWS's examples and botocore.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "io_test_util.h"
#include "prism/core/error.h"
#include "prism/io/s3.h"
#include "prism/io/store.h"
#include "prism/io/vfs.h"
#include "test_servers.h"
#include "test_util.h"

namespace prism::io {
namespace {

using test::S3Server;
using test::ScopedEnv;

using testing::error_of;

class S3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!S3Server::available()) return;
    // One server for the suite: it takes a second to start.
    server_ = new S3Server("models");
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the virtual environment is missing (scripts/setup.sh)";
    auto env = server_->client_env();
    env["PRISM_HTTP_BACKOFF_MS"] = "20";
    env["PRISM_HTTP_RETRIES"] = "3";
    env_.emplace(env);
  }

  static S3Server* server_;
  std::optional<ScopedEnv> env_;
};

S3Server* S3::server_ = nullptr;

TEST_F(S3, ReadsObjectsWithRangeRequests) {
  std::string blob(300000, '\0');
  std::mt19937 rng(7);
  for (auto& c : blob) c = static_cast<char>(rng());
  s3::put_object("s3://models/blobs/random.bin", blob);
  auto file = open("s3://models/blobs/random.bin");
  ASSERT_EQ(file->size(), blob.size());
  std::string all(blob.size(), '\0');
  ReadRange range{file.get(), 0, std::as_writable_bytes(std::span(all))};
  read_ranges(std::span(&range, 1), {.parallelism = 4, .chunk_size = 40000});
  EXPECT_TRUE(all == blob);
  // A key that needs escaping.
  s3::put_object("s3://models/blobs/dir a/été+1.txt", "accents");
  EXPECT_EQ(read_text("s3://models/blobs/dir a/été+1.txt"), "accents");
}

TEST_F(S3, OpensAShardedCheckpointUnderAPrefix) {
  test::TempDir dir;
  test::write_sharded(dir.str(), test::tiny_model());
  for (const auto& e : list(dir.str())) {
    s3::put_object("s3://models/tiny/" + e.path, test::read_bytes(e.uri));
  }
  Store store = Store::open("s3://models/tiny");
  ASSERT_EQ(store.size(), test::tiny_model().size());
  for (const auto& t : test::tiny_model()) {
    std::vector<float> values(t.values.size());
    store.read_tensor_bytes(t.name, std::as_writable_bytes(std::span(values)));
    EXPECT_EQ(values, t.values) << t.name;
  }
}

TEST_F(S3, ListsPrefixesAcrossPages) {
  for (const char* key : {"a.txt", "b.txt", "c.txt", "sub/d.txt", "sub/deeper/e.txt"}) {
    s3::put_object(std::string("s3://models/listing/") + key, key);
  }
  ScopedEnv small_pages("PRISM_S3_LIST_PAGE", "2");
  auto entries = list("s3://models/listing");
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].path, "a.txt");
  EXPECT_EQ(entries[0].size, 5u);
  EXPECT_EQ(entries[3].path, "sub");
  EXPECT_TRUE(entries[3].is_dir);
  auto all = list("s3://models/listing/", true);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[4].uri, "s3://models/listing/sub/deeper/e.txt");
  EXPECT_TRUE(stat("s3://models/listing/sub").is_dir);
  EXPECT_EQ(stat("s3://models/listing/sub/d.txt").size, 9u);
  EXPECT_TRUE(stat("s3://models").is_dir);
}

// `prism io cp` of a prefix whose keys would leave the destination ("prefix//name" is the
// absolute "/name" under it) copies nothing there, and says which key.
TEST_F(S3, CopyRefusesKeysThatLeaveTheDestination) {
  if (!std::filesystem::exists(std::string(PRISM_BIN_DIR) + "/prism")) {
    GTEST_SKIP() << "prism is not built";
  }
  s3::put_object("s3://models/escape//etc-passwd", "x");
  test::TempDir out;
  std::string cmd = std::string(PRISM_BIN_DIR) + "/prism io cp s3://models/escape " +
                    out.str("copy") + " > " + out.str("log") + " 2>&1";
  int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::string log = test::read_bytes(out.str("log"));
  EXPECT_NE(log.find("etc-passwd: the name '/etc-passwd' leaves " + out.str("copy")),
            std::string::npos)
      << log;
  EXPECT_FALSE(std::filesystem::exists("/etc-passwd"));
}

TEST_F(S3, ReportsMissingObjectsAndRefusedCredentials) {
  EXPECT_EQ(error_of([] { open("s3://models/nope.safetensors"); }),
            "s3://models/nope.safetensors: not found (HTTP 404)");
  EXPECT_FALSE(exists("s3://models/nope.safetensors"));
  EXPECT_EQ(error_of([] { stat("s3://models/nope-dir"); }), "s3://models/nope-dir: not found");
  s3::put_object("s3://models/private.txt", "x");
  ScopedEnv wrong_key("AWS_ACCESS_KEY_ID", "WRONGKEY");
  std::string error = error_of([] { list("s3://models"); });
  EXPECT_TRUE(
      error.starts_with("s3://models: access denied (HTTP 403, InvalidAccessKeyId); "
                        "check AWS_ACCESS_KEY_ID"))
      << error;
  EXPECT_NE(error_of([] { open("s3://models/private.txt"); }).find("access denied (HTTP 403"),
            std::string::npos);
}

// The server recomputes each signature with the key's real secret: a request signed with
// another secret is refused, whether it reads, lists or writes, and the error is one line.
TEST_F(S3, RefusesRequestsSignedWithAWrongSecretKey) {
  s3::put_object("s3://models/signed.txt", "signed");
  EXPECT_EQ(read_text("s3://models/signed.txt"), "signed");
  ScopedEnv wrong_secret("AWS_SECRET_ACCESS_KEY", "not-the-secret");
  std::string error = error_of([] { open("s3://models/signed.txt"); });
  EXPECT_TRUE(
      error.starts_with("s3://models/signed.txt: access denied (HTTP 403, "
                        "SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID, "
                        "AWS_SECRET_ACCESS_KEY"))
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_NE(error_of([] { list("s3://models"); }).find("SignatureDoesNotMatch"), std::string::npos);
  EXPECT_NE(
      error_of([] { s3::put_object("s3://models/other.txt", "x"); }).find("SignatureDoesNotMatch"),
      std::string::npos);
}

// A ListObjectsV2 page as servers write it, and one whose Size is not a number, which a
// server could send: std::stoull used to end the process on it.
TEST(S3Listing, ParsesAPageAndRefusesABadSize) {
  const s3::ListPage page = s3::parse_list_page(
      "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1"
      "</NextContinuationToken><Contents><Key>a/b.json</Key><Size>812</Size></Contents>"
      "<Contents><Key>a/c &amp; d</Key><Size>2471645608</Size></Contents>"
      "<CommonPrefixes><Prefix>a/sub/</Prefix></CommonPrefixes></ListBucketResult>",
      "s3://bucket/a/");
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0], (std::pair<std::string, uint64_t>{"a/b.json", 812}));
  EXPECT_EQ(page.objects[1], (std::pair<std::string, uint64_t>{"a/c & d", 2471645608}));
  EXPECT_EQ(page.prefixes, std::vector<std::string>{"a/sub/"});
  EXPECT_EQ(page.next_token, "t&1");
  EXPECT_EQ(testing::error_of([] {
              s3::parse_list_page("<Contents><Key>k</Key><Size>12x</Size></Contents>", "s3://b/");
            }),
            "s3://b/: the S3 listing gives object 'k' the size '12x', not a number");
  EXPECT_EQ(s3::parse_list_page("<IsTruncated>false</IsTruncated>", "s3://b/").next_token, "");
}

}  // namespace
}  // namespace prism::io
