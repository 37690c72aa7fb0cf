// What the LLM model tests share: reading a fixture's reference outputs (reference*.json under
// tests/data/<family>/<checkpoint>/) and greedy decoding through the engine.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "prism/llm/engine.h"

namespace prism::testing {

// A reference*.json: the prompt, its greedy continuation and the first step's logits at a
// few ids.
struct LlmReference {
  std::vector<int32_t> prompt, greedy;
  std::map<int, double> first_logits;
};

inline LlmReference read_llm_reference(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  LlmReference r;
  r.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  r.greedy = j["greedy_ids"].get<std::vector<int32_t>>();
  for (auto& [k, v] : j["first_logits"].items()) r.first_logits[std::stoi(k)] = v.get<double>();
  return r;
}

// The reference*.json files of fixture directory `dir`, by name: ours and, where a machine
// with transformers made it, reference_hf.json.
inline std::vector<std::string> reference_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string file = entry.path().filename().string();
    if (file.starts_with("reference") && entry.path().extension() == ".json") files.push_back(file);
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// `steps` greedy ids from `logits` on, feeding each but the last back into the engine.
inline std::vector<int32_t> greedy(llm::Engine& engine, std::vector<float> logits, size_t steps) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < steps; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < steps) logits = engine.feed(std::vector<int32_t>{out.back()});
  }
  return out;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max<double>(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

}  // namespace prism::testing
