#include "prism/llm/chat_template.h"

#include "prism/core/error.h"

namespace prism::llm {
namespace {

using nlohmann::ordered_json;

// The messages as transformers' apply_chat_template hands them to the template: keys whose
// value is null left out (an OpenAI-style "content": null is undefined, not None), and a
// message's reasoning, under the first of these names that is set, under all of them that
// templates read ("thinking" first unless the message has its own, "reasoning_content" last).
ordered_json prepared_messages(const ordered_json& messages) {
  static constexpr const char* kReasoning[] = {"reasoning_content", "thinking", "reasoning"};
  ordered_json out = ordered_json::array();
  for (const ordered_json& message : messages) {
    ordered_json kept = ordered_json::object();
    for (const auto& [key, value] : message.items()) {
      if (!value.is_null()) kept[key] = value;
    }
    const ordered_json* reasoning = nullptr;
    for (const char* name : kReasoning) {
      if (!reasoning && kept.contains(name)) reasoning = &kept[name];
    }
    if (!reasoning) {
      out.push_back(std::move(kept));
      continue;
    }
    ordered_json aliased = ordered_json::object();
    aliased["thinking"] = *reasoning;
    for (const auto& [key, value] : kept.items()) aliased[key] = value;
    aliased["reasoning_content"] = *reasoning;
    out.push_back(std::move(aliased));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string source_name,
                           std::vector<std::pair<std::string, std::string>> special_tokens)
    : template_(source, std::move(source_name)), special_tokens_(std::move(special_tokens)) {}

ChatTemplate ChatTemplate::from_tokenizer(const Tokenizer& tokenizer) {
  const TokenizerConfig& config = tokenizer.config();
  if (config.chat_template.empty()) {
    fail("{}: no chat_template", config.chat_template_source.empty() ? "tokenizer configuration"
                                                                     : config.chat_template_source);
  }
  return ChatTemplate(config.chat_template, config.chat_template_source + " (chat_template)",
                      config.special_tokens);
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options) const {
  if (!messages.is_array()) fail("chat template: messages must be a list of objects");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) fail("chat template: message {} is not an object", i);
  }
  if (!options.kwargs.is_object()) fail("chat template: extra variables must be a JSON object");
  // The variables transformers passes: special tokens, then messages, tools, documents and the
  // generation flag, then the caller's extra variables.
  jinja::Dict context;
  for (const auto& [name, token] : special_tokens_) context.set(name, jinja::Value(token));
  context.set("messages", jinja::Value::from_json(prepared_messages(messages)));
  context.set("tools", jinja::Value::from_json(options.tools));
  context.set("documents", jinja::Value(jinja::None{}));
  context.set("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  for (const auto& [key, value] : options.kwargs.items()) {
    context.set(key, jinja::Value::from_json(value));
  }
  return template_.render(context);
}

}  // namespace prism::llm
