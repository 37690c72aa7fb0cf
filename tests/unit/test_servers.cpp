#include "test_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace prism::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string find_program(const std::string& name, const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> dirs = extra_dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t start = 0, end; start <= p.size(); start = end + 1) {
      end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      dirs.push_back(p.substr(start, end - start));
    }
  }
  for (const auto& dir : dirs) {
    fs::path candidate = fs::path(dir) / name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::string nginx_binary() { return find_program("nginx", {"/usr/sbin", "/usr/local/sbin"}); }

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
                           const std::map<std::string, std::string>& extra_env) {
  // Everything the child needs is prepared before fork: after it, only exec-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!extra_env.contains(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Servers that fork workers (nginx with a master) leave them to be reaped by whoever adopts
  // them when the master dies: make that this process, so kill() can reap the whole group.
  static const bool subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  (void)subreaper;
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + log_path);
  pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(log_fd);
    throw std::runtime_error("fork failed");
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);
    // A test process that crashes must not leave servers behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also from the parent, so kill(-pid) works at once
  ::close(log_fd);
}

bool ChildProcess::running() {
  if (pid_ < 0 || status_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = status;
  return !status_;
}

void ChildProcess::kill() {
  if (pid_ < 0) return;
  ::kill(-pid_, SIGKILL);  // the group: helpers the child started die too
  if (!status_) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
  }
  // Reap the rest of the group (workers adopted by this process when their master died).
  for (int status = 0;;) {
    pid_t r = ::waitpid(-pid_, &status, 0);
    if (r > 0 || (r < 0 && errno == EINTR)) continue;
    break;
  }
  pid_ = -1;
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill();
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return status_ && WIFEXITED(*status_) ? WEXITSTATUS(*status_) : -1;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

void wait_for_port(int port, ChildProcess& child, const std::string& log_path,
                   std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (ok) return;
    if (!child.running() || std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("server on port " + std::to_string(port) +
                               " did not start: " + read_bytes(log_path));
    }
    std::this_thread::sleep_for(5ms);
  }
}

ScopedEnv::ScopedEnv(std::map<std::string, std::optional<std::string>> values) {
  for (const auto& [name, value] : values) {
    const char* old = std::getenv(name.c_str());
    saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
}

ScopedEnv::~ScopedEnv() {
  for (const auto& [name, value] : saved_) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
}

bool NginxServer::available() { return !nginx_binary().empty(); }

const std::string& NginxServer::ca_file() {
  // One certificate per test process, for 127.0.0.1 (an IP subjectAltName: libcurl checks it).
  static TempDir dir;
  static std::string cert = [] {
    std::string key = dir.str("key.pem"), cert = dir.str("cert.pem"), log = dir.str("openssl.log");
    std::string openssl = find_program("openssl", {"/usr/bin"});
    ChildProcess gen(
        {openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1"},
        log);
    if (gen.wait(20s) != 0) throw std::runtime_error("openssl failed: " + read_bytes(log));
    return cert;
  }();
  return cert;
}

NginxServer::NginxServer(std::string root, std::string extra_config, int workers)
    : root_(std::move(root)) {
  const std::string& cert = ca_file();
  std::string key = (fs::path(cert).parent_path() / "key.pem").string();
  fs::create_directories(dir_.path() / "tmp");
  port_ = free_port();
  std::string processes =
      workers > 0 ? "worker_processes " + std::to_string(workers) + ";\n" : "master_process off;\n";
  std::string conf = "daemon off;\n" + processes + R"(pid )" + dir_.str("nginx.pid") +
                     R"(;
error_log )" + dir_.str("error.log") +
                     R"( warn;
)" + (::geteuid() == 0 ? "user root;\n" : "") +
                     R"(
events { worker_connections 128; }
http {
  log_format ranged '$request_method $uri $status range=$http_range sent=$body_bytes_sent';
  access_log )" + dir_.str("access.log") +
                     R"( ranged;
  client_body_temp_path )" +
                     dir_.str("tmp/body") + R"(;
  proxy_temp_path )" +
                     dir_.str("tmp/proxy") + R"(;
  fastcgi_temp_path )" +
                     dir_.str("tmp/fastcgi") + R"(;
  uwsgi_temp_path )" +
                     dir_.str("tmp/uwsgi") + R"(;
  scgi_temp_path )" + dir_.str("tmp/scgi") +
                     R"(;
  types { application/json json; }
  default_type application/octet-stream;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:)" +
                     std::to_string(port_) + R"( ssl;
    ssl_certificate )" +
                     cert + R"(;
    ssl_certificate_key )" +
                     key + R"(;
    root )" + root_ + R"(;
    location /private/ {
      if ($http_authorization != "Bearer )" +
                     kBearerToken + R"(") { return 401; }
    }
    location /forbidden/ { return 403; }
    location /broken/ { return 503; }
    location /slow/ { limit_rate_after 256k; limit_rate 128k; }
    location /stall/ { limit_rate 100; }
)" + extra_config + R"(
  }
}
)";
  write_bytes(dir_.str("nginx.conf"), conf);
  start();
}

void NginxServer::start() {
  process_.reset();
  std::string log = dir_.str("nginx.out");
  process_.emplace(std::vector<std::string>{nginx_binary(), "-p", dir_.str(), "-c",
                                            dir_.str("nginx.conf"), "-e", dir_.str("error.log")},
                   log);
  wait_for_port(port_, *process_, log);
}

std::string NginxServer::access_log() const { return read_bytes(dir_.str("access.log")); }

std::string NginxServer::wait_for_log(const std::string& pattern) const {
  std::regex re(pattern);
  auto deadline = std::chrono::steady_clock::now() + 2s;
  std::string log = access_log();
  while (!std::regex_search(log, re) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
    log = access_log();
  }
  return log;
}

bool S3Server::available() { return ::access(PRISM_VENV_PYTHON, X_OK) == 0; }

S3Server::S3Server(const std::string& bucket) {
  std::string log = dir_.str("s3_server.log");
  process_.emplace(
      std::vector<std::string>{PRISM_VENV_PYTHON, std::string(PRISM_TEST_TOOLS) + "/s3_server.py",
                               bucket},
      log);
  // The server picks its port and makes its access key, then prints both on one line: no race
  // with other tests for the port.
  static const std::regex kReady(
      R"re(\{"port": (\d+), "access_key_id": "([^"]+)", "secret_access_key": "([^"]+)"\})re");
  auto deadline = std::chrono::steady_clock::now() + 30s;
  std::smatch match;
  std::string out;  // outlives the loop: match points into it
  while (true) {
    out = read_bytes(log);
    if (std::regex_search(out, match, kReady)) break;
    if (!process_->running() || std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("the S3 server did not start: " + out);
    }
    std::this_thread::sleep_for(10ms);
  }
  port_ = std::stoi(match[1]);
  access_key_id_ = match[2];
  secret_access_key_ = match[3];
  wait_for_port(port_, *process_, log);
}

}  // namespace prism::test
