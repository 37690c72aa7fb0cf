// The tokenizer against reference outputs: llama3-tokenizer-js's own test vectors, and the
// fixtures tools/make_tokenizer_fixtures.py makes with Hugging Face `tokenizers` for three real
// tokenizers (ids with and without special tokens, decoded text with and without them).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {
namespace {

using nlohmann::json;

const Tokenizer& real_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    std::string dir = std::string(PRISM_TOKENIZERS_DIR) + "/" + name;
    it = loaded.emplace(name, Tokenizer::load(dir)).first;
  }
  return it->second;
}

json fixture(const std::string& file) {
  std::string path = std::string(PRISM_TEST_DATA) + "/tokenizers/" + file;
  return parse_json(read_text_file(path), path);
}

std::vector<int32_t> ids_of(const json& list) { return list.get<std::vector<int32_t>>(); }

// The Llama 3.1 tokenizer with Meta's names for its special tokens, as llama3-tokenizer-js has
// them (the committed Llama 3.1 files, from the @lenml package, keep Llama 3's reserved names for
// a few ids).
Tokenizer llama3_1_with_meta_names(const json& special_tokens) {
  std::string path = std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1/tokenizer.json";
  json root = parse_json(read_text_file(path), path);
  for (json& token : root["added_tokens"]) {
    token["content"] = special_tokens.at(token["id"].get<size_t>() - 128000);
  }
  return Tokenizer::from_json(root.dump(), path);
}

TEST(TokenizerReference, Llama3TokenizerJsVectors) {
  json vectors = fixture("llama3_tokenizer_js_vectors.json");
  Tokenizer tokenizer = llama3_1_with_meta_names(vectors["special_tokens"]);
  const int32_t bos = vectors["bos_id"], eos = vectors["eos_id"];
  int checked = 0;
  for (const json& v : vectors["vectors"]) {
    if (v["kind"] == "encode") {
      std::string text = v["text"];
      std::vector<int32_t> ids = tokenizer.encode(text);
      // llama3-tokenizer-js adds BOS and EOS by options rather than by a post-processor.
      if (v["bos"].get<bool>()) ids.insert(ids.begin(), bos);
      if (v["eos"].get<bool>()) ids.push_back(eos);
      EXPECT_EQ(ids, ids_of(v["ids"])) << "encode: " << text;
    } else {
      std::vector<int32_t> ids = ids_of(v["ids"]);
      EXPECT_EQ(tokenizer.decode(ids), v["text"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 42);
}

class HuggingFaceFixture : public testing::TestWithParam<std::string> {};

TEST_P(HuggingFaceFixture, EncodeAndDecodeMatch) {
  const Tokenizer& tokenizer = real_tokenizer(GetParam() == "llama3"     ? "llama3"
                                              : GetParam() == "llama3_1" ? "llama3_1"
                                                                         : "qwen3");
  json data = fixture(GetParam() + ".json");
  int failures = 0, cases = 0;
  for (const json& c : data["cases"]) {
    std::string text = c["text"];
    auto ids = tokenizer.encode(text);
    auto with_special = tokenizer.encode(text, {.add_special_tokens = true});
    bool ok = ids == ids_of(c["ids"]) && with_special == ids_of(c["ids_with_special"]);
    EXPECT_EQ(ids, ids_of(c["ids"])) << "encode: " << json(text).dump();
    EXPECT_EQ(with_special, ids_of(c["ids_with_special"]))
        << "encode+special: " << json(text).dump();
    std::string decoded = tokenizer.decode(ids_of(c["ids"]));
    std::string decoded_skip =
        tokenizer.decode(ids_of(c["ids_with_special"]),
                         {.skip_special_tokens = true, .clean_up_tokenization_spaces = {}});
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << "decode: " << json(text).dump();
    EXPECT_EQ(decoded_skip, c["decoded_skip_special"].get<std::string>())
        << "decode skipping special: " << json(text).dump();
    ok = ok && decoded == c["decoded"] && decoded_skip == c["decoded_skip_special"];
    failures += !ok;
    ++cases;
  }
  EXPECT_GE(cases, 300);
  EXPECT_EQ(failures, 0);
}

TEST_P(HuggingFaceFixture, StreamingDecodeEqualsFullDecode) {
  const Tokenizer& tokenizer = real_tokenizer(GetParam());
  json data = fixture(GetParam() + ".json");
  for (const json& c : data["cases"]) {
    auto ids = ids_of(c["ids_with_special"]);
    StreamingDetokenizer stream(tokenizer);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = stream.push(id);
      // Never a partial UTF-8 character.
      std::string checked = piece;
      EXPECT_NO_THROW(tokenizer.encode(checked)) << "piece is not valid UTF-8";
      streamed += piece;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, tokenizer.decode(ids, {.skip_special_tokens = false,
                                               .clean_up_tokenization_spaces = false}))
        << json(c["text"]).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, HuggingFaceFixture,
                         testing::Values("llama3", "llama3_1", "qwen3"));

}  // namespace
}  // namespace prism::llm
