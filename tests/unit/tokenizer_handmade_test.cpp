// Small tokenizer.json files (made by tools/handmade_tokenizers.py) that use the normalizers,
// pre-tokenizers, decoders and post-processors the real tokenizers do not, checked against
// Hugging Face `tokenizers`' encodings and decodings of the same strings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {
namespace {

using nlohmann::json;

class HandmadeTokenizer : public testing::TestWithParam<std::string> {};

TEST_P(HandmadeTokenizer, MatchesHuggingFace) {
  std::string dir = std::string(PRISM_TEST_DATA) + "/tokenizers/handmade/" + GetParam();
  Tokenizer tokenizer = Tokenizer::load(dir);
  json expected = parse_json(read_text_file(dir + "/expected.json"), dir + "/expected.json");
  int failures = 0;
  for (const json& c : expected["cases"]) {
    std::string text = c["text"];
    auto ids = tokenizer.encode(text);
    auto with_special = tokenizer.encode(text, {.add_special_tokens = true});
    auto expected_ids = c["ids"].get<std::vector<int32_t>>();
    auto expected_special = c["ids_with_special"].get<std::vector<int32_t>>();
    std::string decoded = tokenizer.decode(expected_ids);
    std::string decoded_skip = tokenizer.decode(
        expected_special, {.skip_special_tokens = true, .clean_up_tokenization_spaces = {}});
    EXPECT_EQ(ids, expected_ids) << "encode " << json(text).dump();
    EXPECT_EQ(with_special, expected_special) << "encode+special " << json(text).dump();
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << "decode " << json(text).dump();
    EXPECT_EQ(decoded_skip, c["decoded_skip_special"].get<std::string>())
        << "decode skipping special " << json(text).dump();
    failures += ids != expected_ids || with_special != expected_special ||
                decoded != c["decoded"] || decoded_skip != c["decoded_skip_special"];
    if (failures > 10) break;  // enough to diagnose
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Handmade, HandmadeTokenizer,
                         testing::Values("sentencepiece_byte_fallback", "metaspace_nfkc",
                                         "bert_like", "byte_level_roberta", "split_removed",
                                         "split_isolated", "whitespace_replace"));

}  // namespace
}  // namespace prism::llm
