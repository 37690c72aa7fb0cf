// Chat templates of real tokenizers against transformers' apply_chat_template (fixtures made by
// tools/make_tokenizer_fixtures.py): the templates run as tokenizer_config.json ships them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/llm/chat_template.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {
namespace {

using nlohmann::ordered_json;

class ChatTemplateReference : public testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateReference, RendersLikeTransformers) {
  std::string dir = std::string(PRISM_TOKENIZERS_DIR) + "/" + GetParam();
  Tokenizer tokenizer = Tokenizer::load(dir);
  ChatTemplate chat = ChatTemplate::from_tokenizer(tokenizer);
  std::string path = std::string(PRISM_TEST_DATA) + "/tokenizers/" + GetParam() + ".json";
  std::string text = read_text_file(path);
  parse_json(text, path);
  ordered_json fixture = ordered_json::parse(text);
  int rendered = 0;
  for (const ordered_json& c : fixture["chats"]) {
    ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    options.kwargs = c["kwargs"];
    if (c.contains("tools")) options.tools = c["tools"];
    EXPECT_EQ(chat.apply(c["messages"], options), c["rendered"].get<std::string>())
        << c["name"].get<std::string>() << ", add_generation_prompt "
        << options.add_generation_prompt;
    ++rendered;
  }
  EXPECT_GE(rendered, 20);  // at least 10 conversations, with and without the generation prompt
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, ChatTemplateReference,
                         testing::Values("llama3", "llama3_1", "qwen3"));

}  // namespace
}  // namespace prism::llm
