// prism against llama.cpp itself on the same GGUF files: tools/make_llamacpp_reference.sh ran
// llama.cpp on the build's llamacpp-small files (tools/make_tiny_gguf.py: a random Llama with
// heads of 32, F32 and with every matrix in Q8_0 or Q4_0) and wrote what it computed into
// tests/data/gguf/llamacpp_reference.json: its 24 greedy ids after a prompt, and, teacher-forced
// on them, its five most likely next ids at each step.
//
// Teacher-forced on llama.cpp's ids, prism's most likely next id is among llama.cpp's five at
// every step, with the quantized products' activations in f32 (the float reference's
// arithmetic) and rounded to 8 bits (llama.cpp's). In the second mode prism computes what
// llama.cpp computes but for the KV cache (llama.cpp keeps it in f16) and summation orders, so
// its top id is llama.cpp's at 95 % of the steps or more. Random tiny models have near-ties that
// either rounding flips: on the Q8_0 file the second step's two best logits are 0.02 apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/registry.h"
#include "prism/io/digest.h"
#include "prism/llm/engine.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

struct Reference {
  std::string file;
  std::string sha256;
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> top5;
};

std::vector<int32_t> prompt_and_models(std::vector<Reference>* models) {
  std::ifstream in(std::string(PRISM_TEST_DATA) + "/gguf/llamacpp_reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& [file, m] : j.at("models").items()) {
    Reference r{file, m.at("sha256"), m.at("ids").get<std::vector<int32_t>>(), {}};
    for (const auto& step : m.at("top5")) {
      std::vector<int32_t> ids;
      for (const auto& entry : step) ids.push_back(entry.at(0).get<int32_t>());
      r.top5.push_back(std::move(ids));
    }
    models->push_back(std::move(r));
  }
  return j.at("prompt").get<std::vector<int32_t>>();
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(LlamaCppReference, NextIdsAmongLlamaCppsTopFive) {
  std::vector<Reference> models;
  const std::vector<int32_t> prompt = prompt_and_models(&models);
  ASSERT_EQ(models.size(), 3u);
  for (const char* mode : {"f32", "int8"}) {
    const testing::QuantActivations activations(mode);
    for (const Reference& r : models) {
      SCOPED_TRACE(r.file + ", activations " + mode);
      const std::string path = std::string(PRISM_GGUF_DIR) + "/" + r.file;
      ASSERT_EQ(io::hex(io::sha256_of_file(path)), r.sha256)
          << path << " is not the file llama.cpp ran: run tools/make_llamacpp_reference.sh";
      ASSERT_EQ(r.top5.size(), r.ids.size());
      llm::EngineOptions o;
      o.seqlen = 64;
      o.dtype = DType::f32;
      o.load.report = false;
      llm::Engine engine(path, get_platform("cpu"), o);
      std::vector<float> logits = engine.feed(prompt);
      int same = 0;
      for (size_t i = 0; i < r.ids.size(); ++i) {
        const int32_t next = argmax(logits);
        const std::vector<int32_t>& top = r.top5[i];
        EXPECT_NE(std::find(top.begin(), top.end(), next), top.end())
            << "step " << i << ": prism's " << next << " is not among llama.cpp's top 5";
        same += next == top[0];
        if (i + 1 < r.ids.size()) logits = engine.feed(std::vector<int32_t>{r.ids[i]});
      }
      const double agreement = double(same) / r.ids.size();
      std::printf("%s, activations %s: top-1 agreement with llama.cpp %d/%zu\n", r.file.c_str(),
                  mode, same, r.ids.size());
      const bool quantized = r.file.find("f32") == std::string::npos;
      // llama.cpp's arithmetic: the int8 mode where this CPU has the integer kernels.
      if (quantized && std::string_view(mode) == "int8" &&
          cpu::int8_activations(quant::GgmlType::Q8_0)) {
        EXPECT_GE(agreement, 0.95);
      }
    }
  }
}

}  // namespace
}  // namespace prism
