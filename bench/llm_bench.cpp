// LLM decode and prefill on a random-weight checkpoint of Llama 3.2 1B's shape, side by side
// with llama.cpp on the same weights (tools/make_bench_llama.py writes them as safetensors and
// as GGUF; llm_llamacpp_peer.mjs runs llama.cpp through node-llama-cpp), both with the same
// threads and in bf16. Decode is also put against the bound that memory bandwidth sets on it
// (every token reads every weight once): bandwidth measured in the same run / bytes per token,
// the bandwidth taken at the start of each run and, as it moves within seconds on a shared
// machine, also sampled right before every decode step.
// Greedy tokens of both are compared: the same ids show that both run the same model.
//
//   prism-bench llm [--model=DIR] [--repeats=N] [--llamacpp=0] [--zero-copy=1]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/core/error.h"
#include "prism/io/store.h"
#include "prism/llm/engine.h"

namespace prism::bench {
namespace {

constexpr int kPromptTokens = 512;
constexpr int kDecodeSteps = 32;
constexpr int kShortSteps = 16;
const std::vector<int32_t> kShortPrompt{128000, 791, 6864, 315, 9822, 374};

// <|begin_of_text|> then ids spread over the vocabulary: fixed, so both sides read the same.
std::vector<int32_t> long_prompt() {
  std::vector<int32_t> ids{128000};
  for (int i = 1; i < kPromptTokens; ++i) ids.push_back(i * 7919 % 128000);
  return ids;
}

std::string join(const std::vector<int32_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One side's results.
struct Run {
  double prefill_tok_s = 0, decode_tok_s = 0;
  double read_during_decode = 0;  // GB/s, the median of probes taken between decode steps
  std::vector<int32_t> greedy_long, greedy_short;
  std::vector<int32_t> forced_short;  // llama.cpp's next ids when fed prism's greedy_short
};

// The checkpoint, written by tools/make_bench_llama.py on first use.
void ensure_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "model.gguf") && fs::exists(fs::path(dir) / "config.json")) {
    return;
  }
  std::printf("writing the random checkpoint (safetensors and GGUF, ~5 GB) to %s\n", dir.c_str());
  std::fflush(stdout);
  std::string command = fmt::format("/usr/bin/python3 '{}/tools/make_bench_llama.py' --out '{}'",
                                    PRISM_SOURCE_DIR, dir);
  PRISM_CHECK(std::system(command.c_str()) == 0,
              "llm: could not write the checkpoint with tools/make_bench_llama.py (it needs numpy: "
              "scripts/setup.sh --bench)");
}

// The flops of a prefill of `tokens` into an empty cache: every projection once per token,
// the tied output layer once (logits of the last position only), and causal attention (each
// position's scores and weighted sum over the positions up to it).
double prefill_flops(const io::Store& store, const std::string& dir, int64_t tokens) {
  double flops = 0;
  for (const std::string& name : store.names()) {
    const double numel = static_cast<double>(store.shape(name).numel());
    if (name.ends_with("_proj.weight")) flops += 2 * numel * tokens;
    if (name == "model.embed_tokens.weight") flops += 2 * numel;
  }
  std::ifstream f(std::filesystem::path(dir) / "config.json");
  nlohmann::json config = nlohmann::json::parse(f);
  const double layers = config.at("num_hidden_layers").get<double>();
  const double heads = config.at("num_attention_heads").get<double>();
  const double head_dim = config.value("head_dim", config.at("hidden_size").get<double>() / heads);
  flops += 4 * head_dim * heads * layers * tokens * (tokens + 1) / 2;
  return flops;
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `probe` samples the read bandwidth before every decode step: bandwidth on a shared machine
// moves within seconds, and these samples see the same conditions as the steps.
Run run_prism(llm::Engine& engine, const std::vector<int32_t>& prompt, ReadProbe& probe) {
  Run run;
  std::vector<double> prefill, steps, read;
  for (int r = 0; r < 3; ++r) {
    engine.reset();
    auto start = std::chrono::steady_clock::now();
    engine.feed(prompt);
    prefill.push_back(prompt.size() / seconds_since(start));
  }
  engine.reset();
  run.greedy_long.push_back(argmax(engine.feed(prompt)));
  for (int i = 0; i < kDecodeSteps; ++i) {
    read.push_back(probe.gbps());
    auto start = std::chrono::steady_clock::now();
    int32_t next = argmax(engine.feed(std::span(&run.greedy_long.back(), 1)));
    steps.push_back(seconds_since(start));
    run.greedy_long.push_back(next);
  }
  engine.reset();
  run.greedy_short.push_back(argmax(engine.feed(kShortPrompt)));
  while (static_cast<int>(run.greedy_short.size()) < kShortSteps) {
    run.greedy_short.push_back(argmax(engine.feed(std::span(&run.greedy_short.back(), 1))));
  }
  run.prefill_tok_s = median(prefill);
  run.decode_tok_s = 1 / median(steps);
  run.read_during_decode = median(read);
  return run;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t at = 0; at < text.size();) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    ids.push_back(std::stoi(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return ids;
}

// llama.cpp through node-llama-cpp; nothing when the package is not installed.
std::optional<Run> run_llamacpp(const std::string& dir, int threads,
                                const std::vector<int32_t>& prompt, const Run& prism) {
  std::string npm = PRISM_NPM_DIR;
  if (option("llamacpp", "1") == "0") return std::nullopt;
  if (!std::filesystem::exists(npm + "/node-llama-cpp/package.json")) return std::nullopt;
  std::string command =
      fmt::format("node '{}/bench/llm_llamacpp_peer.mjs' '{}' '{}/model.gguf' {} {} {} {} {} 3 {}",
                  PRISM_SOURCE_DIR, npm, dir, threads, join(prompt), kDecodeSteps,
                  join(kShortPrompt), kShortSteps, join(prism.greedy_short));
  std::map<std::string, std::string> lines;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[1 << 16];
    while (std::fgets(buf, sizeof buf, pipe)) {
      std::string line(buf);
      while (!line.empty() && line.back() == '\n') line.pop_back();
      size_t space = line.find(' ');
      if (space != std::string::npos) lines[line.substr(0, space)] = line.substr(space + 1);
    }
    PRISM_CHECK(pclose(pipe) == 0 && lines.size() == 5,
                "llm: the llama.cpp peer (bench/llm_llamacpp_peer.mjs) failed");
  }
  Run run;
  run.prefill_tok_s = std::stod(lines.at("prefill_tok_s"));
  run.decode_tok_s = std::stod(lines.at("decode_tok_s"));
  run.greedy_long = parse_ids(lines.at("greedy_long"));
  run.greedy_short = parse_ids(lines.at("greedy_short"));
  run.forced_short = parse_ids(lines.at("forced_short"));
  return run;
}

// How many leading ids agree.
size_t agreeing(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void llm_bench() {
  std::string dir = option("model", PRISM_BINARY_DIR "/bench/llama-1b-random");
  int repeats = std::stoi(option("repeats", "3"));
  PRISM_CHECK(repeats >= 1, "llm: --repeats must be at least 1");
  ensure_checkpoint(dir);
  Platform& cpu = get_platform("cpu");
  int threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  llm::EngineOptions options{.seqlen = 1024, .dtype = DType::bf16};
  options.load.zero_copy = option("zero-copy", "0") != "0";
  llm::Engine engine(dir, cpu, options);
  // A decode step reads every stored weight once (the tied embedding for the logits; its one
  // row for the input is not counted), all in bf16 as stored.
  const io::Store store = io::Store::open(dir);
  double bytes = static_cast<double>(store.total_bytes());
  const double flops = prefill_flops(store, dir, kPromptTokens);
  const double bf16_peak = measure_bf16_peak_gflops(threads);
  std::vector<int32_t> prompt = long_prompt();

  ReadProbe probe(threads);
  std::vector<double> triad, read, read_during, prefill[2], decode[2];
  Run last[2];
  bool peer = true;
  for (int r = 0; r < repeats; ++r) {
    triad.push_back(measure_triad_gbps(threads));
    read.push_back(probe.best_gbps());
    last[0] = run_prism(engine, prompt, probe);
    read_during.push_back(last[0].read_during_decode);
    std::optional<Run> l = run_llamacpp(dir, threads, prompt, last[0]);
    peer = l.has_value();
    if (peer) last[1] = *l;
    for (int s = 0; s < (peer ? 2 : 1); ++s) {
      prefill[s].push_back(last[s].prefill_tok_s);
      decode[s].push_back(last[s].decode_tok_s);
    }
    std::printf(
        "run %d: triad %.1f GB/s, read %.1f GB/s (%.1f between decode steps); prism prefill "
        "%.1f, decode %.2f tok/s",
        r + 1, triad.back(), read.back(), read_during.back(), last[0].prefill_tok_s,
        last[0].decode_tok_s);
    if (peer) {
      std::printf("; llama.cpp prefill %.1f, decode %.2f tok/s", last[1].prefill_tok_s,
                  last[1].decode_tok_s);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // Bandwidth moves from run to run on a shared machine: every ratio is taken within one run,
  // and the table shows the medians of those.
  auto per_run = [&](auto f) {
    std::vector<double> v;
    for (int r = 0; r < repeats; ++r) v.push_back(f(r));
    return median(v);
  };
  std::printf(
      "\nLlama 3.2 1B shape, random bf16 weights, %d threads, medians of %d runs\n"
      "%.2f GB of weights read per token: roofline %.2f tok/s at triad bandwidth (%.1f GB/s), "
      "%.2f at read bandwidth (%.1f GB/s)\n"
      "%.2f TFLOP in a 512-token prefill; bf16 dot peak %.0f GFLOP/s (measured, vdpbf16ps)\n\n",
      threads, repeats, bytes / 1e9, median(triad) * 1e9 / bytes, median(triad),
      median(read) * 1e9 / bytes, median(read), flops / 1e12, bf16_peak);
  std::printf("%-24s %10s %10s %10s\n", "", "prism", "llama.cpp", "ratio");
  auto row = [&](const char* what, std::vector<double>* v, const char* format) {
    std::printf("%-24s %10s", what, fmt::format(fmt::runtime(format), median(v[0])).c_str());
    if (peer) {
      std::printf(" %10s %9.2fx", fmt::format(fmt::runtime(format), median(v[1])).c_str(),
                  per_run([&](int r) { return v[0][r] / v[1][r]; }));
    }
    std::printf("\n");
  };
  row("prefill 512, tok/s", prefill, "{:.1f}");
  if (bf16_peak > 0) {
    std::printf("%-24s", "prefill, % of bf16 peak");
    for (int s = 0; s < (peer ? 2 : 1); ++s) {
      std::printf(" %9.0f%%", 100 * median(prefill[s]) / kPromptTokens * flops / 1e9 / bf16_peak);
    }
    std::printf("\n");
  }
  row("decode, tok/s", decode, "{:.2f}");
  for (auto [name, gbps] : {std::pair{"triad", &triad}, std::pair{"read", &read}}) {
    std::printf("%-24s", fmt::format("decode, % of {} roof", name).c_str());
    for (int s = 0; s < (peer ? 2 : 1); ++s) {
      std::printf(" %9.0f%%",
                  per_run([&](int r) { return 100 * decode[s][r] * bytes / 1e9 / (*gbps)[r]; }));
    }
    std::printf("\n");
  }
  std::printf("%-24s %9.0f%%\n", "decode, % of read during",
              per_run([&](int r) { return 100 * decode[0][r] * bytes / 1e9 / read_during[r]; }));
  if (!peer) {
    std::printf("\nllama.cpp: not available (scripts/setup.sh --bench installs node-llama-cpp)\n");
    return;
  }
  std::printf(
      "\ngreedy ids, prism vs llama.cpp (last run): %zu of %zu agree after the short "
      "prompt, %zu of %zu after the 512-token one\n",
      agreeing(last[0].greedy_short, last[1].greedy_short), last[0].greedy_short.size(),
      agreeing(last[0].greedy_long, last[1].greedy_long), last[0].greedy_long.size());
  size_t forced = 0;
  for (size_t i = 0; i < last[1].forced_short.size(); ++i)
    forced += last[1].forced_short[i] == last[0].greedy_short[i];
  std::printf("  prism     %s\n  llama.cpp %s\n", join(last[0].greedy_short).c_str(),
              join(last[1].greedy_short).c_str());
  std::printf(
      "fed prism's ids after the short prompt, llama.cpp's most likely next id is prism's "
      "at %zu of %zu steps\n",
      forced, last[1].forced_short.size());
}

const Register kLlm{"llm", "Llama 3.2 1B-shaped decode and prefill, side by side with llama.cpp",
                    llm_bench};

}  // namespace
}  // namespace prism::bench
