// `prism serve` under load, beside llama.cpp's llama-server on the same weights (the random
// Llama 3.2 1B-shaped checkpoint of `llm`, safetensors for prism and GGUF for llama-server),
// both in bf16 with the same threads and 16 slots: 1, 4 and 16 clients at once, each streaming
// one completion of kTokens tokens after the same short prompt. Total tokens/s over the run,
// time to first token and time per token after it (p50, p99) per side. --format=q8_0|q4_0|
// q4_k_m serves a quantized GGUF of the same weights on both sides instead (as `llm` makes it).
//
// prism keeps the prompt in its prompt cache (docs/serving.md), as llama-server does;
// --prompt-cache=0 runs prism without it.
//
//   prism-bench serve [--model=DIR] [--llamacpp=0] [--format=bf16|q8_0|q4_0|q4_k_m]
//                     [--prompt-cache=0]
#include <cpuid.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"

extern char** environ;

namespace prism::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTokens = 32;
constexpr int kSlots = 16;

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A server process, stopped (SIGTERM) when this goes; what it prints goes to `log`.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&files, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    PRISM_CHECK(posix_spawn(&pid_, args[0], &files, nullptr, args.data(), environ) == 0,
                "serve: cannot start {}", argv[0]);
    posix_spawn_file_actions_destroy(&files);
  }
  ~Process() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  bool running() const { return waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = 0;
};

bool wait_ready(int port, const Process& p) {
  httplib::Client cli("127.0.0.1", port);
  for (int i = 0; i < 1200 && p.running(); ++i) {  // loading the weights takes a while
    if (auto r = cli.Get("/health"); r && r->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

struct Request {
  double first = 0, per_token = 0;  // seconds
  int tokens = 0;
};

// One streaming completion: counts content chunks (one token each on both servers).
Request stream_one(int port, const std::string& model) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(600);
  nlohmann::json body = {{"model", model},        {"prompt", "The capital of France is"},
                         {"max_tokens", kTokens}, {"temperature", 0},
                         {"stream", true},        {"ignore_eos", true}};
  Request r;
  const auto start = Clock::now();
  Clock::time_point first;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: {", 0) != 0) continue;
      const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
      const auto& c = j["choices"][0];
      if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
        if (r.tokens++ == 0) first = Clock::now();
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error;
  const bool sent = cli.send(req, res, error);
  PRISM_CHECK(sent && res.status == 200, "serve: a request failed ({})",
              sent ? fmt::format("status {}", res.status) : httplib::to_string(error));
  const auto end = Clock::now();
  r.first = std::chrono::duration<double>(first - start).count();
  if (r.tokens > 1) {
    r.per_token = std::chrono::duration<double>(end - first).count() / (r.tokens - 1);
  }
  return r;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

struct Row {
  double tok_s, ttft50, ttft99, tpot50, tpot99;
};

Row load(int port, const std::string& model, int clients) {
  std::vector<Request> results(clients);
  std::vector<std::exception_ptr> errors(clients);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        results[c] = stream_one(port, model);
      } catch (...) {
        errors[c] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);  // the servers stop as the error unwinds
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> first, per;
  int tokens = 0;
  for (const Request& r : results) {
    first.push_back(r.first);
    per.push_back(r.per_token);
    tokens += r.tokens;
  }
  return {tokens / wall, percentile(first, 0.5), percentile(first, 0.99), percentile(per, 0.5),
          percentile(per, 0.99)};
}

// Whether the CPU has AMX-INT8 (CPUID leaf 7, EDX bit 25): llama.cpp's AMX kernels for
// quantized weights crash on this class of CPU, so its weight repacking is turned off there,
// as llamacpp-peer does for `llm --format`.
bool cpu_has_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 25));
}

void serve_bench() {
  const std::string dir = option("model", PRISM_BINARY_DIR "/bench/llama-1b-random");
  ensure_checkpoint(dir);
  const std::string format = option("format", "bf16");
  const std::string gguf = checkpoint_gguf(dir, format, "serve");
  const std::string prism_model = format == "bf16" ? dir : gguf;
  const int threads = static_cast<cpu::CpuPlatform&>(get_platform("cpu")).pool().size();
  struct Side {
    std::string name;
    std::vector<std::string> argv;
    int port;
  };
  std::vector<Side> sides;
  const int prism_port = free_port();
  sides.push_back({"prism",
                   {PRISM_BINARY_DIR "/bin/prism", "serve", "--model=" + prism_model,
                    fmt::format("--port={}", prism_port), fmt::format("--parallel={}", kSlots),
                    "--seqlen=256", "--dtype=bf16", "--model-id=bench",
                    fmt::format("--prompt-cache={}", option("prompt-cache", "1") != "0")},
                   prism_port});
  const std::string server = PRISM_LLAMACPP_DIR "/bin/llama-server";
  if (option("llamacpp", "1") != "0" && std::filesystem::exists(server)) {
    const int port = free_port();
    std::vector<std::string> argv{server,
                                  "-m",
                                  gguf,
                                  "--port",
                                  std::to_string(port),
                                  "-np",
                                  std::to_string(kSlots),
                                  "-c",
                                  std::to_string(256 * kSlots),
                                  "-t",
                                  std::to_string(threads),
                                  "-cb"};
    if (format != "bf16" && cpu_has_amx_int8()) argv.push_back("--no-repack");
    sides.push_back({"llama-server", std::move(argv), port});
  } else if (option("llamacpp", "1") != "0") {
    std::printf("(llama-server not built: scripts/setup.sh --bench)\n");
  }
  std::printf("Llama 3.2 1B shapes (random weights), %s, %d slots, %d tokens a request, on %s\n",
              format == "bf16" ? "bf16" : (format + " weights, bf16 activations").c_str(), kSlots,
              kTokens, get_platform("cpu").devices().at(0).name.c_str());
  std::printf("%-13s %8s %12s %20s %20s\n", "server", "clients", "total tok/s",
              "first token p50/p99", "per token p50/p99");
  std::map<int, double> prism_rate;
  for (const Side& side : sides) {
    const std::string log = fmt::format("{}/bench/{}.log", PRISM_BINARY_DIR, side.name);
    Process p(side.argv, log);
    PRISM_CHECK(wait_ready(side.port, p), "serve: {} did not start (its output: {})", side.name,
                log);
    stream_one(side.port, "bench");  // warm up: every window compiled, caches touched
    for (int clients : {1, 4, 16}) {
      Row r = load(side.port, "bench", clients);
      std::string vs;
      if (side.name == "prism") {
        prism_rate[clients] = r.tok_s;
      } else {
        vs = fmt::format("   prism {:.2f}x", prism_rate[clients] / r.tok_s);
      }
      std::printf("%-13s %8d %12.1f %9.0f/%5.0f ms %9.0f/%5.0f ms%s\n", side.name.c_str(), clients,
                  r.tok_s, r.ttft50 * 1e3, r.ttft99 * 1e3, r.tpot50 * 1e3, r.tpot99 * 1e3,
                  vs.c_str());
      std::fflush(stdout);
    }
    if (side.name == "prism") {
      // Every client sends the same prompt: how much of it the prompt cache kept.
      httplib::Client cli("127.0.0.1", side.port);
      const auto metrics = cli.Get("/metrics");
      auto counter = [&](const std::string& name) -> int64_t {
        const std::string& text = metrics ? metrics->body : std::string();
        const size_t at = text.find("\n" + name + " ");
        return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + name.size() + 2);
      };
      const int64_t cached = counter("prism_prompt_tokens_cached_total");
      const int64_t prefilled = counter("prism_prompt_tokens_total");
      if (cached >= 0 && prefilled >= 0) {
        std::printf("%-13s of the prompts' %lld tokens, %lld from its prompt cache\n", "",
                    static_cast<long long>(cached + prefilled), static_cast<long long>(cached));
      }
    }
  }
  if (prism_rate.count(1) && prism_rate.count(16)) {
    std::printf("prism: 16 clients at %.2fx one client's total tokens/s\n",
                prism_rate[16] / prism_rate[1]);
  }
}

const Register kServe{"serve",
                      "prism serve under 1, 4 and 16 clients beside llama-server (Llama 1B shapes)",
                      serve_bench};

}  // namespace
}  // namespace prism::bench
