// LFM 2 / 2.5 against an independent PyTorch implementation of Hugging Face's semantics
// (tools/make_tiny_lfm2.py) and, where a machine with transformers made it, transformers' own
// Lfm2ForCausalLM (tools/lfm2_reference_hf.py): last-position logits and greedy continuations.
// Then the decode state: pieces, padded windows, turns and resets against one-shot prefill.
#include "prism/models/lfm2.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "prism/backends/registry.h"
#include "prism/llm/engine.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/platforms.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using Reference = testing::LlmReference;
using testing::argmax;
using testing::greedy;
using testing::max_diff;

std::string fixture(const std::string& name) {
  return std::string(PRISM_TEST_DATA) + "/lfm2/" + name;
}

Reference reference(const std::string& name, const std::string& file = "reference.json") {
  return testing::read_llm_reference(fixture(name) + "/" + file);
}

llm::EngineOptions options(DType dtype = DType::f32) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = dtype;
  o.load.report = false;
  return o;
}

struct Case {
  const char* name;
  DType dtype;
  double logit_tol;      // absolute
  size_t greedy_tokens;  // computing in bf16 rounds differently from PyTorch: near-ties flip
};

class Lfm2Reference : public ::testing::TestWithParam<Case> {};

TEST_P(Lfm2Reference, GreedyAndLogitsMatchPyTorch) {
  const Case& c = GetParam();
  std::vector<std::string> files = testing::reference_files(fixture(c.name));
  EXPECT_GE(files.size(), 1u);
  for (const std::string& platform : testing::cpu_and_pjrt_platforms())
    for (const std::string& file : files) {
      SCOPED_TRACE(platform + " " + file);
      Reference ref = reference(c.name, file);
      llm::Engine engine(fixture(c.name), get_platform(platform), options(c.dtype));
      std::vector<float> logits = engine.feed(ref.prompt);
      double worst = 0;
      for (auto [id, want] : ref.first_logits) worst = std::max(worst, std::abs(logits[id] - want));
      EXPECT_LE(worst, c.logit_tol) << "over " << ref.first_logits.size() << " logits";
      size_t n = std::min(c.greedy_tokens, ref.greedy.size());
      EXPECT_EQ(greedy(engine, logits, n),
                std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + n));
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lfm2Reference,
                         ::testing::Values(Case{"tiny-bf16-tied", DType::f32, 1e-3, 24},
                                           Case{"tiny-bf16-untied", DType::f32, 1e-3, 24},
                                           Case{"tiny-bf16-tied", DType::bf16, 5e-2, 4}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.name) + "_" +
                                           std::string(name(info.param.dtype));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// One window (padded from 14 to 16 tokens), pieces (padded windows of 16 and 1) and one token
// at a time all leave the same convolution and attention state.
TEST(Lfm2, ChunkedPrefillEqualsTokenByToken) {
  for (const char* name : {"tiny-bf16-tied", "tiny-bf16-untied"}) {
    SCOPED_TRACE(name);
    Reference ref = reference(name);
    Platform& cpu = get_platform("cpu");
    llm::Engine whole(fixture(name), cpu, options());
    std::vector<float> a = whole.feed(ref.prompt);
    llm::Engine parts(fixture(name), cpu, options());
    parts.feed(std::span(ref.prompt).first(5));
    parts.feed(std::span(ref.prompt).subspan(5, 1));
    std::vector<float> b = parts.feed(std::span(ref.prompt).subspan(6));
    llm::Engine single(fixture(name), cpu, options());
    std::vector<float> c;
    for (int32_t t : ref.prompt) c = single.feed(std::vector<int32_t>{t});
    EXPECT_LE(max_diff(a, b), 1e-4);
    EXPECT_LE(max_diff(a, c), 1e-4);
    // The states carry on alike: the next token gives the same logits everywhere.
    std::vector<float> a2 = whole.feed(std::vector<int32_t>{ref.greedy[0]});
    std::vector<float> c2 = single.feed(std::vector<int32_t>{ref.greedy[0]});
    EXPECT_LE(max_diff(a2, c2), 1e-4);
  }
}

TEST(Lfm2, CachedDecodingEqualsRecomputation) {
  Reference ref = reference("tiny-bf16-untied");
  Platform& cpu = get_platform("cpu");
  llm::Engine cached(fixture("tiny-bf16-untied"), cpu, options());
  std::vector<int32_t> seq = ref.prompt;
  std::vector<float> logits = cached.feed(ref.prompt);
  for (int i = 0; i < 5; ++i) {
    seq.push_back(ref.greedy[i]);
    logits = cached.feed(std::vector<int32_t>{ref.greedy[i]});
  }
  llm::Engine fresh(fixture("tiny-bf16-untied"), cpu, options());
  EXPECT_LE(max_diff(fresh.feed(seq), logits), 1e-4);
}

TEST(Lfm2, MultiTurnEqualsReprefillingTheConversation) {
  Platform& cpu = get_platform("cpu");
  const std::string model = fixture("tiny-bf16-tied");
  std::vector<int32_t> turn1{1, 6, 6423, 708}, turn2{7, 708, 6, 1098, 6520, 708};
  llm::Engine chat(model, cpu, options());
  std::vector<int32_t> answer1 = greedy(chat, chat.feed(turn1), 4);
  chat.feed(std::vector<int32_t>{answer1.back()});  // the last answer token enters the state
  std::vector<int32_t> answer2 = greedy(chat, chat.feed(turn2), 6);

  std::vector<int32_t> all = turn1;
  all.insert(all.end(), answer1.begin(), answer1.end());
  all.insert(all.end(), turn2.begin(), turn2.end());
  llm::Engine again(model, cpu, options());
  EXPECT_EQ(greedy(again, again.feed(all), 6), answer2);
}

TEST(Lfm2, ResetClearsTheConvolutionState) {
  Reference ref = reference("tiny-bf16-tied");
  Platform& cpu = get_platform("cpu");
  llm::Engine engine(fixture("tiny-bf16-tied"), cpu, options());
  std::vector<float> first = engine.feed(ref.prompt);
  engine.feed(std::vector<int32_t>{5, 9, 11});
  engine.reset();
  EXPECT_LE(max_diff(engine.feed(ref.prompt), first), 1e-5);
}

// A backend without a short_conv kernel runs the model through the op's decomposition. (One
// call per engine: the decomposing test platform hands its outputs back as the CPU's.)
TEST(Lfm2, DecomposedCompositesGiveTheSameLogits) {
  Reference ref = reference("tiny-bf16-untied");
  testing::DecomposingCpu cpu_decomposed;
  llm::Engine kernels(fixture("tiny-bf16-untied"), get_platform("cpu"), options());
  llm::Engine decomposed(fixture("tiny-bf16-untied"), cpu_decomposed, options());
  EXPECT_LE(max_diff(kernels.feed(ref.prompt), decomposed.feed(ref.prompt)), 1e-4);
}

// config.json's fields as configuration_lfm2 reads them.
nlohmann::json lfm25_config() {
  return nlohmann::json::parse(R"({
    "model_type": "lfm2", "vocab_size": 65536, "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "block_ff_dim": 12288,
    "intermediate_size": 12288, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
    "block_auto_adjust_ff_dim": true, "conv_L_cache": 3, "conv_bias": false,
    "rope_theta": 1000000.0, "norm_eps": 1e-05, "tie_embedding": true, "eos_token_id": 7,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv",
                    "conv", "full_attention", "conv", "full_attention", "conv",
                    "full_attention", "conv", "full_attention", "conv"]})");
}

TEST(Lfm2, ConfigAsHuggingFaceReadsIt) {
  using Layer = models::Lfm2Config::Layer;
  auto c = models::Lfm2Config::parse(lfm25_config(), "config.json");
  EXPECT_EQ(c.intermediate_size, 8192);  // 2/3 of 12288, a multiple of 256
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_layers(), 16);
  EXPECT_EQ(std::count(c.layers.begin(), c.layers.end(), Layer::attention), 6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{7});

  nlohmann::json j = lfm25_config();
  j["block_ff_dim"] = 6656;  // LFM2.5-350M: 4437 rounded up to 4608
  EXPECT_EQ(models::Lfm2Config::parse(j, "config.json").intermediate_size, 4608);
  j["block_ffn_dim_multiplier"] = nullptr;  // no multiplier: no rounding either
  EXPECT_EQ(models::Lfm2Config::parse(j, "config.json").intermediate_size, 4437);
  j["block_auto_adjust_ff_dim"] = false;
  EXPECT_EQ(models::Lfm2Config::parse(j, "config.json").intermediate_size, 6656);

  j = lfm25_config();  // the older form: full_attn_idxs, the rope base in rope_parameters
  j.erase("layer_types");
  j["full_attn_idxs"] = {1, 3};
  j["rope_parameters"] = {{"rope_theta", 5e6}, {"rope_type", "default"}};
  c = models::Lfm2Config::parse(j, "config.json");
  EXPECT_EQ(c.layers[1], Layer::attention);
  EXPECT_EQ(c.layers[2], Layer::conv);
  EXPECT_EQ(std::count(c.layers.begin(), c.layers.end(), Layer::attention), 2);
  EXPECT_EQ(c.rope_theta, 5e6);
  j["tie_word_embeddings"] = true;  // the older tie_embedding wins, as in configuration_lfm2
  j["tie_embedding"] = false;
  EXPECT_FALSE(models::Lfm2Config::parse(j, "config.json").tie_word_embeddings);
}

TEST(Lfm2, BadConfigsGiveClearErrors) {
  auto error = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = lfm25_config();
    edit(j);
    return testing::error_of([&] { models::Lfm2Config::parse(j, "config.json"); });
  };
  EXPECT_EQ(error([](auto& j) { j["layer_types"][3] = "mamba"; }),
            "lfm2: config.json: layer 3 has type \"mamba\"; supported: conv, full_attention");
  EXPECT_EQ(error([](auto& j) { j["num_hidden_layers"] = 4; }),
            "lfm2: config.json: layer_types must list 4 layers (num_hidden_layers), got " +
                lfm25_config()["layer_types"].dump());
  EXPECT_EQ(error([](auto& j) {
              j["rope_parameters"] = {{"rope_type", "yarn"}};
            }),
            "lfm2: config.json: rope type \"yarn\" is not supported (default is)");
  EXPECT_EQ(error([](auto& j) { j["num_key_value_heads"] = 5; }),
            "lfm2: config.json: 32 attention heads are not a multiple of 5 key/value heads");
  EXPECT_EQ(error([](auto& j) { j["conv_L_cache"] = 1; }),
            "lfm2: config.json: conv_L_cache must be at least 2, got 1");
  EXPECT_EQ(error([](auto& j) { j["conv_bias"] = "no"; }),
            "lfm2: config.json: \"conv_bias\" is \"no\", which is not a boolean");
  EXPECT_EQ(error([](auto& j) { j["num_hidden_layers"] = -1; }),
            "lfm2: config.json: num_hidden_layers must be positive, got -1");
  EXPECT_EQ(error([](auto& j) { j["block_ff_dim"] = 1; }),
            "lfm2: config.json: vocab_size, hidden_size and the MLP width must be positive, got "
            "65536, 2048 and 0");
  EXPECT_EQ(error([](auto& j) { j.erase("hidden_size"); }),
            "lfm2: config.json has no integer \"hidden_size\"");
}

// A model directory holding a fixture's weights and an edited config.json.
TEST(Lfm2, BadCheckpointsGiveClearErrors) {
  Platform& cpu = get_platform("cpu");
  auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    test::TempDir dir;
    std::filesystem::create_symlink(fixture("tiny-bf16-untied") + "/model.safetensors",
                                    dir.str("model.safetensors"));
    std::ifstream in(fixture("tiny-bf16-untied") + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    test::write_bytes(dir.str("config.json"), j.dump());
    return testing::error_of([&] { llm::Engine(dir.str(), cpu, options()); });
  };
  // Layer 1 is a convolution layer in the file: as attention its weights are missing.
  std::string e = error([](auto& j) { j["layer_types"][1] = "full_attention"; });
  EXPECT_NE(e.find("model.layers.1.self_attn."), std::string::npos) << e;
  e = error([](auto& j) { j["conv_L_cache"] = 3; });  // the file's kernels have 4 taps
  EXPECT_NE(e.find("model.layers.1.conv.conv.weight"), std::string::npos) << e;
}

}  // namespace
}  // namespace prism
