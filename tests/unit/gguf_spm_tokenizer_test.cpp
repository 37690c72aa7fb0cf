// A SentencePiece tokenizer from a GGUF file (tokenizer.ggml.model "llama", as Llama 2, Mistral
// and TinyLlama files have it; prism/llm/tokenizer_gguf.cpp), against Google's `sentencepiece`
// library: tests/data/gguf/spm_tokenizer.gguf holds a BPE model that library trained, and
// spm_tokenizer_ref.json the ids and text it gives for a set of inputs
// (tools/make_spm_gguf_fixture.py writes both).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "prism/io/gguf.h"
#include "prism/io/gguf_writer.h"
#include "prism/llm/tokenizer.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

std::string data(const std::string& name) { return std::string(PRISM_TEST_DATA) + "/gguf/" + name; }

nlohmann::json reference() {
  std::ifstream in(data("spm_tokenizer_ref.json"));
  return nlohmann::json::parse(in);
}

TEST(GgufSentencePiece, EncodesAndDecodesAsSentencePiece) {
  const nlohmann::json ref = reference();
  const llm::Tokenizer tok = llm::Tokenizer::load(data("spm_tokenizer.gguf"));
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<size_t>());
  const auto bos = ref["bos"].get<int32_t>();
  for (const nlohmann::json& input : ref["inputs"]) {
    const auto text = input["text"].get<std::string>();
    SCOPED_TRACE(text);
    const auto ids = input["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids);
    // With the special tokens: BOS first (tokenizer.ggml.add_bos_token).
    std::vector<int32_t> with_bos = {bos};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(tok.encode(text, {.add_special_tokens = true}), with_bos);
    if (input.contains("decoded")) {
      EXPECT_EQ(tok.decode(ids), input["decoded"].get<std::string>());
      EXPECT_EQ(tok.decode(with_bos, {.skip_special_tokens = true}),
                input["decoded"].get<std::string>());
    }
  }
}

TEST(GgufSentencePiece, SpecialTokensAndBytes) {
  const nlohmann::json ref = reference();
  const llm::Tokenizer tok = llm::Tokenizer::load(data("spm_tokenizer.gguf"));
  const auto bos = ref["bos"].get<int32_t>(), eos = ref["eos"].get<int32_t>(),
             unk = ref["unk"].get<int32_t>();
  EXPECT_EQ(tok.id_to_token(bos), "<s>");
  EXPECT_EQ(tok.id_to_token(eos), "</s>");
  EXPECT_EQ(tok.id_to_token(unk), "<unk>");
  EXPECT_TRUE(tok.is_special(bos));
  EXPECT_TRUE(tok.is_special(eos));
  const std::vector<int32_t> both = {bos, eos};
  EXPECT_EQ(tok.decode(both), "<s></s>");
  EXPECT_EQ(tok.decode(both, {.skip_special_tokens = true}), "");
  // A character outside the vocabulary is its UTF-8 bytes, <0xE2> <0x88> <0xAE> for U+222E, and
  // the bytes decode back to it.
  const std::vector<int32_t> ids = tok.encode("\u222e");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(tok.id_to_token(ids[ids.size() - 3]), "<0xE2>");
  EXPECT_EQ(tok.id_to_token(ids[ids.size() - 2]), "<0x88>");
  EXPECT_EQ(tok.id_to_token(ids[ids.size() - 1]), "<0xAE>");
  EXPECT_EQ(tok.decode(ids), "\u222e");
}

// A SentencePiece tokenizer needs a score for each token: one clear error without them.
TEST(GgufSentencePiece, RefusesMissingOrMismatchedScores) {
  test::TempDir dir;
  auto write = [&](const std::string& name, bool scores_as_ints) {
    io::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\u2581a"});
    const std::vector<int32_t> types = {2, 3, 3, 1};
    w.set_i32s("tokenizer.ggml.token_type", types);
    if (scores_as_ints) w.set_i32s("tokenizer.ggml.scores", types);
    w.write(dir.str(name), [](size_t, const io::GgufWriter::Sink&) {});
    return dir.str(name);
  };
  const std::string missing = write("missing.gguf", false);
  EXPECT_EQ(testing::error_of([&] { llm::Tokenizer::load(missing); }),
            missing + ": no metadata key 'tokenizer.ggml.scores'");
  const std::string ints = write("ints.gguf", true);
  EXPECT_EQ(testing::error_of([&] { llm::Tokenizer::load(ints); }),
            ints + ": tokenizer.ggml.scores must list an f32 score for each of the 4 tokens");
}

}  // namespace
}  // namespace prism
