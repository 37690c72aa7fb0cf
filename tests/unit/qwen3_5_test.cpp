// Qwen 3.5 against an independent PyTorch implementation of Hugging Face's semantics
// (tools/make_tiny_qwen3_5.py) and, where a machine with transformers made them, the real
// transformers classes (tools/qwen3_5_reference_hf.py): greedy continuations and first-step
// logits for a tied checkpoint with grouped value heads and an untied one. Then the decode
// state: chunked prefill equals the token-by-token recurrence, padding leaves the recurrent
// and convolution states alone, multi-turn chat equals re-prefilling, reset clears them.
#include "prism/models/qwen3_5.h"

#include <filesystem>
#include <fstream>
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
  return std::string(PRISM_TEST_DATA) + "/qwen3_5/" + name;
}

Reference reference(const std::string& name, const std::string& file = "reference.json") {
  return testing::read_llm_reference(fixture(name) + "/" + file);
}

llm::EngineOptions options(DType dtype = DType::f32, int64_t seqlen = 64) {
  llm::EngineOptions o;
  o.seqlen = seqlen;
  o.dtype = dtype;
  o.load.report = false;
  return o;
}

class Qwen3_5Reference : public ::testing::TestWithParam<const char*> {};

// Every reference*.json of a fixture, computing in f32: logits within 1e-3, 24 greedy tokens.
TEST_P(Qwen3_5Reference, GreedyAndLogitsMatchPyTorch) {
  const std::string name = GetParam();
  std::vector<std::string> files = testing::reference_files(fixture(name));
  EXPECT_GE(files.size(), 1u);
  for (const std::string& platform : testing::cpu_and_pjrt_platforms())
    for (const std::string& file : files) {
      SCOPED_TRACE(platform + " " + file);
      Reference ref = reference(name, file);
      llm::Engine engine(fixture(name), get_platform(platform), options());
      std::vector<float> logits = engine.feed(ref.prompt);
      for (auto [id, want] : ref.first_logits) {
        EXPECT_NEAR(logits[id], want, 1e-3 * std::max(1.0, std::abs(want))) << "token " << id;
      }
      EXPECT_EQ(greedy(engine, logits, ref.greedy.size()), ref.greedy);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3_5Reference,
                         ::testing::Values("tiny-bf16-tied", "tiny-bf16-untied"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Backends without a gated delta rule kernel run its decompositions (chunked for the prompt,
// recurrent for each new token): the same logits and continuation.
TEST(Qwen3_5, RunsThroughTheDecompositions) {
  Reference ref = reference("tiny-bf16-tied");
  testing::DecomposingCpu decomposed;
  llm::Engine engine(fixture("tiny-bf16-tied"), decomposed, options());
  std::vector<float> logits = engine.feed(ref.prompt);
  for (auto [id, want] : ref.first_logits) {
    EXPECT_NEAR(logits[id], want, 1e-3 * std::max(1.0, std::abs(want))) << "token " << id;
  }
  EXPECT_EQ(greedy(engine, logits, 4),
            std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + 4));
}

// Computing in bf16 rounds every activation to 8 bits of mantissa: logits (up to ~8 here) move
// by up to ~0.1.
TEST(Qwen3_5, ComputesInBf16) {
  Reference ref = reference("tiny-bf16-tied");
  llm::Engine engine(fixture("tiny-bf16-tied"), get_platform("cpu"), options(DType::bf16));
  std::vector<float> logits = engine.feed(ref.prompt);
  for (auto [id, want] : ref.first_logits) {
    EXPECT_NEAR(logits[id], want, 0.15) << "token " << id;
  }
}

// Prefill runs the chunked gated delta rule over a padded window; one token at a time runs
// the recurrence. Windows of 16 (one chunk, padded) and 256 (several chunks) both agree.
TEST(Qwen3_5, ChunkedPrefillEqualsTokenByTokenRecurrence) {
  Platform& cpu = get_platform("cpu");
  Reference ref = reference("tiny-bf16-tied");
  std::vector<int32_t> prompt = ref.prompt;
  for (int i = 0; prompt.size() < 70; ++i) prompt.push_back(ref.greedy[i % ref.greedy.size()]);
  for (size_t len : {ref.prompt.size(), prompt.size()}) {
    SCOPED_TRACE(len);
    std::span<const int32_t> tokens(prompt.data(), len);
    llm::Engine whole(fixture("tiny-bf16-tied"), cpu, options(DType::f32, 128));
    std::vector<float> a = whole.feed(tokens);
    llm::Engine single(fixture("tiny-bf16-tied"), cpu, options(DType::f32, 128));
    std::vector<float> b;
    for (int32_t t : tokens) b = single.feed(std::vector<int32_t>{t});
    EXPECT_LE(max_diff(a, b), 1e-4);
    // And the states they leave: the next token's logits agree too.
    EXPECT_LE(
        max_diff(whole.feed(std::vector<int32_t>{198}), single.feed(std::vector<int32_t>{198})),
        1e-4);
  }
}

TEST(Qwen3_5, MultiTurnEqualsReprefillingTheConversation) {
  Platform& cpu = get_platform("cpu");
  std::vector<int32_t> turn1{151644, 872, 198, 3838}, turn2{374, 279, 6722, 315, 9625, 30};
  llm::Engine chat(fixture("tiny-bf16-tied"), cpu, options());
  std::vector<int32_t> answer1 = greedy(chat, chat.feed(turn1), 4);
  chat.feed(std::vector<int32_t>{answer1.back()});  // the last answer token enters the state
  std::vector<float> incremental = chat.feed(turn2);
  std::vector<int32_t> answer2 = greedy(chat, incremental, 6);

  std::vector<int32_t> all = turn1;
  all.insert(all.end(), answer1.begin(), answer1.end());
  all.insert(all.end(), turn2.begin(), turn2.end());
  llm::Engine again(fixture("tiny-bf16-tied"), cpu, options());
  std::vector<float> whole = again.feed(all);
  EXPECT_LE(max_diff(incremental, whole), 1e-4);
  EXPECT_EQ(greedy(again, whole, 6), answer2);
}

TEST(Qwen3_5, ResetClearsTheRecurrentAndConvolutionStates) {
  Platform& cpu = get_platform("cpu");
  Reference ref = reference("tiny-bf16-untied");
  llm::Engine engine(fixture("tiny-bf16-untied"), cpu, options());
  std::vector<float> first = engine.feed(ref.prompt);
  engine.feed(std::vector<int32_t>{1, 2, 3});
  engine.reset();
  EXPECT_EQ(max_diff(engine.feed(ref.prompt), first), 0);
}

// The recurrent, convolution and KV states stay in the buffers the engine allocated: every
// step (prefill windows and decode) writes them where they are, and reset clears them there.
// (The GPU backends share the schedule that decides it; Ops.Donated* run it on them.)
TEST(Qwen3_5, StatesAreUpdatedInTheirOwnBuffers) {
  static testing::DecomposingCpu decomposed;
  for (Platform* platform : {&get_platform("cpu"), static_cast<Platform*>(&decomposed)}) {
    SCOPED_TRACE(std::string(platform->name()));
    llm::Engine engine(fixture("tiny-bf16-tied"), *platform, options());
    auto memory = [&] {
      std::vector<const void*> m;
      for (const Buffer& b : engine.states()) m.push_back(b.memory());
      return m;
    };
    const std::vector<const void*> before = memory();
    // 2 linear-attention layers (q, k and v's convolution states, the recurrent state) and 2
    // full ones (keys, values).
    ASSERT_EQ(before.size(), 12u);
    engine.feed(std::vector<int32_t>{151644, 872, 198, 3838, 374});  // a window of 16
    engine.feed(std::vector<int32_t>{279});                          // decode
    EXPECT_EQ(memory(), before);
    engine.reset();
    EXPECT_EQ(memory(), before);
  }
}

TEST(Qwen3_5, ReadsThePublishedConfig) {
  // Qwen3.5-0.8B's text_config as published (the fields that change the computation).
  nlohmann::json config = nlohmann::json::parse(R"({
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "tie_word_embeddings": true,
    "text_config": {
      "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
      "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
      "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
      "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "vocab_size": 248320,
      "eos_token_id": 248044, "attn_output_gate": true, "tie_word_embeddings": true,
      "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10],
                          "rope_type": "default", "rope_theta": 10000000,
                          "partial_rotary_factor": 0.25}}})");
  models::Qwen3_5Config c = models::Qwen3_5Config::parse(config, "config.json");
  using L = models::Qwen3_5Config::Layer;
  ASSERT_EQ(c.layers.size(), 24u);
  EXPECT_EQ(c.layers[0], L::linear_attention);
  EXPECT_EQ(c.layers[3], L::full_attention);
  EXPECT_EQ(c.layers[22], L::linear_attention);
  EXPECT_EQ(c.layers[23], L::full_attention);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.conv_channels(), 2 * 16 * 128 + 16 * 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.prefix, "model.language_model.");
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{248044});
}

// A model directory holding a fixture's weights and the given config.json text.
struct ModelDir {
  test::TempDir dir;
  ModelDir(const std::string& name, const std::string& config) {
    std::filesystem::create_symlink(fixture(name) + "/model.safetensors",
                                    dir.str("model.safetensors"));
    test::write_bytes(dir.str("config.json"), config);
  }
};

// The fixture's config.json with text_config[key] = value (JSON).
std::string edited_config(const std::string& key, const std::string& value) {
  std::ifstream in(fixture("tiny-bf16-tied") + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["text_config"][key] = nlohmann::json::parse(value);
  return j.dump();
}

TEST(Qwen3_5, BadCheckpointsGiveClearErrors) {
  Platform& cpu = get_platform("cpu");
  auto error = [&](const std::string& key, const std::string& value) {
    ModelDir m("tiny-bf16-tied", edited_config(key, value));
    return testing::error_of([&] { llm::Engine(m.dir.str(), cpu, options()); });
  };
  auto expect_has = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  expect_has(error("layer_types", R"(["linear_attention", "sliding_attention", "x", "y"])"),
             "layer type \"sliding_attention\" is not supported");
  expect_has(error("layer_types", R"(["linear_attention"])"),
             "layer_types lists 1 layers but num_hidden_layers is 4");
  expect_has(error("num_experts", "8"), "mixture-of-experts models are not supported");
  expect_has(error("linear_num_value_heads", "3"),
             "3 linear value heads are not a multiple of 2 key heads");
  expect_has(error("rope_parameters", R"({"rope_type": "yarn"})"),
             "rope_type \"yarn\" is not supported");
  // Sizes that disagree with the file name the tensor.
  // (q, k and v are read as row blocks of the fused tensors: blocks that do not cover them
  // are the error.)
  expect_has(error("linear_key_head_dim", "4"), "linear_attn.conv1d.weight\" in ");
  expect_has(error("linear_key_head_dim", "4"), "but the model reads 48: its sizes disagree");
  expect_has(error("num_hidden_layers", "6"), "layer_types lists 4 layers");
}

}  // namespace
}  // namespace prism
