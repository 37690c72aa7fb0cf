// Llama from GGUF files (prism/llm/gguf_model.h, prism/llm/tokenizer_gguf.cpp) and the
// loader's decoding of GGUF tensors (prism/io/store.h, load.h).
//
// tools/make_tiny_gguf.py writes the tiny Llama checkpoints of tests/data/llama/ as GGUF files
// into the build tree (PRISM_GGUF_DIR) with llama.cpp's names, Q/K row order, rope_freqs and
// the Llama 3.1 tokenizer: the F32 file must run as the safetensors checkpoint does, the Q8_0
// one as a checkpoint of its dequantized values, and the tokenizer must encode and render
// chat prompts as tokenizer.json does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/registry.h"
#include "prism/core/dtype.h"
#include "prism/io/load.h"
#include "prism/llm/chat_template.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/tokenizer.h"
#include "prism/models/llama.h"
#include "prism/quant/dequantize.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/test_servers.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::greedy;
using testing::max_diff;

std::string gguf(const std::string& name) { return std::string(PRISM_GGUF_DIR) + "/" + name; }
std::string llama(const std::string& name) {
  return std::string(PRISM_TEST_DATA) + "/llama/" + name;
}
llm::Tokenizer llama3_1_json() {
  return llm::Tokenizer::load(std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1");
}
const std::vector<int32_t> kPrompt{128000, 791, 6864, 315, 9822, 374};

llm::EngineOptions options(DType dtype, int devices = 1) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = dtype;
  o.load.report = false;
  if (devices > 1) o.mesh = Mesh({{"model", devices}});
  return o;
}

// ---------------------------------------------------------------------------------------------
// The loader on GGUF tensors.

// Every tensor of the dequantization fixture (tests/data/gguf/quant_types.gguf, each beside
// the gguf package's dequantization NAME.ref) loaded through io::load, in small chunks so that
// a tensor's rows are decoded by several workers: the values the package gives, in f32 and
// rounded to bf16.
TEST(GgufStore, LoadsEveryTypeDequantizedAsTheGgufPackage) {
  const std::string fixture = std::string(PRISM_TEST_DATA) + "/gguf/quant_types.gguf";
  auto file = io::open(fixture);
  const io::GgufHeader header = io::GgufHeader::read(*file);
  const io::Store store = io::Store::open(fixture);
  Platform& cpu = get_platform("cpu");
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<Executable::Parameter> params;
    for (const io::GgufTensor& t : header.tensors) {
      if (t.name.ends_with(".ref")) continue;
      params.push_back({t.name, store.shape(t.name).with_dtype(dtype)});
    }
    ASSERT_GE(params.size(), 11u);
    const io::Weights weights =
        io::load(store, params, cpu, {.parallelism = 3, .chunk_size = 512, .report = false});
    for (const Executable::Parameter& p : params) {
      SCOPED_TRACE(p.name + " as " + std::string(name(dtype)));
      std::vector<float> want = header.read_f32(*file, header.tensor(p.name + ".ref"));
      HostBuffer got = weights.at(p.name).to_host();
      ASSERT_EQ(got.shape().numel(), static_cast<int64_t>(want.size()));
      std::vector<std::byte> expected(want.size() * size_of(dtype));
      convert_elements(DType::f32, reinterpret_cast<const std::byte*>(want.data()), dtype,
                       expected.data(), static_cast<int64_t>(want.size()));
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size()), 0);
    }
  }
}

// A tensor given a row order loads its stored rows in that order, and is never used in place.
TEST(GgufStore, RowOrderPicksTheStoredRows) {
  const std::string fixture = std::string(PRISM_TEST_DATA) + "/gguf/quant_types.gguf";
  const io::Store file_store = io::Store::open(fixture);
  io::StoredTensor t = file_store.at("f32_3d");  // F32 [2, 3, 32]
  ASSERT_EQ(t.info.shape, (std::vector<int64_t>{2, 3, 32}));
  t.row_order = {1, 0};
  const io::Store store = io::Store::from_tensors("reordered", {{"w", t}});
  EXPECT_TRUE(store.mapped_bytes("w").empty());
  const io::Weights w = io::load(store, {{{"w", store.shape("w")}}}, get_platform("cpu"),
                                 {.report = false, .zero_copy = true});
  std::vector<float> want(2 * 96);
  file_store.read_tensor_bytes("f32_3d", std::as_writable_bytes(std::span(want)));
  std::rotate(want.begin(), want.begin() + 96, want.end());
  HostBuffer got = w.at("w").to_host();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
  EXPECT_EQ(testing::error_of([&] {
              t.row_order = {0};
              io::Store::from_tensors("reordered", {{"w", t}});
            }),
            "reordered: tensor 'w' has 2 rows but a row order of 1");
}

// ---------------------------------------------------------------------------------------------
// Llama from GGUF.

struct Pair {
  const char* gguf;        // in PRISM_GGUF_DIR
  std::string checkpoint;  // the same model as a Hugging Face checkpoint
  double logit_tol;
};

// The GGUF file runs as the checkpoint it came from: the same 24 greedy ids and first-step
// logits. The F32 file's weights are the checkpoint's; the BF16 one's too, with Llama 3.1's rope
// scaling as rope_freqs factors instead of config.json's parameters (its frequencies round
// differently in the last bit); the Q8_0 one's are the gguf package's dequantization of its
// blocks, which the -ref checkpoint holds in f32.
TEST(GgufLlama, RunsAsTheCheckpointItCameFrom) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  const Pair pairs[] = {
      {"tiny-f32.gguf", llama("tiny-f32"), 1e-5},
      {"tiny-bf16-tied.gguf", llama("tiny-bf16-tied"), 1e-5},
      {"tiny-bf16-tied-q8_0.gguf", gguf("tiny-bf16-tied-q8_0-ref"), 1e-4},
  };
  Platform& cpu = get_platform("cpu");
  for (const Pair& p : pairs) {
    SCOPED_TRACE(p.gguf);
    llm::Engine want_engine(p.checkpoint, cpu, options(DType::f32));
    llm::Engine got_engine(gguf(p.gguf), cpu, options(DType::f32));
    std::vector<float> want = want_engine.feed(kPrompt), got = got_engine.feed(kPrompt);
    EXPECT_LE(max_diff(got, want), p.logit_tol);
    EXPECT_EQ(greedy(got_engine, got, 24), greedy(want_engine, want, 24));
  }
}

// Q/K rows back in Hugging Face's order, blocks dequantized: the Q8_0 file's weights on the
// device are the reference checkpoint's, bit for bit, in f32 and in bf16.
TEST(GgufLlama, LoadsTheWeightsOfTheDequantizedCheckpoint) {
  Platform& cpu = get_platform("cpu");
  for (DType dtype : {DType::f32, DType::bf16}) {
    llm::EngineOptions dequantized = options(dtype);
    dequantized.keep_quantized = false;
    llm::Engine want(gguf("tiny-bf16-tied-q8_0-ref"), cpu, options(dtype));
    llm::Engine got(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, dequantized);
    const io::Weights& w = want.device_weights()[0];
    const io::Weights& g = got.device_weights()[0];
    ASSERT_EQ(w.size(), g.size());
    for (const auto& [name, buffer] : w) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(g.contains(name));
      HostBuffer a = buffer.to_host(), b = g.at(name).to_host();
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.shape().bytes()), 0);
    }
  }
}

// On the CPU the Q8_0 file's matrices stay in their blocks (u8 {rows, 34 bytes per 32}), rows
// in Hugging Face's order: dequantized, they are the weights loaded dequantized, bit for bit.
// The norms (F32 in the file) load as floats.
TEST(GgufLlama, KeepsTheBlocksOfQuantizedMatrices) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  Platform& cpu = get_platform("cpu");
  llm::EngineOptions dequantized = options(DType::f32);
  dequantized.keep_quantized = false;
  llm::Engine want(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, dequantized);
  llm::Engine got(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, options(DType::f32));
  const io::Weights& w = want.device_weights()[0];
  const io::Weights& g = got.device_weights()[0];
  ASSERT_EQ(w.size(), g.size());
  int blocks = 0;
  for (const auto& [name, buffer] : w) {
    SCOPED_TRACE(name);
    HostBuffer a = buffer.to_host(), b = g.at(name).to_host();
    if (a.shape().rank() < 2) {
      EXPECT_EQ(a.shape(), b.shape());
      continue;
    }
    ++blocks;
    const int64_t rows = a.shape().size(0), k = a.shape().size(1);
    ASSERT_EQ(b.shape(),
              Shape(DType::u8, {{a.shape().tag(0), rows}, {a.shape().tag(1), k / 32 * 34}}));
    std::vector<float> values(rows * k);
    quant::dequantize(quant::GgmlType::Q8_0, b.bytes(), values);
    EXPECT_EQ(std::memcmp(values.data(), a.data(), a.shape().bytes()), 0);
  }
  EXPECT_EQ(blocks, 15);  // the embedding and 7 matrices in each of 2 layers
  std::vector<float> logits = got.feed(kPrompt), reference = want.feed(kPrompt);
  EXPECT_LE(max_diff(logits, reference), 1e-4);
  EXPECT_EQ(greedy(got, logits, 24), greedy(want, reference, 24));
}

// With the activations rounded to 8 bits (llama.cpp's arithmetic, the CPU's default where it
// has the integer kernels), the Q8_0 file's first-step logits stay near the float products':
// the tiny model's width of 32 leaves the rounding little to average out over (measured
// 0.044 on logits of at most 1.4; a bound a few times that).
TEST(GgufLlama, EightBitActivationsStayNearTheFloatProducts) {
  if (!cpu::quant_rows_int8_native(quant::GgmlType::Q8_0)) {
    GTEST_SKIP() << "no integer kernels on this CPU (AVX-512 VNNI)";
  }
  Platform& cpu = get_platform("cpu");
  auto logits = [&](const char* mode) {
    const testing::QuantActivations activations(mode);
    llm::Engine engine(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, options(DType::f32));
    return engine.feed(kPrompt);
  };
  const std::vector<float> f32 = logits("f32"), int8 = logits("int8");
  const double diff = max_diff(int8, f32);
  std::printf("Q8_0 with 8-bit activations: max |logit diff| %.3g\n", diff);
  EXPECT_GT(diff, 0) << "the activations were not rounded";
  EXPECT_LT(diff, 0.15);
}

// Split across two CPU devices, each loading only its rows of each split weight (decoded
// chunk by chunk), the Q8_0 file gives what one device gives.
TEST(GgufLlama, SplitAcrossDevicesAsOnOne) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  testing::CpuDevices devices(2);
  Platform& cpu = get_platform("cpu");
  llm::Engine one(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, options(DType::f32));
  llm::Engine two(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, options(DType::f32, 2));
  ASSERT_EQ(two.devices().size(), 2u);
  std::vector<float> want = one.feed(kPrompt), got = two.feed(kPrompt);
  EXPECT_LE(max_diff(got, want), 1e-4);
  EXPECT_EQ(greedy(two, got, 16), greedy(one, want, 16));
}

// Over HTTPS, through the VFS, as from a local file: the model, and the tokenizer too.
TEST(GgufLlama, RunsFromHttps) {
  if (!test::NginxServer::available()) GTEST_SKIP() << "nginx is not installed";
  test::NginxServer server(PRISM_GGUF_DIR);
  test::ScopedEnv ca("CURL_CA_BUNDLE", test::NginxServer::ca_file());
  Platform& cpu = get_platform("cpu");
  llm::Engine local(gguf("tiny-bf16-tied-q8_0.gguf"), cpu, options(DType::f32));
  llm::Engine remote(server.url() + "/tiny-bf16-tied-q8_0.gguf", cpu, options(DType::f32));
  std::vector<float> want = local.feed(kPrompt), got = remote.feed(kPrompt);
  EXPECT_EQ(max_diff(got, want), 0);
  EXPECT_EQ(greedy(remote, got, 8), greedy(local, want, 8));
  EXPECT_EQ(llm::Tokenizer::load(server.url() + "/tiny-f32.gguf").encode("Hello, world"),
            llama3_1_json().encode("Hello, world"));
}

TEST(GgufLlama, ModelInfoFromTheMetadata) {
  llm::GgufModel m = llm::open_gguf_model(gguf("tiny-bf16-tied-q8_0.gguf"), DType::f32);
  const models::ModelInfo& info = m.model->info();
  EXPECT_EQ(info.model_type, "llama");
  EXPECT_EQ(info.vocab_size, 128256);
  EXPECT_EQ(info.max_positions, 131072);
  EXPECT_EQ(info.eos_token_ids, std::vector<int64_t>{128009});
  EXPECT_EQ(info.bos_token_id, 128000);
  const auto& config = dynamic_cast<const models::Llama&>(*m.model).config();
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_EQ(config.head_dim, 8);
  EXPECT_EQ(config.rope_freq_factors.size(), 4u);
  // Row 1 of Hugging Face's first query head (i = 1 of the first half) is stored as row 2.
  const io::StoredTensor& q = m.store.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.info.name, "blk.0.attn_q.weight");
  EXPECT_EQ(q.type_name(), "Q8_0");
  EXPECT_EQ(std::vector<int64_t>(q.row_order.begin(), q.row_order.begin() + 8),
            (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_FALSE(m.store.contains("lm_head.weight"));
}

TEST(GgufLlama, BadFilesGiveOneClearError) {
  const std::string small_llama =
      "a llama of 1 blocks, width 32, 2/1 heads of 16, MLP 64, vocabulary 64";
  EXPECT_EQ(testing::error_of([] { llm::open_gguf_model(gguf("bad-arch.gguf"), DType::f32); }),
            "llm: " + gguf("bad-arch.gguf") +
                ": general.architecture \"mamba\" is not supported in GGUF files (supported: "
                "llama, lfm2, qwen35)");
  EXPECT_EQ(testing::error_of([] { llm::open_gguf_model(gguf("bad-missing.gguf"), DType::f32); }),
            "llm: " + gguf("bad-missing.gguf") + ": no tensor 'blk.0.ffn_up.weight', which " +
                small_llama + " needs");
  EXPECT_EQ(testing::error_of([] { llm::open_gguf_model(gguf("bad-shape.gguf"), DType::f32); }),
            "llm: " + gguf("bad-shape.gguf") +
                ": tensor 'blk.0.attn_k.weight' is F32[32, 32] but " + small_llama +
                " needs [16, 32]");
  // Through the engine, as `prism llm` opens it.
  EXPECT_EQ(testing::error_of([] {
              llm::Engine(gguf("bad-missing.gguf"), get_platform("cpu"), options(DType::f32));
            }),
            "llm: " + gguf("bad-missing.gguf") + ": no tensor 'blk.0.ffn_up.weight', which " +
                small_llama + " needs");
  // An unknown tokenizer does not keep the model from running on ids.
  llm::Engine engine(gguf("bad-tokenizer.gguf"), get_platform("cpu"), options(DType::f32));
  EXPECT_EQ(engine.feed(std::vector<int32_t>{1, 2, 3}).size(), 64u);
}

// ---------------------------------------------------------------------------------------------
// The tokenizer from GGUF metadata.

TEST(GgufTokenizer, EncodesAndDecodesAsTokenizerJson) {
  const llm::Tokenizer want = llama3_1_json();
  const llm::Tokenizer got = llm::Tokenizer::load(gguf("tiny-f32.gguf"));
  EXPECT_EQ(got.vocab_size(), want.vocab_size());
  const std::vector<std::string> texts = {
      "The capital of France is",
      "Hello, world! It's 2024: 3.14159 + 1234567 = ?",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
      "naïve café, Ünïcödé, 日本語のテキスト, "
      "Ελληνικά, русский, emoji 😀👍🏽 and 🇫🇷",
      "  leading and trailing spaces  \n\n\ttabs\r\nand CRLF   ",
      "code: for (int i = 0; i < 10; ++i) { x += y[i]; }  // don't",
      "I'M SHOUTING, we'll see, they'd've",
      "",
      "<|reserved_special_token_5|>text<|eom_id|> <|end_of_text|>",
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = want.encode(text, {.add_special_tokens = special});
      EXPECT_EQ(got.encode(text, {.add_special_tokens = special}), ids);
      for (bool skip : {false, true}) {
        EXPECT_EQ(got.decode(ids, {.skip_special_tokens = skip}),
                  want.decode(ids, {.skip_special_tokens = skip}));
      }
    }
  }
  for (int32_t id : {0, 1, 220, 128000, 128009, 128255}) {
    EXPECT_EQ(got.id_to_token(id), want.id_to_token(id));
    EXPECT_EQ(got.is_special(id), want.is_special(id));
  }
}

TEST(GgufTokenizer, RendersTheChatPromptAsTokenizerConfig) {
  const llm::Tokenizer want_tok = llama3_1_json();
  const llm::Tokenizer got_tok = llm::Tokenizer::load(gguf("tiny-bf16-tied-q8_0.gguf"));
  const auto want = llm::ChatTemplate::from_tokenizer(want_tok);
  const auto got = llm::ChatTemplate::from_tokenizer(got_tok);
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Japan? 日本"}])");
  for (bool generation : {false, true}) {
    const std::string prompt = want.apply(messages, {.add_generation_prompt = generation});
    EXPECT_EQ(got.apply(messages, {.add_generation_prompt = generation}), prompt);
    EXPECT_EQ(got_tok.encode(prompt), want_tok.encode(prompt));
  }
}

TEST(GgufTokenizer, RefusesUnknownModelsAndPreTokenizers) {
  EXPECT_EQ(testing::error_of([] { llm::Tokenizer::load(gguf("bad-tokenizer.gguf")); }),
            gguf("bad-tokenizer.gguf") +
                ": tokenizer.ggml.model \"bert\" is not supported (gpt2, byte-level BPE, and "
                "llama, SentencePiece BPE, are)");
  EXPECT_EQ(testing::error_of([] { llm::Tokenizer::load(gguf("bad-pre.gguf")); }),
            gguf("bad-pre.gguf") +
                ": tokenizer.ggml.pre \"mystery-bpe\" is not supported (llama-bpe, lfm2, "
                "qwen2, qwen35 are)");
  // The small llama's own tokenizer (64 tokens, no merges) loads.
  EXPECT_EQ(llm::Tokenizer::load(gguf("small.gguf")).vocab_size(), 64u);
}

}  // namespace
}  // namespace prism
