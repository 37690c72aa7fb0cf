// Real servers for the io tests, started by the tests on 127.0.0.1 and always stopped:
// nginx over HTTPS with a self-signed certificate, and moto's S3 server (PyPI, in the project's
// virtual environment) with SigV4 authentication on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io_test_util.h"

namespace prism::test {

// A child process in its own process group, killed (with its group) when this goes out of
// scope or when the test process dies. Its stdout and stderr go to `log_path`.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::map<std::string, std::string>& extra_env = {});
  ~ChildProcess() { kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running();
  // SIGKILL to the whole group, then reap. Idempotent.
  void kill();
  // Waits for a normal exit and returns the exit code (-1 on timeout, after killing it).
  int wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();
// Polls until 127.0.0.1:port accepts connections; throws (with `log_path`'s contents) if the
// child exits or `timeout` passes first.
void wait_for_port(int port, ChildProcess& child, const std::string& log_path,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Sets environment variables for a scope and restores the previous values.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::optional<std::string>> values);
  ScopedEnv(const std::string& name, std::optional<std::string> value)
      : ScopedEnv(std::map<std::string, std::optional<std::string>>{{name, std::move(value)}}) {}
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// nginx serving `root` over HTTPS on a free port. Locations:
//   /private/  requires "Authorization: Bearer <kBearerToken>" (401 otherwise)
//   /forbidden/ always 403, /broken/ always 503
//   /slow/     the first 256 KiB fast, then 128 KiB/s (for killing mid-transfer)
//   /stall/    100 B/s from the first byte (for timeouts)
// plus whatever `extra_config` adds inside the server block. The access log records each
// request's Range header.
class NginxServer {
 public:
  static constexpr const char* kBearerToken = "test-token-123";
  // Skips the calling test when nginx is not installed.
  static bool available();

  // `workers` = 0 runs one process (light, for tests); more run a master and that many
  // worker processes (for benchmarks). Either way kill() takes the whole process group down.
  explicit NginxServer(std::string root, std::string extra_config = "", int workers = 0);
  ~NginxServer() = default;

  // (Re)starts on the same port; waits until it accepts connections.
  void start();
  // SIGKILL: the server dies as in a crash, connections drop mid-transfer.
  void kill() { process_.reset(); }

  int port() const { return port_; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::string access_log() const;
  // The access log once it matches `pattern` (ECMAScript regex), or as it is after 2 s: nginx
  // logs a request after answering it, so the last line may land after the client is done.
  std::string wait_for_log(const std::string& pattern) const;
  // The self-signed certificate to trust (CURL_CA_BUNDLE).
  static const std::string& ca_file();

 private:
  TempDir dir_;
  std::string root_;
  int port_ = 0;
  std::optional<ChildProcess> process_;
};

// An S3 server on a free port (tests/tools/s3_server.py: moto, which checks every request's
// SigV4 signature), with the given bucket, and an access key of its own making.
class S3Server {
 public:
  // Whether the project's virtual environment (scripts/setup.sh) is there to run it.
  static bool available();
  explicit S3Server(const std::string& bucket);
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& access_key_id() const { return access_key_id_; }
  const std::string& secret_access_key() const { return secret_access_key_; }
  // The environment that points prism's s3:// at this server (for ScopedEnv).
  std::map<std::string, std::optional<std::string>> client_env() const {
    return {{"AWS_ENDPOINT_URL", endpoint()},      {"AWS_ENDPOINT_URL_S3", std::nullopt},
            {"AWS_ACCESS_KEY_ID", access_key_id_}, {"AWS_SECRET_ACCESS_KEY", secret_access_key_},
            {"AWS_SESSION_TOKEN", std::nullopt},   {"AWS_REGION", "us-east-1"}};
  }

 private:
  TempDir dir_;
  int port_ = 0;
  std::string access_key_id_, secret_access_key_;
  std::optional<ChildProcess> process_;
};

}  // namespace prism::test
