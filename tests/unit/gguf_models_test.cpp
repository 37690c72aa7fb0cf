// LFM 2 and Qwen 3.5 from GGUF files (prism/llm/gguf_model.h), their tokenizers
// (prism/llm/tokenizer_gguf.cpp), and the loader's undoing of what llama.cpp's converter does to
// their tensors (io::StoredTensor's column_order and stored_as).
//
// tools/make_tiny_gguf.py writes tests/data/lfm2/tiny-bf16-tied and tests/data/qwen3_5/
// tiny-bf16-tied as llama.cpp's converter does (the same keys and tensors, bit for bit), into the
// build tree (PRISM_GGUF_DIR): each must run as the checkpoint it came from, with the weights of
// the checkpoint, and its tokenizer must encode as the tokenizer.json it came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "prism/backends/registry.h"
#include "prism/io/gguf_writer.h"
#include "prism/io/load.h"
#include "prism/llm/chat_template.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"
#include "prism/models/lfm2.h"
#include "prism/models/qwen3_5.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/platforms.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::greedy;
using testing::max_diff;

std::string gguf(const std::string& name) { return std::string(PRISM_GGUF_DIR) + "/" + name; }
std::string data(const std::string& name) { return std::string(PRISM_TEST_DATA) + "/" + name; }

llm::EngineOptions options(DType dtype, int devices = 1) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = dtype;
  o.load.report = false;
  if (devices > 1) o.mesh = Mesh({{"model", devices}});
  return o;
}

struct Pair {
  const char* gguf;        // in PRISM_GGUF_DIR
  std::string checkpoint;  // the Hugging Face checkpoint it was converted from
  // The checkpoint's name for the GGUF model's tensor (Qwen 3.5's language model is under
  // model.language_model. in its multimodal checkpoint).
  std::string (*checkpoint_name)(const std::string&);
};

std::string same_name(const std::string& name) { return name; }
std::string qwen3_5_checkpoint_name(const std::string& name) {
  return name.starts_with("model.") ? "model.language_model." + name.substr(6) : name;
}

const Pair kPairs[] = {
    {"lfm2-tiny-bf16-tied.gguf", data("lfm2/tiny-bf16-tied"), same_name},
    {"qwen3_5-tiny-bf16-tied.gguf", data("qwen3_5/tiny-bf16-tied"), qwen3_5_checkpoint_name},
};

std::vector<int32_t> prompt_of(const Pair& p) {
  return testing::read_llm_reference(p.checkpoint + "/reference.json").prompt;
}

// ---------------------------------------------------------------------------------------------
// The loader's decoding.

// Blocks a parameter keeps as the file stores them are its bytes: used in place from the
// mapped file where the load allows it (the fast start), else copied as bytes in one pass; the
// same tensor as f32, or its blocks with rows in another order, is decoded and never mapped.
TEST(GgufStore, BlocksKeptAsStoredAreMappedOrCopiedAsBytes) {
  const std::string fixture = data("gguf/quant_types.gguf");
  const io::Store store = io::Store::open(fixture);
  const io::StoredTensor t = store.at("q4_0");  // Q4_0 [10, 64]
  std::vector<std::byte> stored(t.bytes);
  t.file->read_at(t.offset, stored);
  ASSERT_EQ(store.mapped_bytes("q4_0").size(), t.bytes);
  const Shape blocks(DType::u8, {{"r", 10}, {"c", 64 / 32 * 18}});
  for (bool zero_copy : {true, false}) {
    SCOPED_TRACE(zero_copy);
    io::LoadStats stats;
    const io::Weights w =
        io::load(store, {{{"q4_0", blocks}}}, get_platform("cpu"),
                 {.chunk_size = 64, .report = false, .zero_copy = zero_copy}, &stats);
    EXPECT_EQ(stats.zero_copy, zero_copy ? 1u : 0u);
    const HostBuffer got = w.at("q4_0").to_host();
    EXPECT_TRUE(std::equal(stored.begin(), stored.end(), got.data()));
  }
  io::LoadStats stats;
  io::load(store, {{{"q4_0", store.shape("q4_0")}}}, get_platform("cpu"),
           {.report = false, .zero_copy = true}, &stats);
  EXPECT_EQ(stats.zero_copy, 0u);
  io::StoredTensor reordered = t;
  for (int64_t r = 9; r >= 0; --r) reordered.row_order.push_back(r);
  const io::Store other = io::Store::from_tensors("reordered", {{"w", reordered}});
  EXPECT_TRUE(other.mapped_bytes("w").empty());
  const io::Weights w = io::load(other, {{{"w", blocks}}}, get_platform("cpu"),
                                 {.report = false, .zero_copy = true}, &stats);
  EXPECT_EQ(stats.zero_copy, 0u);
  const HostBuffer got = w.at("w").to_host();
  for (int64_t r = 0; r < 10; ++r) {
    EXPECT_TRUE(std::equal(stored.begin() + (9 - r) * 36, stored.begin() + (10 - r) * 36,
                           got.data() + r * 36));
  }
}

// A column order picks each row's stored elements, and a value stored as w + 1 loads as w: of
// a Q4_0 tensor, its dequantized values (the .ref beside it) with each row reversed, minus one.
// Its blocks then hold other columns than the model's, which a model cannot keep as they are.
TEST(GgufStore, ColumnOrderAndStoredValuesAreUndone) {
  const std::string fixture = data("gguf/quant_types.gguf");
  auto file = io::open(fixture);
  const io::GgufHeader header = io::GgufHeader::read(*file);
  const io::Store file_store = io::Store::open(fixture);
  io::StoredTensor t = file_store.at("q4_0");  // Q4_0 [10, 64]
  ASSERT_EQ(t.info.shape, (std::vector<int64_t>{10, 64}));
  for (int64_t c = 63; c >= 0; --c) t.column_order.push_back(c);
  t.stored_as = io::StoredTensor::Stored::plus_one;
  const io::Store store = io::Store::from_tensors("rearranged", {{"w", t}});
  EXPECT_TRUE(store.mapped_bytes("w").empty());
  const io::Weights w =
      io::load(store, {{{"w", store.shape("w")}}}, get_platform("cpu"), {.report = false});
  const std::vector<float> ref = header.read_f32(*file, header.tensor("q4_0.ref"));
  HostBuffer got = w.at("w").to_host();
  const float* values = reinterpret_cast<const float*>(got.data());
  for (int64_t r = 0; r < 10; ++r) {
    for (int64_t c = 0; c < 64; ++c) {
      ASSERT_EQ(values[r * 64 + c], ref[r * 64 + 63 - c] - 1.0f) << r << ", " << c;
    }
  }
  const Shape blocks(DType::u8, {{"r", 10}, {"c", 64 / 32 * 18}});
  EXPECT_EQ(testing::error_of([&] {
              io::load(store, {{{"w", blocks}}}, get_platform("cpu"), {.report = false});
            }),
            "load: tensor \"w\" in rearranged is Q4_0 blocks of other columns or values than the "
            "model's, which cannot be kept as they are");
  EXPECT_EQ(testing::error_of([&] {
              t.column_order = {0, 1};
              io::Store::from_tensors("rearranged", {{"w", t}});
            }),
            "rearranged: tensor 'w' has rows of 64 but a column order of 2");
}

// ---------------------------------------------------------------------------------------------
// The models.

// Each GGUF file runs as the checkpoint it came from: the same 24 greedy ids and first-step
// logits, in f32 and in bf16 (the same bf16 weights; A_log, which comes back through a
// logarithm, may differ in its last bit, which bf16's roundings could magnify). Both are equal
// bit for bit on this machine.
TEST(GgufModels, RunAsTheCheckpointTheyCameFrom) {
  Platform& cpu = get_platform("cpu");
  for (const Pair& p : kPairs) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(p.gguf) + " in " + std::string(name(dtype)));
      llm::Engine want_engine(p.checkpoint, cpu, options(dtype));
      llm::Engine got_engine(gguf(p.gguf), cpu, options(dtype));
      const std::vector<int32_t> prompt = prompt_of(p);
      std::vector<float> want = want_engine.feed(prompt), got = got_engine.feed(prompt);
      EXPECT_LE(max_diff(got, want), dtype == DType::f32 ? 1e-5 : 1e-2);
      EXPECT_EQ(greedy(got_engine, got, 24), greedy(want_engine, want, 24));
    }
  }
}

// The weights on the device are the checkpoint's, bit for bit in f32: llama.cpp's names, row
// and column orders, squeezed kernels and norms stored as 1 + w all undone. Qwen 3.5's A_log,
// stored as -exp(A_log), comes back through a logarithm, within a few ulps.
TEST(GgufModels, LoadTheWeightsOfTheCheckpoint) {
  Platform& cpu = get_platform("cpu");
  for (const Pair& p : kPairs) {
    SCOPED_TRACE(p.gguf);
    llm::Engine want(p.checkpoint, cpu, options(DType::f32));
    llm::Engine got(gguf(p.gguf), cpu, options(DType::f32));
    const io::Weights& w = want.device_weights()[0];
    const io::Weights& g = got.device_weights()[0];
    ASSERT_EQ(w.size(), g.size());
    int logarithms = 0;
    for (const auto& [name, buffer] : g) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(w.contains(p.checkpoint_name(name)));
      HostBuffer a = w.at(p.checkpoint_name(name)).to_host(), b = buffer.to_host();
      ASSERT_EQ(a.shape(), b.shape());
      if (!name.ends_with("A_log")) {
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.shape().bytes()), 0);
        continue;
      }
      ++logarithms;
      const float* x = reinterpret_cast<const float*>(a.data());
      const float* y = reinterpret_cast<const float*>(b.data());
      for (int64_t i = 0; i < a.shape().numel(); ++i) {
        EXPECT_NEAR(y[i], x[i], 4e-7 * std::max(1.0f, std::abs(x[i])));
      }
    }
    EXPECT_EQ(logarithms, std::string(p.gguf).starts_with("qwen") ? 2 : 0);
  }
}

// Split across two CPU devices (the value heads, A_log and dt_bias among what is split, each
// decoded and cut), as on one.
TEST(GgufModels, SplitAcrossDevicesAsOnOne) {
  testing::CpuDevices devices(2);
  Platform& cpu = get_platform("cpu");
  for (const Pair& p : kPairs) {
    SCOPED_TRACE(p.gguf);
    llm::Engine one(gguf(p.gguf), cpu, options(DType::f32));
    llm::Engine two(gguf(p.gguf), cpu, options(DType::f32, 2));
    ASSERT_EQ(two.devices().size(), 2u);
    const std::vector<int32_t> prompt = prompt_of(p);
    std::vector<float> want = one.feed(prompt), got = two.feed(prompt);
    EXPECT_LE(max_diff(got, want), 1e-5);
    EXPECT_EQ(greedy(two, got, 16), greedy(one, want, 16));
  }
}

// A quantized Qwen 3.5 runs as its dequantized values do. On the CPU its Q8_0 matrices stay in
// their blocks, but for ssm_out, whose columns the file holds in llama.cpp's order of the value
// heads: it loads dequantized, its columns put back.
TEST(GgufModels, QuantizedQwen3_5KeepsTheBlocksOfMatricesInOrder) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  Platform& cpu = get_platform("cpu");
  llm::Engine want(gguf("qwen35-small-q8_0-ref.gguf"), cpu, options(DType::f32));
  llm::Engine got(gguf("qwen35-small-q8_0.gguf"), cpu, options(DType::f32));
  const io::Weights& w = got.device_weights()[0];
  EXPECT_EQ(w.at("model.layers.0.mlp.down_proj.weight").shape().dtype(), DType::u8);
  EXPECT_EQ(w.at("model.layers.1.self_attn.o_proj.weight").shape().dtype(), DType::u8);
  EXPECT_EQ(w.at("model.layers.0.linear_attn.out_proj.weight").shape().dtype(), DType::f32);
  const std::vector<int32_t> prompt{1, 2, 3, 10, 20, 30, 40};
  std::vector<float> logits = got.feed(prompt), reference = want.feed(prompt);
  EXPECT_LE(max_diff(logits, reference), 1e-4);
  EXPECT_EQ(greedy(got, logits, 24), greedy(want, reference, 24));
}

// Wherever the platform runs the dequantize op itself (the CPU's kernels; OpenCL and CUDA
// through the kernel IR, products of a few rows reading the blocks), quantized matrices stay in
// their blocks on the device, and the models answer as the same weights dequantized at load do:
// GGUF files' Q8_0 and Q4_0 quantized at load, in prefill and decoding (backend_ops_test.cpp
// checks every block format's op). PJRT platforms dequantize at load unless told to keep the
// blocks (--keep-quantized=yes), and then run the op's decomposition, with the same answers.
TEST(GgufModels, QuantizedMatricesStayInTheirBlocksOnEachPlatform) {
  const testing::QuantActivations f32_activations("f32");  // the float reference's arithmetic
  testing::check_expected_platforms();
  struct Model {
    std::string uri;
    std::optional<quant::GgmlType> quantize;
  };
  const Model models[] = {
      {gguf("tiny-bf16-tied-q8_0.gguf"), std::nullopt},
      {gguf("qwen35-small-q8_0.gguf"), std::nullopt},
      {data("lfm2/tiny-bf16-tied"), quant::GgmlType::Q4_0},
  };
  Platform& cpu = get_platform("cpu");
  auto kept = [](const llm::Engine& e) {
    int n = 0;
    for (const auto& [name, buffer] : e.device_weights()[0])
      n += buffer.shape().dtype() == DType::u8;
    return n;
  };
  for (const PlatformStatus& s : platform_statuses()) {
    if (!s.available) continue;
    const bool pjrt = testing::is_pjrt(s.name);
    for (const Model& m : models) {
      SCOPED_TRACE(s.name + " " + m.uri);
      llm::EngineOptions o = options(DType::f32);
      o.quantize = m.quantize;
      llm::EngineOptions dequantized = o;
      dequantized.keep_quantized = false;
      if (pjrt) {
        EXPECT_EQ(kept(llm::Engine(m.uri, get_platform(s.name), o)), 0);
        o.keep_quantized = true;
      }
      llm::Engine want(m.uri, cpu, dequantized);
      llm::Engine got(m.uri, get_platform(s.name), o);
      EXPECT_GE(kept(got), 4);
      const std::vector<int32_t> prompt{1, 2, 3, 10, 20, 30, 40};
      std::vector<float> logits = got.feed(prompt), reference = want.feed(prompt);
      EXPECT_LE(max_diff(logits, reference), 1e-4);
      EXPECT_EQ(greedy(got, logits, 12), greedy(want, reference, 12));
    }
  }
}

TEST(GgufModels, Lfm2ConfigFromTheMetadata) {
  llm::GgufModel m = llm::open_gguf_model(gguf("lfm2-tiny-bf16-tied.gguf"), DType::f32);
  const models::ModelInfo& info = m.model->info();
  EXPECT_EQ(info.model_type, "lfm2");
  EXPECT_EQ(info.vocab_size, 65536);
  EXPECT_EQ(info.max_positions, 128000);
  EXPECT_EQ(info.eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(info.bos_token_id, 1);
  const auto& c = dynamic_cast<const models::Lfm2&>(*m.model).config();
  using Layer = models::Lfm2Config::Layer;
  EXPECT_EQ(c.layers, (std::vector<Layer>{Layer::conv, Layer::conv, Layer::attention, Layer::conv,
                                          Layer::attention, Layer::conv}));
  EXPECT_EQ(c.intermediate_size, 72);  // block_ff_dim 96, adjusted
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.conv_kernel, 3);
  EXPECT_FALSE(c.conv_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 1e6);
  const io::StoredTensor& conv = m.store.at("model.layers.0.conv.conv.weight");
  EXPECT_EQ(conv.info.name, "blk.0.shortconv.conv.weight");
  EXPECT_EQ(conv.info.shape, (std::vector<int64_t>{32, 1, 3}));  // [32, 3] in the file
  EXPECT_FALSE(conv.decoded());
  EXPECT_EQ(m.store.at("model.embedding_norm.weight").info.name, "token_embd_norm.weight");
}

TEST(GgufModels, Qwen3_5ConfigFromTheMetadata) {
  llm::GgufModel m = llm::open_gguf_model(gguf("qwen3_5-tiny-bf16-tied.gguf"), DType::f32);
  const models::ModelInfo& info = m.model->info();
  EXPECT_EQ(info.model_type, "qwen3_5");
  EXPECT_EQ(info.vocab_size, 151936);
  EXPECT_EQ(info.max_positions, 262144);
  EXPECT_EQ(info.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(info.bos_token_id, std::nullopt);
  const auto& c = dynamic_cast<const models::Qwen3_5&>(*m.model).config();
  using Layer = models::Qwen3_5Config::Layer;
  // block_count 5 counts the multi-token prediction layer, which is left out.
  EXPECT_EQ(c.layers, (std::vector<Layer>{Layer::linear_attention, Layer::full_attention,
                                          Layer::linear_attention, Layer::full_attention}));
  EXPECT_FALSE(m.store.contains("model.layers.4.input_layernorm.weight"));
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.linear_key_heads, 2);
  EXPECT_EQ(c.linear_value_heads, 4);
  EXPECT_EQ(c.linear_key_dim, 8);
  EXPECT_EQ(c.linear_value_dim, 8);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_TRUE(c.tie_word_embeddings);
  // Hugging Face's value head 1 (the second of key head 0) is stored as head 2 (after the
  // first value head of each key head): its rows 8..15 of in_proj_z are stored rows 16..23,
  // of in_proj_qkv after the 32 rows of q and k.
  const io::StoredTensor& z = m.store.at("model.layers.0.linear_attn.in_proj_z.weight");
  EXPECT_EQ(z.info.name, "blk.0.attn_gate.weight");
  EXPECT_EQ(z.stored_row(8), 16);
  EXPECT_EQ(z.stored_row(16), 8);
  const io::StoredTensor& qkv = m.store.at("model.layers.0.linear_attn.in_proj_qkv.weight");
  EXPECT_EQ(qkv.stored_row(31), 31);
  EXPECT_EQ(qkv.stored_row(32 + 8), 32 + 16);
  const io::StoredTensor& out = m.store.at("model.layers.0.linear_attn.out_proj.weight");
  EXPECT_EQ(out.info.name, "blk.0.ssm_out.weight");
  EXPECT_EQ(out.column_order.at(8), 16);
  const io::StoredTensor& a = m.store.at("model.layers.0.linear_attn.A_log");
  EXPECT_EQ(a.info.name, "blk.0.ssm_a");
  EXPECT_EQ(a.column_order, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(a.stored_as, io::StoredTensor::Stored::negated_exp);
  EXPECT_EQ(m.store.at("model.norm.weight").stored_as, io::StoredTensor::Stored::plus_one);
  EXPECT_EQ(m.store.at("model.layers.0.linear_attn.norm.weight").stored_as,
            io::StoredTensor::Stored::as_is);
  EXPECT_EQ(m.store.at("model.layers.0.linear_attn.conv1d.weight").info.shape,
            (std::vector<int64_t>{64, 1, 4}));
}

TEST(GgufModels, BadFilesGiveOneClearError) {
  auto error = [](const std::string& file) {
    return testing::error_of([&] { llm::open_gguf_model(gguf(file), DType::f32); });
  };
  const std::string lfm2 =
      "an lfm2 of 6 blocks (2 attention), width 32, 4/2 heads of 8, MLP 72, vocabulary 64";
  EXPECT_EQ(error("bad-lfm2-missing.gguf"), "llm: " + gguf("bad-lfm2-missing.gguf") +
                                                ": no tensor 'blk.1.shortconv.conv.weight', "
                                                "which " +
                                                lfm2 + " needs");
  EXPECT_EQ(error("bad-lfm2-shape.gguf"), "llm: " + gguf("bad-lfm2-shape.gguf") +
                                              ": tensor 'blk.2.attn_k.weight' is BF16[32, 32] "
                                              "but " +
                                              lfm2 + " needs [16, 32]");
  EXPECT_EQ(error("bad-lfm2-metadata.gguf"),
            gguf("bad-lfm2-metadata.gguf") + ": no metadata key 'lfm2.shortconv.l_cache'");
  EXPECT_EQ(error("bad-qwen35-missing.gguf"),
            "llm: " + gguf("bad-qwen35-missing.gguf") +
                ": no tensor 'blk.0.ssm_a', which a qwen35 of 4 blocks, width 16, 4/2 heads of "
                "32, 2/4 linear heads of 8/8, MLP 32, vocabulary 64 needs");
  EXPECT_EQ(error("bad-qwen35-metadata.gguf"),
            gguf("bad-qwen35-metadata.gguf") + ": no metadata key 'qwen35.ssm.inner_size'");
  EXPECT_EQ(error("bad-arch.gguf"), "llm: " + gguf("bad-arch.gguf") +
                                        ": general.architecture \"mamba\" is not supported in "
                                        "GGUF files (supported: llama, lfm2, qwen35)");
}

// ---------------------------------------------------------------------------------------------
// Their tokenizers.

struct TokenizerPair {
  const char* gguf;
  std::string tokenizer;  // the directory of the tokenizer.json it was converted from
};

const TokenizerPair kTokenizers[] = {
    {"lfm2-tiny-bf16-tied.gguf", data("lfm2/tokenizer")},
    {"qwen3_5-tiny-bf16-tied.gguf", std::string(PRISM_TOKENIZERS_DIR) + "/qwen3"},
};

const std::vector<std::string> kTexts = {
    "The capital of France is Paris.",
    "Hello, world! It's 2024: 3.14159 + 1234567 = ?",
    "naïve café, Ünïcödé, 日本語のテキスト, Ελληνικά, русский",
    // Decomposed: e and a combining acute accent, which Qwen's tokenizer composes (NFC).
    "cafe\u0301 and re\u0301sume\u0301",
    "emoji 😀👍🏽 and 🇫🇷, नमस्ते, ภาษาไทย ที่นี่",
    "  leading and trailing spaces  \n\n\ttabs\r\nand CRLF   ",
    "I'M SHOUTING, we'll see, they'd've 1000000",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "",
};

// The tokenizer of each file encodes as the tokenizer.json it came from (with and without the
// special tokens the post-processor adds), and decodes the ids back as it does.
TEST(GgufModelTokenizers, EncodeAsTokenizerJson) {
  for (const TokenizerPair& p : kTokenizers) {
    SCOPED_TRACE(p.gguf);
    const llm::Tokenizer want = llm::Tokenizer::load(p.tokenizer);
    const llm::Tokenizer got = llm::Tokenizer::load(gguf(p.gguf));
    for (const std::string& text : kTexts) {
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
  }
}

// Chat prompts render as tokenizer_config.json's template renders them, and encode alike.
TEST(GgufModelTokenizers, RenderTheChatPromptAsTokenizerConfig) {
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Japan? 日本 🗾"}])");
  for (const TokenizerPair& p : kTokenizers) {
    SCOPED_TRACE(p.gguf);
    const llm::Tokenizer want_tok = llm::Tokenizer::load(p.tokenizer);
    const llm::Tokenizer got_tok = llm::Tokenizer::load(gguf(p.gguf));
    const auto want = llm::ChatTemplate::from_tokenizer(want_tok);
    const auto got = llm::ChatTemplate::from_tokenizer(got_tok);
    for (bool generation : {false, true}) {
      const std::string prompt = want.apply(messages, {.add_generation_prompt = generation});
      EXPECT_EQ(got.apply(messages, {.add_generation_prompt = generation}), prompt);
      EXPECT_EQ(got_tok.encode(prompt), want_tok.encode(prompt));
    }
  }
}

// Qwen 3.5's pre-tokenizer ("qwen35") is Qwen 2's with combining marks kept in words: the
// Qwen 3 vocabulary under that name encodes as its tokenizer.json does with Qwen 3.5's split
// pattern, which Thai's vowel and tone marks tell from Qwen 2's.
TEST(GgufModelTokenizers, Qwen35PreTokenizerKeepsCombiningMarks) {
  const std::string source = gguf("qwen3_5-tiny-bf16-tied.gguf");
  const io::GgufHeader h = io::GgufHeader::read(*io::open(source));
  io::GgufWriter w;
  w.set_string("general.architecture", "qwen35");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen35");
  std::vector<std::string> tokens, merges;
  for (std::string_view t : h.get_array("tokenizer.ggml.tokens").strings()) tokens.emplace_back(t);
  for (std::string_view m : h.get_array("tokenizer.ggml.merges").strings()) merges.emplace_back(m);
  std::vector<int32_t> types;
  for (int64_t t : h.get_array("tokenizer.ggml.token_type").ints()) types.push_back(t);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  test::TempDir dir;
  w.write(dir.str("qwen35.gguf"), [](size_t, const io::GgufWriter::Sink&) {});

  const std::string json_path = std::string(PRISM_TOKENIZERS_DIR) + "/qwen3/tokenizer.json";
  nlohmann::json doc = nlohmann::json::parse(llm::read_text_file(json_path));
  nlohmann::json& split = doc["pre_tokenizer"]["pretokenizers"][0];
  ASSERT_EQ(split["type"], "Split");
  split["pattern"]["Regex"] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
      "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const llm::Tokenizer want = llm::Tokenizer::from_documents(doc, "qwen3 with qwen35's pattern");
  const llm::Tokenizer got = llm::Tokenizer::load(dir.str("qwen35.gguf"));
  const llm::Tokenizer qwen2 = llm::Tokenizer::load(source);
  for (const std::string& text : kTexts) {
    SCOPED_TRACE(text);
    EXPECT_EQ(got.encode(text), want.encode(text));
  }
  // Hugging Face tokenizers' ids under each pattern.
  EXPECT_EQ(got.encode("ภาษาไทย ที่นี่"), (std::vector<int32_t>{127382, 125451, 128477, 126670}));
  EXPECT_EQ(qwen2.encode("ภาษาไทย ที่นี่"),
            (std::vector<int32_t>{127382, 125451, 220, 35884, 47171, 20184, 47171}));
}

// A byte-level vocabulary of a few tokens with the merges given: the tokenizer, or its error.
std::string tokenizer_error(const std::vector<std::string>& merges) {
  io::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "llama-bpe");
  w.set_strings("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "ab", "Ġ"});
  w.set_strings("tokenizer.ggml.merges", merges);
  test::TempDir dir;
  w.write(dir.str("t.gguf"), [](size_t, const io::GgufWriter::Sink&) {});
  const std::string error =
      testing::error_of([&] { llm::Tokenizer::load(dir.str("t.gguf")).encode("ab a"); });
  const std::string at = dir.str("t.gguf");
  return error.starts_with(at) ? "FILE" + error.substr(at.size()) : error;
}

TEST(GgufModelTokenizers, BadMergesAreErrors) {
  EXPECT_EQ(tokenizer_error({"a b", "a b"}), "no error");  // a pair again: its first rank
  EXPECT_EQ(tokenizer_error({"ab"}),
            "FILE: tokenizer.ggml.merges[0]: expected \"left right\", got \"ab\"");
  EXPECT_EQ(tokenizer_error({"a b", "a  b"}),
            "FILE: tokenizer.ggml.merges[1]: expected \"left right\", got \"a  b\"");
  EXPECT_EQ(tokenizer_error({"a c"}),
            "FILE (tokenizer.ggml): model.merges[0]: merge uses \"c\", which is not in the "
            "vocabulary");
  EXPECT_EQ(tokenizer_error({"b a"}),
            "FILE (tokenizer.ggml): model.merges[0]: merge uses \"ba\", which is not in the "
            "vocabulary");
}

TEST(GgufModelTokenizers, UnknownPreTokenizersNameTheKnownOnes) {
  EXPECT_EQ(testing::error_of([] { llm::Tokenizer::load(gguf("bad-pre.gguf")); }),
            gguf("bad-pre.gguf") +
                ": tokenizer.ggml.pre \"mystery-bpe\" is not supported (llama-bpe, lfm2, qwen2, "
                "qwen35 are)");
}

}  // namespace
}  // namespace prism
