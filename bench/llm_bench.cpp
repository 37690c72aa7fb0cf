// LLM decode and prefill on a random-weight checkpoint of Llama 3.2 1B's shape, side by side
// with two peers on the same weights (tools/make_bench_llama.py writes them as safetensors and
// as GGUF), all with the same threads:
//   - llama.cpp in bf16 on the GGUF: bench/llamacpp_peer.cpp against the llama.cpp that
//     scripts/build_llamacpp.sh builds into third_party/llama.cpp;
//   - PyTorch, eager, in bf16 and in f32 on the safetensors: bench/llm_torch_peer.py with
//     .venv's Python (a Llama forward with a KV cache in plain torch).
// Decode is also put against the bound that memory bandwidth sets on it (every token reads
// every weight once): bandwidth measured in the same run / bytes per token, the bandwidth taken
// at the start of each run and, as it moves within seconds on a shared machine, also sampled
// right before every decode step.
// Greedy tokens of all sides are compared: the same ids show that all run the same model.
// Then decode with another process spinning on one core (bench.h's BusyCore): the share of its
// idle speed each side keeps.
//
// --format=q8_0|q4_0|q4_k_m runs prism and llama.cpp on a quantized GGUF of the same weights
// instead (llama.cpp's llama-quantize makes it from the bf16 GGUF on first use; without it,
// prism quantize, which writes no Q4_K_M), PyTorch staying out: it has no such weights.
//
//   prism-bench llm [--model=DIR] [--repeats=N] [--llamacpp=0] [--torch=bf16,f32|bf16|f32|0]
//                   [--zero-copy=1] [--format=bf16|q8_0|q4_0|q4_k_m]
//   prism-bench llm --speculate=lookup [--draft-tokens=K]: speculative decoding instead
//   (bench/speculate_bench.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>

#include "bench/bench.h"
#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
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
  std::vector<int32_t> forced_short;  // a peer's next ids when fed prism's greedy_short
};

}  // namespace

// The checkpoint, written by tools/make_bench_llama.py on first use.
void ensure_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "model.gguf") && fs::exists(fs::path(dir) / "config.json")) {
    return;
  }
  std::printf("writing the random checkpoint (safetensors and GGUF, ~5 GB) to %s\n", dir.c_str());
  std::fflush(stdout);
  std::string command = fmt::format("'{}' '{}/tools/make_bench_llama.py' --out '{}'",
                                    PRISM_VENV_PYTHON, PRISM_SOURCE_DIR, dir);
  PRISM_CHECK(std::system(command.c_str()) == 0,
              "llm: could not write the checkpoint with tools/make_bench_llama.py (it needs numpy "
              "in .venv: scripts/setup.sh --bench)");
}

std::string checkpoint_gguf(const std::string& dir, const std::string& format,
                            const std::string& command) {
  namespace fs = std::filesystem;
  PRISM_CHECK(format == "bf16" || format == "q8_0" || format == "q4_0" || format == "q4_k_m",
              "{}: --format takes bf16, q8_0, q4_0 or q4_k_m; not '{}'", command, format);
  if (format == "bf16") return dir + "/model.gguf";
  const fs::path out = fs::path(dir) / ("model-" + format + ".gguf");
  if (fs::exists(out)) return out.string();
  // Named *.gguf: prism quantize writes only files that say what they hold.
  const fs::path partial = fs::path(dir) / ("model-" + format + ".partial.gguf");
  const std::string quantizer = PRISM_LLAMACPP_DIR "/bin/llama-quantize";
  std::string run;
  if (fs::exists(quantizer)) {
    std::string type = format;
    std::transform(type.begin(), type.end(), type.begin(), ::toupper);
    run = fmt::format("'{}' '{}/model.gguf' '{}' {} >'{}.log' 2>&1", quantizer, dir,
                      partial.string(), type, partial.string());
  } else {
    PRISM_CHECK(format != "q4_k_m",
                "{}: --format=q4_k_m needs llama.cpp's llama-quantize (scripts/setup.sh --bench); "
                "prism quantize writes q8_0, q4_0 and q4_k",
                command);
    run = fmt::format("'{}/bin/prism' quantize '{}' '{}' --type={}", PRISM_BINARY_DIR, dir,
                      partial.string(), format);
  }
  std::printf("writing the %s checkpoint to %s\n", format.c_str(), out.c_str());
  std::fflush(stdout);
  PRISM_CHECK(std::system(run.c_str()) == 0, "{}: could not write {}: {}", command, out.string(),
              run);
  fs::rename(partial, out);
  return out.string();
}

namespace {

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

// Decode after the long prompt as run_prism measures it (the median step, as tok/s), without
// its prefills and short prompt.
double prism_decode(llm::Engine& engine, const std::vector<int32_t>& prompt) {
  engine.reset();
  std::vector<int32_t> ids{argmax(engine.feed(prompt))};
  std::vector<double> steps;
  for (int i = 0; i < kDecodeSteps; ++i) {
    auto start = std::chrono::steady_clock::now();
    ids.push_back(argmax(engine.feed(std::span(&ids.back(), 1))));
    steps.push_back(seconds_since(start));
  }
  return 1 / median(steps);
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

// A peer's side: runs `command` and reads the `key value` lines it prints (see
// bench/llamacpp_peer.cpp).
Run run_peer(const std::string& name, const std::string& command) {
  std::map<std::string, std::string> lines;
  FILE* pipe = popen(command.c_str(), "r");
  PRISM_CHECK(pipe, "llm: could not start the {} peer", name);
  char buf[1 << 16];
  while (std::fgets(buf, sizeof buf, pipe)) {
    std::string line(buf);
    while (!line.empty() && line.back() == '\n') line.pop_back();
    size_t space = line.find(' ');
    if (space != std::string::npos) lines[line.substr(0, space)] = line.substr(space + 1);
  }
  int status = pclose(pipe);
  for (const char* key :
       {"prefill_tok_s", "decode_tok_s", "greedy_long", "greedy_short", "forced_short"}) {
    PRISM_CHECK(status == 0 && lines.contains(key), "llm: the {} peer failed: {}", name, command);
  }
  Run run;
  run.prefill_tok_s = std::stod(lines.at("prefill_tok_s"));
  run.decode_tok_s = std::stod(lines.at("decode_tok_s"));
  run.greedy_long = parse_ids(lines.at("greedy_long"));
  run.greedy_short = parse_ids(lines.at("greedy_short"));
  run.forced_short = parse_ids(lines.at("forced_short"));
  return run;
}

// What the peers are given: the model, the threads, the long prompt and its decode steps, the
// short prompt and its steps, the prefill runs, and prism's greedy ids to feed.
std::string peer_arguments(const std::string& model, int threads,
                           const std::vector<int32_t>& prompt, const Run& prism) {
  return fmt::format("'{}' {} {} {} {} {} 3 {}", model, threads, join(prompt), kDecodeSteps,
                     join(kShortPrompt), kShortSteps, join(prism.greedy_short));
}

// One column of the table: prism or a peer.
struct Side {
  std::string name;
  double bytes_factor = 1;  // weight bytes read per token over the checkpoint's (bf16) ones
  bool bf16 = true;         // whether "% of best peak" applies
  std::function<Run(const Run& prism)> run;
};

// The peers that are there; a line each for those that are not.
std::vector<Side> peers(const std::string& dir, const std::string& gguf, bool bf16, int threads,
                        const std::vector<int32_t>& prompt, std::vector<std::string>& missing) {
  std::vector<Side> sides;
  if (option("llamacpp", "1") != "0") {
    std::string peer = PRISM_LLAMACPP_DIR "/bin/llamacpp-peer";
    if (std::filesystem::exists(peer)) {
      sides.push_back({"llama.cpp", 1, true, [=](const Run& prism) {
                         return run_peer("llama.cpp",
                                         fmt::format("'{}' {}", peer,
                                                     peer_arguments(gguf, threads, prompt, prism)));
                       }});
    } else {
      missing.push_back(
          "llama.cpp: not available (scripts/setup.sh --bench builds it into "
          "third_party/llama.cpp)");
    }
  }
  std::vector<std::string> dtypes;
  if (!bf16) {
    missing.push_back("PyTorch: not compared on quantized weights (it runs the bf16 ones)");
  } else if (std::string list = option("torch", "bf16,f32"); list != "0") {
    std::stringstream in(list);
    for (std::string dtype; std::getline(in, dtype, ',');) {
      PRISM_CHECK(dtype == "bf16" || dtype == "f32",
                  "llm: --torch takes bf16, f32, both comma separated, or 0; not '{}'", dtype);
      dtypes.push_back(dtype);
    }
  }
  if (!dtypes.empty()) {
    std::string check =
        fmt::format("'{}' -c 'import torch, safetensors' >/dev/null 2>&1", PRISM_VENV_PYTHON);
    if (std::system(check.c_str()) == 0) {
      for (const std::string& dtype : dtypes) {
        std::string name = "torch " + dtype;
        sides.push_back({name, dtype == "f32" ? 2.0 : 1.0, dtype == "bf16", [=](const Run& prism) {
                           return run_peer(
                               name,
                               fmt::format("'{}' '{}/bench/llm_torch_peer.py' {} --dtype={}",
                                           PRISM_VENV_PYTHON, PRISM_SOURCE_DIR,
                                           peer_arguments(dir, threads, prompt, prism), dtype));
                         }});
      }
    } else {
      missing.push_back("PyTorch: not available (scripts/setup.sh --bench installs it into .venv)");
    }
  }
  return sides;
}

// The wall time of one run of `command` (its output discarded), in seconds: a fresh process's
// time to its first answer, the load included.
double wall_seconds(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  PRISM_CHECK(std::system((command + " >/dev/null 2>&1").c_str()) == 0, "llm: {} failed", command);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// How many leading ids agree.
size_t agreeing(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void llm_bench() {
  if (!option("speculate").empty()) {
    PRISM_CHECK(option("speculate") == "lookup", "llm: --speculate takes lookup; not '{}'",
                option("speculate"));
    speculate_bench();
    return;
  }
  std::string dir = option("model", PRISM_BINARY_DIR "/bench/llama-1b-random");
  int repeats = std::stoi(option("repeats", "3"));
  PRISM_CHECK(repeats >= 1, "llm: --repeats must be at least 1");
  ensure_checkpoint(dir);
  Platform& cpu = get_platform("cpu");
  int threads = static_cast<cpu::CpuPlatform&>(cpu).pool().size();
  const std::string format = option("format", "bf16");
  const bool bf16 = format == "bf16";
  const std::string gguf = checkpoint_gguf(dir, format, "llm");
  llm::EngineOptions options{.seqlen = 1024, .dtype = DType::bf16};
  options.load.zero_copy = option("zero-copy", "0") != "0";
  llm::Engine engine(bf16 ? dir : gguf, cpu, options);
  // A decode step reads every stored weight once (the tied embedding for the logits; its one
  // row for the input is not counted), in bf16 as stored (twice that in f32), or the
  // quantized file's blocks.
  const io::Store store = io::Store::open(dir);
  double bytes =
      static_cast<double>(bf16 ? store.total_bytes() : io::Store::open(gguf).total_bytes());
  const double flops = prefill_flops(store, dir, kPromptTokens);
  // The host's compute peaks: f32 FMAs, bf16 dot products (vdpbf16ps) and AMX tiles where
  // the CPU has them (0 where not), and for quantized weights, whose products multiply 8-bit
  // activations, the vector units' int8 products (vpdpbusd or vpmaddubsw). Prefill is put
  // against the best: on a CPU without bf16 instructions, prism's bf16 products run as f32
  // ones on widened operands.
  const double fp32_peak = measure_fp32_peak_gflops(threads);
  const double vdp_peak = measure_bf16_peak_gflops(threads);
  const double amx_peak = measure_amx_bf16_peak_gflops(threads);
  const double int8_peak = bf16 ? 0 : measure_int8_peak_gops(threads);
  const double best_peak = std::max({fp32_peak, vdp_peak, amx_peak, int8_peak});
  auto peak = [](double gflops) {
    return gflops > 0 ? fmt::format("{:.0f}", gflops) : std::string("none");
  };
  std::string peaks = fmt::format("f32 FMA {}, bf16 vdpbf16ps {}, AMX tdpbf16ps {}",
                                  peak(fp32_peak), peak(vdp_peak), peak(amx_peak));
  if (!bf16) peaks += fmt::format(", int8 products (GOP/s) {}", peak(int8_peak));
  std::vector<int32_t> prompt = long_prompt();

  std::vector<std::string> missing;
  std::vector<Side> sides{{"prism", 1, true, nullptr}};
  for (Side& peer : peers(dir, gguf, bf16, threads, prompt, missing)) {
    sides.push_back(std::move(peer));
  }
  const size_t n = sides.size();

  ReadProbe probe(threads);
  std::vector<double> triad, read, read_during;
  std::vector<std::vector<double>> prefill(n), decode(n);
  std::vector<Run> last(n);
  for (int r = 0; r < repeats; ++r) {
    triad.push_back(measure_triad_gbps(threads));
    read.push_back(probe.best_gbps());
    last[0] = run_prism(engine, prompt, probe);
    read_during.push_back(last[0].read_during_decode);
    for (size_t s = 1; s < n; ++s) last[s] = sides[s].run(last[0]);
    std::printf("run %d: triad %.1f GB/s, read %.1f GB/s (%.1f between decode steps)", r + 1,
                triad.back(), read.back(), read_during.back());
    for (size_t s = 0; s < n; ++s) {
      prefill[s].push_back(last[s].prefill_tok_s);
      decode[s].push_back(last[s].decode_tok_s);
      std::printf("; %s prefill %.1f, decode %.2f tok/s", sides[s].name.c_str(),
                  last[s].prefill_tok_s, last[s].decode_tok_s);
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
      "\nLlama 3.2 1B shape, random weights in %s, %d threads, medians of %d runs, on %s\n"
      "%.2f GB of weights read per token: roofline %.2f tok/s at triad bandwidth (%.1f GB/s), "
      "%.2f at read bandwidth (%.1f GB/s)\n"
      "%.2f TFLOP in a 512-token prefill; compute peaks, GFLOP/s (measured): %s\n\n",
      bf16 ? "bf16" : (format + " (" + gguf + ")").c_str(), threads, repeats,
      cpu.devices().at(0).name.c_str(), bytes / 1e9, median(triad) * 1e9 / bytes, median(triad),
      median(read) * 1e9 / bytes, median(read), flops / 1e12, peaks.c_str());
  // Columns: prism, then each peer with the ratio prism / peer beside it.
  std::printf("%-24s %10s", "", "prism");
  for (size_t s = 1; s < n; ++s) std::printf(" %10s %9s", sides[s].name.c_str(), "ratio");
  std::printf("\n");
  auto row = [&](const char* what, std::vector<std::vector<double>>& v, const char* format) {
    std::printf("%-24s %10s", what, fmt::format(fmt::runtime(format), median(v[0])).c_str());
    for (size_t s = 1; s < n; ++s) {
      std::printf(" %10s %8.2fx", fmt::format(fmt::runtime(format), median(v[s])).c_str(),
                  per_run([&](int r) { return v[0][r] / v[s][r]; }));
    }
    std::printf("\n");
  };
  // A row of percentages under the sides' columns; empty where `value` gives nothing.
  auto percent_row = [&](const std::string& what, auto value) {
    std::string line = fmt::format("{:<24}", what);
    for (size_t s = 0; s < n; ++s) {
      std::optional<double> v = value(s);
      std::string cell = v ? fmt::format("{:.0f}%", *v) : "";
      line += fmt::format("{} {:>10}", s >= 2 ? "          " : "", cell);  // past a ratio
    }
    line.erase(line.find_last_not_of(' ') + 1);
    std::printf("%s\n", line.c_str());
  };
  row("prefill 512, tok/s", prefill, "{:.1f}");
  if (best_peak > 0) {
    percent_row("prefill, % of best peak", [&](size_t s) -> std::optional<double> {
      if (!sides[s].bf16) return std::nullopt;
      return 100 * median(prefill[s]) / kPromptTokens * flops / 1e9 / best_peak;
    });
  }
  row("decode, tok/s", decode, "{:.2f}");
  for (auto [name, gbps] : {std::pair{"triad", &triad}, std::pair{"read", &read}}) {
    percent_row(fmt::format("decode, % of {} roof", name), [&](size_t s) -> std::optional<double> {
      return per_run([&](int r) {
        return 100 * decode[s][r] * bytes * sides[s].bytes_factor / 1e9 / (*gbps)[r];
      });
    });
  }
  percent_row("decode, % of read during", [&](size_t s) -> std::optional<double> {
    if (s) return std::nullopt;
    return per_run([&](int r) { return 100 * decode[0][r] * bytes / 1e9 / read_during[r]; });
  });
  if (n > 1) {
    std::printf(
        "\ngreedy ids (last run), each peer against prism: how many leading ids agree after "
        "the short prompt and after the 512-token one; and fed prism's ids after the short "
        "prompt, at how many steps its most likely next id is prism's\n");
    std::printf("%-12s %14s %14s %14s\n", "", "short prompt", "512-token", "fed prism's");
    for (size_t s = 1; s < n; ++s) {
      size_t forced = 0;
      for (size_t i = 0; i < last[s].forced_short.size() && i < last[0].greedy_short.size(); ++i)
        forced += last[s].forced_short[i] == last[0].greedy_short[i];
      std::printf("%-12s %14s %14s %14s\n", sides[s].name.c_str(),
                  fmt::format("{} of {}", agreeing(last[0].greedy_short, last[s].greedy_short),
                              last[0].greedy_short.size())
                      .c_str(),
                  fmt::format("{} of {}", agreeing(last[0].greedy_long, last[s].greedy_long),
                              last[0].greedy_long.size())
                      .c_str(),
                  fmt::format("{} of {}", forced, last[s].forced_short.size()).c_str());
    }
    std::printf("greedy ids after the short prompt:\n");
    for (size_t s = 0; s < n; ++s) {
      std::printf("  %-11s %s\n", sides[s].name.c_str(), join(last[s].greedy_short).c_str());
    }
  }
  // Decode with another process busy on one core, as on a shared machine: how much of its
  // idle speed each side keeps. prism's idle and busy decode are measured back to back;
  // llama.cpp's busy run is put against its median above.
  {
    std::printf("\ndecode with another process busy on one core, tok/s:\n");
    std::printf("  %-12s %8s %8s %8s\n", "", "idle", "busy", "kept");
    auto kept = [](const char* name, double idle, double busy) {
      std::printf("  %-12s %8.2f %8.2f %7.0f%%\n", name, idle, busy, 100 * busy / idle);
      std::fflush(stdout);
    };
    const double idle = prism_decode(engine, prompt);
    double busy = 0;
    {
      BusyCore core;
      busy = prism_decode(engine, prompt);
    }
    kept("prism", idle, busy);
    for (size_t s = 1; s < n; ++s) {
      if (sides[s].name != "llama.cpp") continue;
      BusyCore core;
      kept("llama.cpp", median(decode[s]), sides[s].run(last[0]).decode_tok_s);
    }
  }
  // A fresh process's first answer: `prism llm` with and without its fast start, and
  // llama.cpp (llamacpp-peer's `first`: load, prompt, first id), each run at least 7 times
  // (a run is half a second; on a shared virtual machine one in three or four of prism's took
  // two to four times the others, in the kernel's memory handling), alternating, with the
  // file in the page cache (every side has read it above).
  const std::vector<int32_t> first_prompt(prompt.begin(), prompt.begin() + 8);
  const std::string model = bf16 ? dir : gguf;
  const int first_runs = std::max(repeats, 7);
  std::printf("\nfirst token of a fresh process (load, 8-token prompt, exit), median of %d:\n",
              first_runs);
  std::vector<std::pair<std::string, std::string>> firsts;
  for (const char* fast : {"true", "false"}) {
    firsts.emplace_back(
        fmt::format("prism{}", fast == std::string("true") ? "" : " --fast-start=false"),
        fmt::format("'{}/bin/prism' llm --model='{}' --prompt-ids={} --max-tokens=1 --print-ids "
                    "--dtype=bf16 --fast-start={}",
                    PRISM_BINARY_DIR, model, join(first_prompt), fast));
  }
  const std::string peer = PRISM_LLAMACPP_DIR "/bin/llamacpp-peer";
  if (option("llamacpp", "1") != "0" && std::filesystem::exists(peer)) {
    firsts.emplace_back(
        "llama.cpp", fmt::format("'{}' '{}' {} {} first", peer, gguf, threads, join(first_prompt)));
  }
  std::vector<std::vector<double>> runs(firsts.size());
  for (int r = 0; r < first_runs; ++r) {
    for (size_t i = 0; i < firsts.size(); ++i) runs[i].push_back(wall_seconds(firsts[i].second));
  }
  std::vector<double> seconds;
  for (const std::vector<double>& v : runs) seconds.push_back(median(v));
  for (size_t i = 0; i < firsts.size(); ++i) {
    std::printf("  %-26s %6.2f s", firsts[i].first.c_str(), seconds[i]);
    if (firsts.back().first == "llama.cpp" && i + 1 < firsts.size()) {
      std::printf("   %.2fx llama.cpp's time", seconds[i] / seconds.back());
    }
    std::printf("\n");
  }
  if (!missing.empty()) std::printf("\n");
  for (const std::string& line : missing) std::printf("%s\n", line.c_str());
}

const Register kLlm{"llm",
                    "Llama 3.2 1B-shaped decode and prefill, side by side with llama.cpp and "
                    "PyTorch",
                    llm_bench};

}  // namespace
}  // namespace prism::bench
