// Chat templates: the Jinja template in tokenizer_config.json (or chat_template.jinja) applied to
// a conversation, as transformers' apply_chat_template(tokenize=False) does.
//
//   auto tokenizer = prism::llm::Tokenizer::load(dir);
//   auto chat = prism::llm::ChatTemplate::from_tokenizer(tokenizer);
//   std::string prompt = chat.apply(messages, {.add_generation_prompt = true});
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "prism/llm/jinja/template.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  // Tool schemas (a list) or null.
  nlohmann::ordered_json tools = nullptr;
  // Extra template variables (an object), e.g. {"enable_thinking": false}; they override the rest.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // `special_tokens`: names such as "bos_token" and their strings, visible to the template.
  ChatTemplate(std::string_view source, std::string source_name,
               std::vector<std::pair<std::string, std::string>> special_tokens = {});
  // The tokenizer's template; throws prism::Error when its configuration has none.
  static ChatTemplate from_tokenizer(const Tokenizer& tokenizer);

  // `messages`: a list of {"role": ..., "content": ...} objects (any extra fields are passed on),
  // prepared as transformers does: null values left out, and a message's reasoning (under
  // "reasoning_content", "thinking" or "reasoning") under both names templates read.
  std::string apply(const nlohmann::ordered_json& messages,
                    const ChatTemplateOptions& options = {}) const;

 private:
  jinja::Template template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace prism::llm
