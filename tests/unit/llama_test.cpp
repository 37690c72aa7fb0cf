// Llama against an independent PyTorch implementation of Hugging Face's semantics
// (tools/make_tiny_llama.py): greedy continuations and first-step logits, for a tied bf16
// checkpoint with llama3 rope scaling and an untied f32 one.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "prism/backends/registry.h"
#include "prism/io/s3.h"
#include "prism/llm/engine.h"
#include "prism/models/causal_lm.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/platforms.h"
#include "tests/unit/test_servers.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using Reference = testing::LlmReference;
using testing::greedy;

std::string fixture(const std::string& name) {
  return std::string(PRISM_TEST_DATA) + "/llama/" + name;
}

Reference reference(const std::string& name, const std::string& file = "reference.json") {
  return testing::read_llm_reference(fixture(name) + "/" + file);
}

llm::EngineOptions options(DType dtype) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = dtype;
  o.load.report = false;
  return o;
}

struct Case {
  const char* name;
  DType dtype;
  // Against reference.json, which tools/make_tiny_llama.py computes in the weights' dtype (bf16
  // for a bf16 checkpoint), and against reference_hf.json, which transformers computes in f32
  // (0: logit_tol as well).
  double logit_tol;
  size_t greedy_tokens;  // computing in bf16 rounds differently from PyTorch: near-ties flip
  double hf_logit_tol = 0;
};

class LlamaReference : public ::testing::TestWithParam<Case> {};

// Every reference*.json of a fixture: ours (tools/make_tiny_llama.py) and, where a machine
// with transformers made it, reference_hf.json (tools/llama_reference_hf.py).
TEST_P(LlamaReference, GreedyAndLogitsMatchPyTorch) {
  const Case& c = GetParam();
  std::vector<std::string> files = testing::reference_files(fixture(c.name));
  EXPECT_GE(files.size(), 1u);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    Reference ref = reference(c.name, file);
    llm::Engine engine(fixture(c.name), get_platform("cpu"), options(c.dtype));
    std::vector<float> logits = engine.feed(ref.prompt);
    const double tol =
        file == "reference_hf.json" && c.hf_logit_tol > 0 ? c.hf_logit_tol : c.logit_tol;
    for (auto [id, want] : ref.first_logits) {
      EXPECT_NEAR(logits[id], want, tol * std::max(1.0, std::abs(want))) << "token " << id;
    }
    size_t n = std::min(c.greedy_tokens, ref.greedy.size());
    EXPECT_EQ(greedy(engine, logits, n),
              std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + n));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaReference,
                         ::testing::Values(Case{"tiny-f32", DType::f32, 1e-4, 24},
                                           Case{"tiny-bf16-tied", DType::f32, 2e-2, 24, 1e-4},
                                           Case{"tiny-bf16-tied", DType::bf16, 5e-2, 12}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.name) + "_" +
                                           std::string(name(info.param.dtype));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Every other platform available here (OpenCL on PoCL in CI) gives the CPU's greedy tokens and
// logits close to the CPU's, from the same weights.
TEST(Llama, SameGreedyTokensOnEveryPlatform) {
  testing::check_expected_platforms();
  const Case cases[] = {{"tiny-f32", DType::f32, 1e-3, 24},
                        {"tiny-bf16-tied", DType::bf16, 5e-2, 12}};
  for (const PlatformStatus& s : platform_statuses()) {
    if (!s.available || s.name == "cpu") continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(s.name + " " + c.name + " " + std::string(name(c.dtype)));
      Reference ref = reference(c.name);
      llm::Engine cpu(fixture(c.name), get_platform("cpu"), options(c.dtype));
      llm::Engine other(fixture(c.name), get_platform(s.name), options(c.dtype));
      std::vector<float> want = cpu.feed(ref.prompt), got = other.feed(ref.prompt);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], c.logit_tol * std::max(1.0f, std::abs(want[i])))
            << "token " << i;
      }
      EXPECT_EQ(greedy(other, got, c.greedy_tokens), greedy(cpu, want, c.greedy_tokens));
    }
  }
}

TEST(Llama, IncrementalPrefillEqualsOneShot) {
  Reference ref = reference("tiny-f32");
  Platform& cpu = get_platform("cpu");
  llm::Engine whole(fixture("tiny-f32"), cpu, options(DType::f32));
  std::vector<float> a = whole.feed(ref.prompt);
  // The same prompt in two turns, then one token at a time: the cache carries the context.
  llm::Engine parts(fixture("tiny-f32"), cpu, options(DType::f32));
  parts.feed(std::span(ref.prompt).first(2));
  std::vector<float> b = parts.feed(std::span(ref.prompt).subspan(2));
  llm::Engine single(fixture("tiny-f32"), cpu, options(DType::f32));
  std::vector<float> c;
  for (int32_t t : ref.prompt) c = single.feed(std::vector<int32_t>{t});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i += 997) {
    EXPECT_NEAR(a[i], b[i], 1e-4);
    EXPECT_NEAR(a[i], c[i], 1e-4);
  }
  // After reset the cache is reused from position 0.
  parts.reset();
  std::vector<float> d = parts.feed(ref.prompt);
  for (size_t i = 0; i < a.size(); i += 997) EXPECT_NEAR(a[i], d[i], 1e-4);
}

TEST(Llama, BadInputGivesClearErrors) {
  Platform& cpu = get_platform("cpu");
  llm::EngineOptions o = options(DType::f32);
  o.seqlen = 8;
  llm::Engine engine(fixture("tiny-f32"), cpu, o);
  EXPECT_EQ(testing::error_of([&] { engine.feed(std::vector<int32_t>(9, 1)); }),
            "llm: the conversation needs 9 positions but the cache holds 8 (--seqlen)");
  EXPECT_EQ(testing::error_of([&] { engine.feed(std::vector<int32_t>{128256}); }),
            "llm: token id 128256 is outside the vocabulary of 128256");
  o.seqlen = 1 << 20;
  EXPECT_EQ(testing::error_of([&] { llm::Engine(fixture("tiny-f32"), cpu, o); }),
            "llm: --seqlen=1048576 must be between 1 and the model's 2048 positions");
}

// Found by fuzz/fuzz_config: a config.json with no attention heads divided by zero, and a value
// of the wrong type ended the process with an uncaught JSON exception.
TEST(Llama, BadConfigsGiveOneErrorLine) {
  nlohmann::json config = nlohmann::json::parse(R"({"model_type": "llama", "vocab_size": 64,
      "hidden_size": 16, "intermediate_size": 48, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1})");
  EXPECT_NO_THROW(models::make_causal_lm(config, "config.json", DType::f32));
  config["num_attention_heads"] = 0;
  EXPECT_EQ(testing::error_of([&] { models::make_causal_lm(config, "config.json", DType::f32); }),
            "llama: config.json has no positive integer \"num_attention_heads\"");
  config["num_attention_heads"] = 2;
  config["max_position_embeddings"] = 1.3e44;  // read as an integer: undefined behaviour
  EXPECT_EQ(testing::error_of([&] { models::make_causal_lm(config, "config.json", DType::f32); }),
            "llm: config.json: the number 1.3e+44 is out of range");
  config.erase("max_position_embeddings");
  // Found by fuzz/fuzz_config: a Qwen 3.5 config listed its 777777777777777773 layers' kinds
  // until memory ran out; every architecture refuses such a count by name.
  for (const char* type : {"llama", "qwen3_5_text", "lfm2"}) {
    nlohmann::json huge = config;
    huge["model_type"] = type;
    huge["num_hidden_layers"] = 777777777777777773;
    EXPECT_EQ(testing::error_of([&] { models::make_causal_lm(huge, "config.json", DType::f32); }),
              "llm: config.json: num_hidden_layers is 777777777777777773; prism takes at most "
              "10000");
  }
  config["rope_theta"] = "fast";
  const std::string error =
      testing::error_of([&] { models::make_causal_lm(config, "config.json", DType::f32); });
  EXPECT_EQ(error.rfind("llm: config.json: [json.exception.type_error", 0), 0u) << error;
}

}  // namespace
}  // namespace prism

namespace prism {
namespace {

// The same greedy continuation when the checkpoint is served over HTTPS or from S3.
std::vector<int32_t> greedy_from(const std::string& uri) {
  Reference ref = reference("tiny-f32");
  llm::Engine engine(uri, get_platform("cpu"), options(DType::f32));
  return greedy(engine, engine.feed(ref.prompt), ref.greedy.size());
}

TEST(Llama, RunsFromHttps) {
  if (!test::NginxServer::available()) GTEST_SKIP() << "nginx is not installed";
  test::NginxServer server(std::string(PRISM_TEST_DATA) + "/llama");
  test::ScopedEnv ca("CURL_CA_BUNDLE", test::NginxServer::ca_file());
  EXPECT_EQ(greedy_from(server.url() + "/tiny-f32"), reference("tiny-f32").greedy);
}

TEST(Llama, RunsFromS3) {
  if (!test::S3Server::available())
    GTEST_SKIP() << "the virtual environment is missing (scripts/setup.sh)";
  test::S3Server server("models");
  test::ScopedEnv env(server.client_env());
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    io::s3::put_object(std::string("s3://models/tiny-f32/") + f,
                       test::read_bytes(fixture("tiny-f32") + "/" + f));
  }
  EXPECT_EQ(greedy_from("s3://models/tiny-f32"), reference("tiny-f32").greedy);
}

}  // namespace
}  // namespace prism

namespace prism {
namespace {

// An engine owns its programs: they, and the working memory each holds, go with it. Engines
// given one compile cache share their programs, which live while the cache does.
TEST(Llama, AnEngineFreesItsProgramsAndSharesThemOnlyThroughACache) {
  const size_t before = ExecutableImpl::live();
  Reference ref = reference("tiny-f32");
  {
    llm::Engine engine(fixture("tiny-f32"), get_platform("cpu"), options(DType::f32));
    engine.feed(ref.prompt);
    engine.feed(std::vector<int32_t>{ref.greedy[0]});
    EXPECT_GE(ExecutableImpl::live(), before + 2);  // a prefill window and the decode step
  }
  EXPECT_EQ(ExecutableImpl::live(), before);

  llm::EngineOptions shared = options(DType::f32);
  shared.compile_cache = std::make_shared<CompileCache>();
  {
    llm::Engine first(fixture("tiny-f32"), get_platform("cpu"), shared);
    first.feed(ref.prompt);
    const size_t programs = ExecutableImpl::live();
    llm::Engine second(fixture("tiny-f32"), get_platform("cpu"), shared);
    EXPECT_EQ(greedy(second, second.feed(ref.prompt), 4),
              std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + 4));
    EXPECT_EQ(ExecutableImpl::live(), programs);  // nothing compiled again
  }
  EXPECT_EQ(ExecutableImpl::live(), before + shared.compile_cache->size());
  shared.compile_cache.reset();
  EXPECT_EQ(ExecutableImpl::live(), before);
}

// A fast start (EngineOptions::fast_start) answers as copying first: the first feed reads the
// weights where the file's mapping holds them, every later call the copy made after it (other
// memory), and what each call reads never depends on timing. The mapped bf16 weights are read
// as stored, the copies in the blocked layout the products read fastest (the tied embedding of
// 128256 rows here), so the first feed's bf16 logits may differ in their last bits. An engine
// dropped right after its first feed stops its copy instead of waiting for it.
TEST(Llama, FastStartAnswersAsCopyingFirst) {
  Reference ref = reference("tiny-bf16-tied");
  Platform& cpu = get_platform("cpu");
  for (DType dtype : {DType::bf16, DType::f32}) {  // mapped as stored; converted, so copied
    SCOPED_TRACE(name(dtype));
    const double tol = dtype == DType::bf16 ? 2e-2 : 0;
    llm::EngineOptions fast = options(dtype);
    fast.fast_start = true;
    llm::Engine first_copied(fixture("tiny-bf16-tied"), cpu, options(dtype));
    llm::Engine started(fixture("tiny-bf16-tied"), cpu, fast);
    const std::string name = "model.layers.0.mlp.down_proj.weight";
    const void* mapped = started.device_weights()[0].at(name).memory();
    std::vector<float> want = first_copied.feed(ref.prompt), got = started.feed(ref.prompt);
    EXPECT_LE(testing::max_diff(got, want), tol);
    EXPECT_EQ(started.device_weights()[0].at(name).memory(), mapped);  // the first feed's
    EXPECT_EQ(llm::Engine(fixture("tiny-bf16-tied"), cpu, fast).feed(ref.prompt), got);
    for (int i = 0; i < 6; ++i) {
      const int32_t next = testing::argmax(want);
      EXPECT_EQ(testing::argmax(got), next);
      want = first_copied.feed(std::vector<int32_t>{next});
      got = started.feed(std::vector<int32_t>{next});
      EXPECT_LE(testing::max_diff(got, want), tol);
    }
    // bf16 weights were used where the file holds them, then copied; f32 ones were converted
    // as they loaded, so there was nothing to copy.
    EXPECT_EQ(started.device_weights()[0].at(name).memory() != mapped, dtype == DType::bf16);
    EXPECT_GE(started.copy_wait_seconds(), 0.0);
  }
}

TEST(Llama, CachedDecodingEqualsRecomputation) {
  Reference ref = reference("tiny-f32");
  Platform& cpu = get_platform("cpu");
  llm::Engine cached(fixture("tiny-f32"), cpu, options(DType::f32));
  std::vector<int32_t> seq = ref.prompt;
  std::vector<float> logits = cached.feed(ref.prompt);
  for (int i = 0; i < 5; ++i) {  // five tokens through the cache
    seq.push_back(ref.greedy[i]);
    logits = cached.feed(std::vector<int32_t>{ref.greedy[i]});
  }
  llm::Engine fresh(fixture("tiny-f32"), cpu, options(DType::f32));
  std::vector<float> full = fresh.feed(seq);  // the whole sequence at once
  double worst = 0;
  for (size_t i = 0; i < full.size(); ++i)
    worst = std::max<double>(worst, std::abs(full[i] - logits[i]));
  EXPECT_LE(worst, 1e-4);
}

TEST(Llama, MultiTurnEqualsReprefillingTheConversation) {
  Platform& cpu = get_platform("cpu");
  std::vector<int32_t> turn1{128000, 791, 6864}, turn2{315, 9822, 374, 279};
  llm::Engine chat(fixture("tiny-f32"), cpu, options(DType::f32));
  std::vector<int32_t> answer1 = greedy(chat, chat.feed(turn1), 4);
  chat.feed(std::vector<int32_t>{answer1.back()});  // the last answer token enters the cache
  std::vector<int32_t> answer2 = greedy(chat, chat.feed(turn2), 6);

  std::vector<int32_t> all = turn1;
  all.insert(all.end(), answer1.begin(), answer1.end());
  all.insert(all.end(), turn2.begin(), turn2.end());
  llm::Engine again(fixture("tiny-f32"), cpu, options(DType::f32));
  EXPECT_EQ(greedy(again, again.feed(all), 6), answer2);
}

// A model directory holding tiny-f32's weights and the given config.json text.
struct ModelDir {
  test::TempDir dir;
  explicit ModelDir(const std::string& config) {
    std::filesystem::create_symlink(fixture("tiny-f32") + "/model.safetensors",
                                    dir.str("model.safetensors"));
    if (!config.empty()) test::write_bytes(dir.str("config.json"), config);
  }
};

std::string tiny_config(const std::string& key, const std::string& value) {
  std::ifstream in(fixture("tiny-f32") + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j[key] = nlohmann::json::parse(value);
  return j.dump();
}

TEST(Llama, BadCheckpointsGiveClearErrors) {
  Platform& cpu = get_platform("cpu");
  auto error = [&](const ModelDir& m) {
    return testing::error_of([&] { llm::Engine(m.dir.str(), cpu, options(DType::f32)); });
  };
  ModelDir missing("");
  EXPECT_NE(error(missing).find("config.json"), std::string::npos) << error(missing);
  ModelDir malformed("{\"model_type\": \"llama\", ");
  EXPECT_NE(error(malformed).find("config.json: not valid JSON"), std::string::npos)
      << error(malformed);
  ModelDir other(tiny_config("model_type", "\"mamba\""));
  EXPECT_NE(error(other).find("has model_type \"mamba\"; supported: llama"), std::string::npos)
      << error(other);
  ModelDir deeper(tiny_config("num_hidden_layers", "4"));  // layer 3 is not in the file
  EXPECT_NE(error(deeper).find("model.layers.3."), std::string::npos) << error(deeper);
  ModelDir wider(tiny_config("hidden_size", "32"));
  std::string e = error(wider);
  EXPECT_NE(e.find("tensor \"model.embed_tokens.weight\""), std::string::npos) << e;
  EXPECT_NE(e.find("F32[128256, 16] but the model expects f32{voc=128256,d=32}"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace prism
