// The tokenizer of LFM 2's kind that tools/make_lfm2_tokenizer.py writes (byte-level BPE, LFM's
// special tokens, a ChatML-style chat template with a tool list) against what Hugging Face makes
// of the same files: ids with and without special tokens and decoded text (`tokenizers`), rendered
// chats (transformers' apply_chat_template).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/llm/chat_template.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string tokenizer_dir() { return std::string(PRISM_TEST_DATA) + "/lfm2/tokenizer"; }

ordered_json expected() {
  std::string path = tokenizer_dir() + "/expected.json";
  std::string text = read_text_file(path);
  parse_json(text, path);
  return ordered_json::parse(text);
}

TEST(Lfm2Tokenizer, EncodeAndDecodeMatchHuggingFace) {
  Tokenizer tokenizer = Tokenizer::load(tokenizer_dir());
  EXPECT_EQ(tokenizer.encode("<|im_start|>user\nhi<|im_end|>").front(), 6);
  int failures = 0, cases = 0;
  ordered_json data = expected();
  for (const ordered_json& c : data["cases"]) {
    std::string text = c["text"];
    auto want = c["ids"].get<std::vector<int32_t>>();
    auto want_special = c["ids_with_special"].get<std::vector<int32_t>>();
    auto ids = tokenizer.encode(text);
    auto with_special = tokenizer.encode(text, {.add_special_tokens = true});
    std::string decoded = tokenizer.decode(want);
    std::string decoded_skip = tokenizer.decode(
        want_special, {.skip_special_tokens = true, .clean_up_tokenization_spaces = {}});
    EXPECT_EQ(ids, want) << "encode: " << json(text).dump();
    EXPECT_EQ(with_special, want_special) << "encode+special: " << json(text).dump();
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << "decode: " << json(text).dump();
    EXPECT_EQ(decoded_skip, c["decoded_skip_special"].get<std::string>())
        << "decode skipping special: " << json(text).dump();
    failures += !(ids == want && with_special == want_special && decoded == c["decoded"] &&
                  decoded_skip == c["decoded_skip_special"]);
    ++cases;
  }
  EXPECT_GE(cases, 300);
  EXPECT_EQ(failures, 0);
}

TEST(Lfm2Tokenizer, ChatTemplateRendersLikeTransformers) {
  Tokenizer tokenizer = Tokenizer::load(tokenizer_dir());
  ChatTemplate chat = ChatTemplate::from_tokenizer(tokenizer);
  int rendered = 0;
  ordered_json data = expected();
  for (const ordered_json& c : data["chats"]) {
    ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (c.contains("tools")) options.tools = c["tools"];
    EXPECT_EQ(chat.apply(c["messages"], options), c["rendered"].get<std::string>())
        << c["name"].get<std::string>() << ", add_generation_prompt "
        << options.add_generation_prompt;
    ++rendered;
  }
  EXPECT_GE(rendered, 20);
}

}  // namespace
}  // namespace prism::llm
