// prism-bench-tokenizer: encode throughput of prism's tokenizer next to Hugging Face `tokenizers`
// (Rust, through its Python package in .venv), on the same ~1 MB of mixed text (many scripts,
// code, numbers, emoji), in one run:
//   - the text as one sequence, on one thread (HF: RAYON_NUM_THREADS=1,
//     TOKENIZERS_PARALLELISM=false);
//   - the text split after every "\n" into lines, on one thread and on all: HF's encode_batch
//     over the lines, and prism's encode of the same lines one by one, for all threads on its
//     CPU thread pool (prism has no batch encode of its own; the pool hands out contiguous runs
//     of lines as threads come free).
// The threads: prism's pool's (PRISM_THREADS, else the cores); HF gets as many.
//
//   prism-bench-tokenizer [--tokenizer=DIR] [--size-mb=1] [--runs=5]
//
// The text is built from the tokenizer fixture strings (tests/data/tokenizers), shuffled with a
// fixed seed. Each side encodes once to warm up and then `runs` times; medians are reported,
// with the process's CPU time over wall time (1.00 on one thread), and the ids of both sides are
// compared by hash.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "prism/backends/cpu/thread_pool.h"
#include "prism/core/error.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace {

std::string mixed_text(size_t bytes) {
  std::string path = std::string(PRISM_TEST_DATA) + "/tokenizers/llama3.json";
  auto fixture = prism::llm::parse_json(prism::llm::read_text_file(path), path);
  std::vector<std::string> strings;
  for (const auto& c : fixture["cases"]) {
    std::string s = c["text"];
    // Special-token strings would be matched as added tokens: leave them out of plain text.
    if (s.find("<|") == std::string::npos && s.find("<think>") == std::string::npos) {
      strings.push_back(s);
    }
  }
  std::mt19937 random(1234);
  std::string text;
  while (text.size() < bytes) {
    std::shuffle(strings.begin(), strings.end(), random);
    for (const auto& s : strings) {
      text += s;
      text += (random() % 4 == 0) ? "\n" : " ";
      if (text.size() >= bytes) break;
    }
  }
  return text;
}

// The text cut after every "\n": the pieces concatenate to it (the peer cuts it the same way).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end + 1;
    lines.push_back(text.substr(at, end - at));
    at = end;
  }
  return lines;
}

std::string fnv1a(const std::vector<int32_t>& ids) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    hash ^= static_cast<uint64_t>(id);
    hash *= 0x100000001b3ull;
  }
  return fmt::format("{:x}", hash);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One side's runs of one task: the first (warm-up) apart, medians of the rest.
struct Timing {
  double first_s = 0, median_s = 0, cpu_per_wall = 0;
  size_t ids = 0;
  std::string hash;
};

Timing summarize(std::vector<double> seconds, std::vector<double> cpu) {
  Timing t;
  t.first_s = seconds.front();
  seconds.erase(seconds.begin());
  cpu.erase(cpu.begin());
  t.median_s = median(seconds);
  std::vector<double> ratio;
  for (size_t i = 0; i < seconds.size(); ++i) ratio.push_back(cpu[i] / seconds[i]);
  t.cpu_per_wall = median(ratio);
  return t;
}

// Runs `encode` (which returns the ids) runs + 1 times.
template <typename Encode>
Timing measure(int runs, Encode encode) {
  std::vector<double> seconds, cpu;
  std::vector<int32_t> ids;
  for (int r = 0; r <= runs; ++r) {
    double cpu_start = cpu_seconds();
    auto start = std::chrono::steady_clock::now();
    ids = encode();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    cpu.push_back(cpu_seconds() - cpu_start);
  }
  Timing t = summarize(seconds, cpu);
  t.ids = ids.size();
  t.hash = fnv1a(ids);
  return t;
}

std::string read_command(const std::string& command) {
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    pclose(pipe);
  }
  return output;
}

// Hugging Face tokenizers on `mode` ("text" or "lines") with `threads` (hf_available() says
// whether its Python package is in .venv).
Timing run_hf(const std::string& tokenizer_dir, const std::string& text_file, int runs,
              const char* mode, int threads) {
  std::string script = std::string(PRISM_SOURCE_DIR) + "/bench/tokenizer/hf_tokenizers_encode.py";
  std::string command =
      fmt::format("env RAYON_NUM_THREADS={} TOKENIZERS_PARALLELISM={} '{}' '{}' '{}' '{}' {} {}",
                  threads, threads > 1 ? "true" : "false", PRISM_VENV_PYTHON, script, tokenizer_dir,
                  text_file, runs + 1, mode);
  std::string output = read_command(command);
  nlohmann::json js;
  try {
    js = nlohmann::json::parse(output);
  } catch (const std::exception&) {
    prism::fail("the Hugging Face tokenizers peer failed: {}", command);
  }
  Timing t = summarize(js["seconds"].get<std::vector<double>>(),
                       js["cpu_seconds"].get<std::vector<double>>());
  t.ids = js["ids"].get<size_t>();
  t.hash = js["hash"].get<std::string>();
  return t;
}

bool hf_available() {
  std::string command =
      fmt::format("'{}' -c 'import tokenizers' >/dev/null 2>&1", PRISM_VENV_PYTHON);
  return std::system(command.c_str()) == 0;
}

int run(int argc, char** argv) {
  std::string tokenizer_dir = std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1";
  double size_mb = 1.0;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--tokenizer=", 0) == 0)
      tokenizer_dir = arg.substr(12);
    else if (arg.rfind("--size-mb=", 0) == 0)
      size_mb = std::stod(arg.substr(10));
    else if (arg.rfind("--runs=", 0) == 0)
      runs = std::stoi(arg.substr(7));
    else
      prism::fail("unknown argument '{}' (use --tokenizer=DIR --size-mb=N --runs=N)", arg);
  }
  PRISM_CHECK(runs >= 1, "--runs must be at least 1");
  std::string text = mixed_text(static_cast<size_t>(size_mb * 1e6));
  const std::vector<std::string_view> lines = lines_of(text);
  double mb = static_cast<double>(text.size()) / 1e6;
  auto text_file = std::filesystem::temp_directory_path() /
                   fmt::format("prism-bench-tokenizer-{}.txt", static_cast<long>(getpid()));
  std::ofstream(text_file, std::ios::binary) << text;

  auto load_start = std::chrono::steady_clock::now();
  auto tokenizer = prism::llm::Tokenizer::load(tokenizer_dir);
  double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  prism::cpu::ThreadPool pool;
  const int threads = pool.size();

  // Run 0 of the one text warms up (and fills the piece cache) for all of prism's tasks.
  Timing prism_text = measure(runs, [&] { return tokenizer.encode(text); });
  std::vector<std::vector<int32_t>> per_line(lines.size());
  auto joined = [&] {
    std::vector<int32_t> ids;
    for (const auto& l : per_line) ids.insert(ids.end(), l.begin(), l.end());
    return ids;
  };
  Timing prism_lines_1 = measure(runs, [&] {
    for (size_t i = 0; i < lines.size(); ++i) per_line[i] = tokenizer.encode(lines[i]);
    return joined();
  });
  Timing prism_lines = measure(runs, [&] {
    pool.parallel_for(static_cast<int64_t>(lines.size()), 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) per_line[i] = tokenizer.encode(lines[i]);
    });
    return joined();
  });

  std::optional<Timing> hf_text, hf_lines_1, hf_lines;
  bool hf = hf_available();
  if (hf) {
    hf_text = run_hf(tokenizer_dir, text_file.string(), runs, "text", 1);
    hf_lines_1 = run_hf(tokenizer_dir, text_file.string(), runs, "lines", 1);
    hf_lines = run_hf(tokenizer_dir, text_file.string(), runs, "lines", threads);
  }
  if (!std::getenv("PRISM_BENCH_KEEP_TEXT")) std::filesystem::remove(text_file);

  fmt::print(
      "text: {:.2f} MB of mixed text, {} tokens, {} lines; tokenizer {} (prism loads it "
      "in {:.2f} s)\n",
      mb, prism_text.ids, lines.size(), tokenizer_dir, load_s);
  fmt::print("medians of {} runs after a warm-up run, MB/s; ratio: prism / Hugging Face\n\n", runs);
  fmt::print("{:<30} {:>12} {:>14} {:>8}\n", "", "prism", "HF tokenizers", "ratio");
  auto row = [&](const std::string& what, double prism_s, std::optional<double> hf_s) {
    fmt::print("{:<30} {:>12.2f}", what, mb / prism_s);
    if (hf_s) fmt::print(" {:>14.2f} {:>7.1f}x", mb / *hf_s, *hf_s / prism_s);
    fmt::print("\n");
  };
  auto cpu_row = [&](const Timing& p, const std::optional<Timing>& h) {
    fmt::print("{:<30} {:>12.2f}", "  CPU time / wall time", p.cpu_per_wall);
    if (h) fmt::print(" {:>14.2f}", h->cpu_per_wall);
    fmt::print("\n");
  };
  auto hf_s = [](const std::optional<Timing>& t, bool first = false) -> std::optional<double> {
    if (!t) return std::nullopt;
    return first ? t->first_s : t->median_s;
  };
  row("one text, 1 thread", prism_text.median_s, hf_s(hf_text));
  row("  its first (cold) run", prism_text.first_s, hf_s(hf_text, true));
  cpu_row(prism_text, hf_text);
  row("lines, 1 thread", prism_lines_1.median_s, hf_s(hf_lines_1));
  cpu_row(prism_lines_1, hf_lines_1);
  row(fmt::format("lines, {} threads", threads), prism_lines.median_s, hf_s(hf_lines));
  cpu_row(prism_lines, hf_lines);
  if (!hf) {
    fmt::print(
        "\nHugging Face tokenizers: not available (scripts/setup.sh --bench installs it "
        "into .venv)\n");
    return 0;
  }
  auto same = [](const Timing& a, const Timing& b) {
    return a.ids == b.ids && a.hash == b.hash ? "yes" : "NO";
  };
  fmt::print("\nids identical: one text {}, lines on 1 thread {}, on {} {}\n",
             same(prism_text, *hf_text), same(prism_lines_1, *hf_lines_1), threads,
             same(prism_lines, *hf_lines));
  fmt::print(
      "lines: HF's encode_batch (1 thread: TOKENIZERS_PARALLELISM=false; {}: "
      "RAYON_NUM_THREADS={}); prism, having no batch encode, encodes them one by one, on "
      "its thread pool for {}\n",
      threads, threads, threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const prism::Error& e) {
    std::fprintf(stderr, "prism-bench-tokenizer: error: %s\n", e.what());
    return 1;
  }
}
