// hf:// against a fake Hub: nginx serving the Hub's API and resolve paths (with the Hub's
// headers and redirects) for HF_ENDPOINT, and the standard cache layout on disk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "io_test_util.h"
#include "prism/core/error.h"
#include "prism/io/digest.h"
#include "prism/io/gguf.h"
#include "prism/io/hf.h"
#include "prism/io/hf_hub.h"
#include "prism/io/store.h"
#include "prism/io/vfs.h"
#include "test_servers.h"
#include "test_util.h"

namespace prism::io {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::NginxServer;
using test::ScopedEnv;
using test::TempDir;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

using testing::error_of;

// Lays out a repo on the fake Hub. Files in `lfs` are served like large files: the resolve
// path answers 302 to /cdn/<sha256> (or /slow/<sha256>) with X-Linked-Etag and X-Linked-Size.
struct FakeRepo {
  std::string id;
  std::map<std::string, std::string> files;
  std::set<std::string> lfs;
  bool slow_lfs = false;
  std::string guard;  // nginx directives run first in each location (auth checks)
};

std::string add_repo(const std::string& www, const FakeRepo& repo) {
  std::string config;
  std::string siblings;
  for (const auto& [path, bytes] : repo.files) {
    if (!siblings.empty()) siblings += ",";
    siblings += fmt::format(R"({{"rfilename":"{}","size":{}}})", path, bytes.size());
    if (repo.lfs.contains(path)) {
      std::string sha = hex(sha256(bytes));
      std::string where = repo.slow_lfs ? "slow" : "cdn";
      test::write_bytes(www + "/" + where + "/" + sha, bytes);
      for (const char* rev : {"main", kCommit}) {
        config += fmt::format(
            "location = /{}/resolve/{}/{} {{ {} add_header X-Repo-Commit {}; "
            "add_header X-Linked-Etag '\"{}\"'; add_header X-Linked-Size {}; "
            "return 302 /{}/{}; }}\n",
            repo.id, rev, path, repo.guard, kCommit, sha, bytes.size(), where, sha);
      }
    } else {
      test::write_bytes(www + "/" + repo.id + "/resolve/main/" + path, bytes);
      test::write_bytes(www + "/" + repo.id + "/resolve/" + kCommit + "/" + path, bytes);
    }
  }
  test::write_bytes(www + "/api/models/" + repo.id + "/revision/main",
                    fmt::format(R"({{"sha":"{}","siblings":[{}]}})", kCommit, siblings));
  // try_files: a directory is "not found", as on the Hub (nginx would say 403).
  config += fmt::format(
      "location /{}/resolve/ {{ {} add_header X-Repo-Commit {} always; try_files $uri =404; }}\n",
      repo.id, repo.guard, kCommit);
  config += fmt::format("location /api/models/{}/ {{ {} default_type application/json; }}\n",
                        repo.id, repo.guard);
  return config;
}

std::string tiny_model_bytes() { return encode_safetensors(test::entries_of(test::tiny_model())); }

class Hf : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NginxServer::available()) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh)";
    std::string bearer = fmt::format(R"(if ($http_authorization != "Bearer {}") {{ return 401; }})",
                                     NginxServer::kBearerToken);
    std::string config;
    config += add_repo(www_.str(), {"org/tiny",
                                    {{"config.json", R"({"hidden_size": 4})"},
                                     {"model.safetensors", tiny_model_bytes()},
                                     {"sub/notes.txt", "notes"}},
                                    {"model.safetensors"},
                                    false,
                                    ""});
    config += add_repo(www_.str(), {"org/big", {{"big.bin", big_}}, {"big.bin"}, true, ""});
    config +=
        add_repo(www_.str(), {"org/gguf", {{"model.gguf", gguf_}}, {"model.gguf"}, false, ""});
    config +=
        add_repo(www_.str(), {"private-org/secret",
                              {{"config.json", "{}"}, {"model.safetensors", tiny_model_bytes()}},
                              {"model.safetensors"},
                              false,
                              bearer});
    config += "location /gated-org/ { add_header X-Error-Code GatedRepo always; return 403; }\n";
    // A server that repeats the credentials it was sent, in its words and its headers.
    config +=
        "location /echo-org/ { add_header X-Error-Message \"you sent $http_authorization\" "
        "always; return 403; }\n"
        "location /api/models/echo-org/ { return 500 \"you sent $http_authorization\"; }\n";
    config += "location = /api/whoami-v2 { " + bearer + " default_type application/json; }\n";
    config += "location /api/ { default_type application/json; }\n";
    test::write_bytes(www_.str("api/whoami-v2"), R"({"name":"prism-tester","type":"user"})");
    server_.emplace(www_.str(), config);
    env_.emplace(std::map<std::string, std::optional<std::string>>{
        {"CURL_CA_BUNDLE", NginxServer::ca_file()},
        {"HF_ENDPOINT", server_->url()},
        {"HF_HOME", home_.str()},
        {"HF_HUB_CACHE", std::nullopt},
        {"HUGGINGFACE_HUB_CACHE", std::nullopt},
        {"HF_TOKEN_PATH", std::nullopt},
        {"HF_TOKEN", std::nullopt},
        {"HUGGING_FACE_HUB_TOKEN", std::nullopt},
        {"HF_HUB_OFFLINE", std::nullopt},
        {"PRISM_HTTP_BACKOFF_MS", "20"},
        {"PRISM_HTTP_RETRIES", "4"}});
  }

  std::string repo_cache(const std::string& folder) { return home_.str("hub/" + folder); }

  TempDir www_;
  TempDir home_;
  std::string big_ = std::string(384 << 10, 'b');
  // The GGUF fixture with 4 MiB after it: reading its header must not fetch them.
  std::string gguf_ = test::read_bytes(std::string(PRISM_TEST_DATA) + "/gguf/quant_types.gguf") +
                      std::string(4 << 20, 'g');
  std::optional<NginxServer> server_;
  std::optional<ScopedEnv> env_;
};

TEST_F(Hf, DownloadsIntoTheStandardCacheLayout) {
  EXPECT_EQ(read_text("hf://org/tiny/config.json"), R"({"hidden_size": 4})");
  std::string repo = repo_cache("models--org--tiny");
  EXPECT_EQ(test::read_bytes(repo + "/refs/main"), kCommit);
  fs::path snapshot = fs::path(repo) / "snapshots" / kCommit / "config.json";
  ASSERT_TRUE(fs::is_symlink(snapshot));
  EXPECT_TRUE(fs::read_symlink(snapshot).string().starts_with("../../blobs/"));

  // A large file: redirected to the CDN, stored under its SHA-256, verified.
  Store store = Store::open("hf://org/tiny");
  EXPECT_EQ(store.size(), test::tiny_model().size());
  std::string sha = hex(sha256(tiny_model_bytes()));
  EXPECT_TRUE(fs::exists(repo + "/blobs/" + sha));
  EXPECT_EQ(fs::read_symlink(fs::path(repo) / "snapshots" / kCommit / "model.safetensors"),
            "../../blobs/" + sha);
  EXPECT_FALSE(store.mapped_bytes("lm_head.weight").empty());  // served from the cache file

  // Nested paths link to the blob from deeper.
  EXPECT_EQ(read_text("hf://org/tiny@main/sub/notes.txt"), "notes");
  EXPECT_TRUE(fs::read_symlink(fs::path(repo) / "snapshots" / kCommit / "sub/notes.txt")
                  .string()
                  .starts_with("../../../blobs/"));
  EXPECT_EQ(read_text("hf://org/tiny@" + std::string(kCommit) + "/sub/notes.txt"), "notes");
}

TEST_F(Hf, ReadsHeadersRemotelyWithoutFillingTheCache) {
  Store store = Store::open("hf://org/tiny", {.metadata_only = true});
  ASSERT_EQ(store.size(), test::tiny_model().size());
  std::string sha = hex(sha256(tiny_model_bytes()));
  std::string blob = repo_cache("models--org--tiny") + "/blobs/" + sha;
  EXPECT_FALSE(fs::exists(blob));
  // The bytes can still be read, remotely (range requests to the CDN location).
  std::vector<float> values(test::tiny_model()[5].values.size());
  store.read_tensor_bytes("lm_head.weight", std::as_writable_bytes(std::span(values)));
  EXPECT_EQ(values, test::tiny_model()[5].values);
  EXPECT_FALSE(fs::exists(blob));
  EXPECT_TRUE(store.mapped_bytes("lm_head.weight").empty());
  // Once cached, metadata-only opens use the cache.
  Store::open("hf://org/tiny");
  EXPECT_TRUE(fs::exists(blob));
  EXPECT_FALSE(
      Store::open("hf://org/tiny", {.metadata_only = true}).mapped_bytes("lm_head.weight").empty());
}

TEST_F(Hf, RejectsADownloadThatDoesNotMatchItsDigest) {
  std::string bytes = tiny_model_bytes();
  std::string sha = hex(sha256(bytes));
  bytes.back() ^= 1;  // same size, one bit off
  test::write_bytes(www_.str("cdn/" + sha), bytes);
  std::string error = error_of([] { open("hf://org/tiny/model.safetensors"); });
  EXPECT_NE(error.find("hf://org/tiny/model.safetensors: downloaded file has SHA-256"),
            std::string::npos)
      << error;
  std::string repo = repo_cache("models--org--tiny");
  EXPECT_TRUE(fs::is_empty(repo + "/blobs"));
  EXPECT_FALSE(fs::exists(repo + "/snapshots/" + std::string(kCommit) + "/model.safetensors"));
}

TEST_F(Hf, ListsAndStatsThroughTheApi) {
  auto entries = list("hf://org/tiny");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].path, "config.json");
  EXPECT_EQ(entries[2].path, "sub");
  EXPECT_TRUE(entries[2].is_dir);
  auto all = list("hf://org/tiny", true);
  EXPECT_EQ(all.back().uri, "hf://org/tiny/sub/notes.txt");
  EXPECT_EQ(stat("hf://org/tiny/model.safetensors").size, tiny_model_bytes().size());
  EXPECT_TRUE(stat("hf://org/tiny/sub").is_dir);
  EXPECT_TRUE(stat("hf://org/tiny").is_dir);
  EXPECT_EQ(error_of([] { open("hf://org/tiny/nope.json"); }),
            "hf://org/tiny/nope.json: not found (HTTP 404)");
  EXPECT_FALSE(exists("hf://org/tiny/nope.json"));
}

TEST_F(Hf, WorksOfflineFromTheCache) {
  Store::open("hf://org/tiny");
  read_text("hf://org/tiny/sub/notes.txt");
  server_->kill();
  ScopedEnv offline("HF_HUB_OFFLINE", "1");
  Store store = Store::open("hf://org/tiny");
  EXPECT_EQ(store.size(), test::tiny_model().size());
  EXPECT_EQ(list("hf://org/tiny", true).size(), 2u);  // what the cache holds
  std::string error = error_of([] { open("hf://org/tiny/config-other.json"); });
  EXPECT_NE(error.find("not found in the Hugging Face cache"), std::string::npos) << error;
  EXPECT_NE(error.find("HF_HUB_OFFLINE is set"), std::string::npos) << error;
}

TEST_F(Hf, OpensACachedCheckpointWithoutAnyRequest) {
  // The first open learns that there is no index (recorded under .no_exist, as Python tools
  // do) and fetches model.safetensors; the second needs the server for nothing.
  Store::open("hf://org/tiny");
  EXPECT_TRUE(fs::exists(repo_cache("models--org--tiny") + "/.no_exist/" + kCommit +
                         "/model.safetensors.index.json"));
  server_->kill();
  EXPECT_EQ(Store::open("hf://org/tiny").size(), test::tiny_model().size());
  EXPECT_NE(error_of([] {
              open("hf://org/tiny/model.safetensors.index.json");
            }).find("not found (the cache records that commit"),
            std::string::npos);
}

TEST_F(Hf, RejectsRevisionsThatLeaveTheCache) {
  EXPECT_NE(error_of([] {
              open("hf://org/tiny@..%2F..%2Fx/config.json");
            }).find("invalid revision '../../x'"),
            std::string::npos);
}

// A path in a URI or a repository's listing names a file of the cache's snapshot: one that
// would leave it (.., ., empty parts, backslashes) is refused before anything is asked or
// written.
// A directory of the snapshot that links outside the cache (planted there): the download
// refuses to write through it.
TEST_F(Hf, NeverWritesThroughALinkOutOfTheCache) {
  TempDir outside;
  std::string snapshot = repo_cache("models--org--tiny") + "/snapshots/" + kCommit;
  fs::create_directories(snapshot);
  fs::create_directory_symlink(outside.str(), snapshot + "/sub");
  std::string error = error_of([] { read_text("hf://org/tiny/sub/notes.txt"); });
  EXPECT_NE(error.find("hf://org/tiny/sub/notes.txt: 'sub/notes.txt' would be written outside"),
            std::string::npos)
      << error;
  EXPECT_TRUE(fs::is_empty(outside.str()));
}

// The Hub's listing: names that would leave the repository and sizes that are not byte counts
// are one error each (fuzz/fuzz_hf_listing reads the same function).
TEST(HfListing, RefusesNamesAndSizesThatAreWrong) {
  using hf::parse_repo_listing;
  auto files = parse_repo_listing(
      R"({"siblings": [{"rfilename": "a.json", "size": 3}, {"rfilename": "sub/b"}]})", "hf://o/r");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], (std::pair<std::string, uint64_t>{"a.json", 3}));
  EXPECT_EQ(files[1], (std::pair<std::string, uint64_t>{"sub/b", 0}));
  EXPECT_EQ(
      error_of([] { parse_repo_listing(R"({"siblings": [{"rfilename": "../x"}]})", "hf://o/r"); }),
      "hf://o/r: the Hub lists a file '../x' outside the repository");
  EXPECT_EQ(error_of([] {
              parse_repo_listing(R"({"siblings": [{"rfilename": "/etc/x"}]})", "hf://o/r");
            }),
            "hf://o/r: the Hub lists a file '/etc/x' outside the repository");
  EXPECT_EQ(error_of([] {
              parse_repo_listing(R"({"siblings": [{"rfilename": "x", "size": -1}]})", "hf://o/r");
            }),
            "hf://o/r: the Hub lists a size '-1', not a byte count");
  EXPECT_NE(error_of([] {
              parse_repo_listing(R"({"siblings": "x"})", "hf://o/r");
            }).find("hf://o/r: unexpected answer from the Hub"),
            std::string::npos);
}

TEST(HfPaths, RefusesPathsThatLeaveTheRepository) {
  for (const char* bad :
       {"hf://org/tiny/../../../etc/passwd", "hf://org/tiny/a/../b", "hf://org/tiny/./config.json",
        "hf://org/tiny//config.json", "hf://org/tiny/a\\..\\b"}) {
    const std::string error = testing::error_of([&] { hf::RepoPath::parse(bad); });
    EXPECT_NE(error.find("leaves the repository"), std::string::npos) << bad << ": " << error;
  }
  EXPECT_EQ(hf::RepoPath::parse("hf://org/tiny/sub/model.safetensors").path,
            "sub/model.safetensors");
  EXPECT_EQ(hf::RepoPath::parse("hf://org/tiny/").path, "");
}

TEST_F(Hf, ReusesACacheWrittenByOtherToolsWithoutARequest) {
  // The layout huggingface_hub writes, made by hand; the server is gone.
  std::string repo = repo_cache("models--other--model");
  test::write_bytes(repo + "/refs/main", kCommit);
  test::write_bytes(repo + "/blobs/abc123", tiny_model_bytes());
  fs::create_directories(fs::path(repo) / "snapshots" / kCommit);
  fs::create_symlink("../../blobs/abc123",
                     fs::path(repo) / "snapshots" / kCommit / "model.safetensors");
  server_->kill();
  Store store = Store::open("hf://other/model/model.safetensors");
  EXPECT_EQ(store.size(), test::tiny_model().size());
}

TEST_F(Hf, ExplainsHowToLogIn) {
  std::string error = error_of([] { open("hf://private-org/secret/config.json"); });
  EXPECT_TRUE(error.starts_with("hf://private-org/secret/config.json: unauthorized (HTTP 401)"))
      << error;
  EXPECT_NE(error.find("log in with `prism hf auth login` or set HF_TOKEN"), std::string::npos);

  {
    ScopedEnv wrong("HF_TOKEN", "wrong-token");
    error = error_of([] { open("hf://private-org/secret/config.json"); });
    EXPECT_NE(error.find("the token was refused"), std::string::npos) << error;
    error = error_of([] { hf::whoami(hf::HubSettings::from_env(), "wrong-token"); });
    EXPECT_NE(error.find("the token was refused (HTTP 401)"), std::string::npos) << error;
  }
  {
    ScopedEnv right("HF_TOKEN", NginxServer::kBearerToken);
    EXPECT_EQ(read_text("hf://private-org/secret/config.json"), "{}");
    EXPECT_EQ(Store::open("hf://private-org/secret").size(), test::tiny_model().size());
  }
  error = error_of([] { open("hf://gated-org/model/config.json"); });
  EXPECT_NE(error.find("access denied (HTTP 403)"), std::string::npos) << error;
  EXPECT_NE(error.find("the repo is gated"), std::string::npos) << error;
}

TEST_F(Hf, TokenFileAndWhoami) {
  auto settings = hf::HubSettings::from_env();
  EXPECT_EQ(hf::read_token(settings), "");
  EXPECT_NE(error_of([&] { hf::whoami(settings, ""); }).find("not logged in"), std::string::npos);
  hf::save_token(settings, NginxServer::kBearerToken);
  struct stat st {};
  ASSERT_EQ(::stat(home_.str("token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(hf::read_token(settings), NginxServer::kBearerToken);
  EXPECT_EQ(hf::whoami(settings, hf::read_token(settings)), "prism-tester");
  EXPECT_EQ(read_text("hf://private-org/secret/config.json"), "{}");
  EXPECT_TRUE(hf::delete_token(settings));
  EXPECT_FALSE(hf::delete_token(settings));
}

// Runs the prism command with the test's environment; returns (exit code, stdout + stderr).
std::pair<int, std::string> run_prism(const std::string& args) {
  TempDir out;
  std::string cmd =
      std::string(PRISM_BIN_DIR) + "/prism " + args + " > " + out.str("out") + " 2>&1";
  int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), test::read_bytes(out.str("out"))};
}

// Tokens never reach errors or logs, even from a server that repeats them.
TEST_F(Hf, KeepsTokensOutOfErrors) {
  ScopedEnv token("HF_TOKEN", NginxServer::kBearerToken);
  // A listing's error quotes the body (HTTP 500); a file's, the Hub's X-Error-Message (403).
  for (std::string uri : {"hf://echo-org/repo", "hf://echo-org/repo/config.json"}) {
    bool is_repo = uri.ends_with("repo");
    std::string error = error_of([&] { is_repo ? (void)list(uri) : (void)read_text(uri); });
    EXPECT_NE(error.find("you sent <redacted>"), std::string::npos) << error;
    EXPECT_EQ(error.find(NginxServer::kBearerToken), std::string::npos) << error;
    if (!fs::exists(std::string(PRISM_BIN_DIR) + "/prism")) continue;
    auto [rc, out] = run_prism((is_repo ? "io ls " : "io cat ") + uri);
    EXPECT_EQ(rc, 1);
    EXPECT_NE(out.find("<redacted>"), std::string::npos) << out;
    EXPECT_EQ(out.find(NginxServer::kBearerToken), std::string::npos) << out;
  }
}

// Starts a download of org/big's big.bin and returns once part of it is in the cache.
std::jthread start_big_download(const std::string& blobs, std::string& error) {
  std::jthread download([&error] { error = error_of([] { read_text("hf://org/big/big.bin"); }); });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(blobs, ec)) {
      if (e.path().extension() == ".incomplete" && e.file_size(ec) > (256u << 10)) return download;
    }
    std::this_thread::sleep_for(2ms);
  }
  return download;
}

TEST_F(Hf, ResumesADownloadWhenTheServerIsKilled) {
  std::string repo = repo_cache("models--org--big");
  std::string error;
  {
    auto download = start_big_download(repo + "/blobs", error);
    server_->kill();
    server_->start();
  }
  EXPECT_EQ(error, "no error");
  EXPECT_TRUE(test::read_bytes(repo + "/snapshots/" + kCommit + "/big.bin") == big_);
  // The retry asked only for what was missing.
  EXPECT_TRUE(std::regex_search(server_->wait_for_log(R"(206 range=bytes=[1-9]\d*-393215)"),
                                std::regex(R"(GET /slow/\w+ 206 range=bytes=[1-9]\d*-393215)")));
  for (const auto& e : fs::directory_iterator(repo + "/blobs")) {
    EXPECT_NE(e.path().extension(), ".incomplete");
  }
}

// The files of blobs/ by name.
std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.insert(e.path().filename());
  return names;
}

// A failed download leaves nothing that looks complete: only the partial blob and its progress
// record, from which the next download resumes.
TEST_F(Hf, LeavesNothingThatLooksCompleteWhenADownloadFails) {
  std::string repo = repo_cache("models--org--big");
  std::string blob = hex(sha256(big_));
  std::string error;
  {
    auto download = start_big_download(repo + "/blobs", error);
    server_->kill();
  }
  EXPECT_NE(error.find("hf://org/big/big.bin"), std::string::npos) << error;
  EXPECT_EQ(names_in(repo + "/blobs"),
            (std::set<std::string>{blob + ".incomplete", blob + ".incomplete.progress"}));
  EXPECT_FALSE(fs::exists(repo + "/snapshots/" + std::string(kCommit) + "/big.bin"));
  EXPECT_FALSE(fs::exists(repo + "/refs/main"));
  server_->start();
  EXPECT_TRUE(read_text("hf://org/big/big.bin") == big_);
  EXPECT_TRUE(std::regex_search(server_->wait_for_log(R"(206 range=bytes=[1-9]\d*-393215)"),
                                std::regex(R"(GET /slow/\w+ 206 range=bytes=[1-9]\d*-393215)")));
  EXPECT_EQ(names_in(repo + "/blobs"), std::set<std::string>{blob});
}

// `prism` killed with SIGKILL mid-download: the cache holds nothing that looks complete, and the
// next download asks only for the bytes the killed one had not written.
TEST_F(Hf, ResumesADownloadWhoseProcessWasKilled) {
  if (!fs::exists(std::string(PRISM_BIN_DIR) + "/prism")) GTEST_SKIP() << "prism is not built";
  std::string repo = repo_cache("models--org--big");
  std::string blob = hex(sha256(big_));
  std::string prism = std::string(PRISM_BIN_DIR) + "/prism";
  const char* argv[] = {prism.c_str(), "io", "cat", "hf://org/big/big.bin", nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, prism.c_str(), &actions, nullptr, const_cast<char**>(argv), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  // Past the first 256 KiB the server sends 128 KiB/s: kill it in the slow part.
  std::string partial = repo + "/blobs/" + blob + ".incomplete";
  auto deadline = std::chrono::steady_clock::now() + 20s;
  std::error_code ec;
  auto written_so_far = [&] {
    uintmax_t size = fs::file_size(partial, ec);
    return ec ? 0 : size;
  };
  while (std::chrono::steady_clock::now() < deadline && written_so_far() <= (256u << 10))
    std::this_thread::sleep_for(2ms);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "prism finished before it was killed";
  EXPECT_FALSE(fs::exists(repo + "/blobs/" + blob));
  EXPECT_FALSE(fs::exists(repo + "/snapshots/" + std::string(kCommit) + "/big.bin"));
  uint64_t written = fs::file_size(partial);
  EXPECT_TRUE(read_text("hf://org/big/big.bin") == big_);
  // The resumed request starts where the killed process's progress record stopped: at the
  // partial file's end, or one write before it when the kill fell between the two writes.
  std::smatch m;
  std::string log = server_->wait_for_log(R"(GET /slow/\w+ 206 range=bytes=[1-9]\d*-393215)");
  std::regex resumed(R"(GET /slow/\w+ 206 range=bytes=([1-9]\d*)-393215)");
  ASSERT_TRUE(std::regex_search(log, m, resumed)) << log;
  EXPECT_LE(std::stoull(m[1]), written);
  EXPECT_EQ(names_in(repo + "/blobs"), std::set<std::string>{blob});
}

TEST_F(Hf, IoCommandsWorkOnRepos) {
  if (!fs::exists(std::string(PRISM_BIN_DIR) + "/prism")) GTEST_SKIP() << "prism is not built";
  auto [rc, out] = run_prism("io inspect hf://org/tiny");
  EXPECT_EQ(rc, 0) << out;
  // inspect reads headers; it does not download the checkpoint.
  EXPECT_FALSE(
      fs::exists(repo_cache("models--org--tiny") + "/blobs/" + hex(sha256(tiny_model_bytes()))));
  EXPECT_NE(out.find("hf://org/tiny: 6 tensors, 416 B in 1 file (dtypes F32:6)"), std::string::npos)
      << out;
  std::tie(rc, out) = run_prism("io ls hf://org/tiny");
  EXPECT_NE(out.find("sub/"), std::string::npos) << out;
  std::tie(rc, out) = run_prism("io cat hf://org/tiny/config.json");
  EXPECT_EQ(out, R"({"hidden_size": 4})");
  TempDir copy;
  std::tie(rc, out) = run_prism("io cp hf://org/tiny " + copy.str("tiny"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(test::read_bytes(copy.str("tiny/sub/notes.txt")), "notes");
  EXPECT_TRUE(test::read_bytes(copy.str("tiny/model.safetensors")) == tiny_model_bytes());
  std::tie(rc, out) = run_prism("io stat hf://org/tiny/missing.bin");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "prism: error: hf://org/tiny/missing.bin: not found (HTTP 404)\n");
}

TEST_F(Hf, ReadsAGgufHeaderWithoutDownloadingTheFile) {
  auto file = open("hf://org/gguf/model.gguf", {.metadata_only = true});
  GgufHeader h = GgufHeader::read(*file);
  EXPECT_EQ(h.tensors.size(), 24u);
  EXPECT_EQ(h.get_string("general.name"), "quant types");
  std::vector<float> q4k = h.read_f32(*file, h.tensor("q4_k"));
  std::vector<float> ref = h.read_f32(*file, h.tensor("q4_k.ref"));
  EXPECT_EQ(0, std::memcmp(q4k.data(), ref.data(), q4k.size() * sizeof(float)));
  std::string blob = repo_cache("models--org--gguf") + "/blobs/" + hex(sha256(gguf_));
  EXPECT_FALSE(fs::exists(blob));
  if (!fs::exists(std::string(PRISM_BIN_DIR) + "/prism")) GTEST_SKIP() << "prism is not built";
  auto [rc, out] = run_prism("io inspect hf://org/gguf/model.gguf");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("hf://org/gguf/model.gguf: GGUF v3, 24 tensors"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(blob));
}

TEST_F(Hf, LoginCommandSavesAVerifiedTokenOnly) {
  if (!fs::exists(std::string(PRISM_BIN_DIR) + "/prism")) GTEST_SKIP() << "prism is not built";
  TempDir io;
  test::write_bytes(io.str("good"), std::string(NginxServer::kBearerToken) + "\n");
  test::write_bytes(io.str("bad"), "bad-token\n");
  auto run = run_prism;
  auto [rc, out] = run("hf auth login < " + io.str("bad"));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("the token was refused"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(home_.str("token")));
  std::tie(rc, out) = run("hf auth login < " + io.str("good"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("as prism-tester"), std::string::npos) << out;
  std::tie(rc, out) = run("hf auth whoami");
  EXPECT_EQ(out, "prism-tester\n");
  std::tie(rc, out) = run("hf auth logout");
  EXPECT_EQ(rc, 0);
  std::tie(rc, out) = run("hf auth whoami");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("not logged in"), std::string::npos) << out;
}

}  // namespace
}  // namespace prism::io
