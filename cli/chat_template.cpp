// `prism chat-template`: renders a conversation with the tokenizer's chat template and prints
// the prompt exactly (no newline added).
#include "prism/llm/chat_template.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace {

struct Options {
  std::string tokenizer;
  std::string messages_file;
  bool add_generation_prompt = false;
  std::string kwargs;
};

nlohmann::ordered_json parse_ordered(const std::string& text, const std::string& source) {
  // Key order matters (tojson keeps it), so parse into an ordered object; syntax errors are
  // reported with line and column by parse_json.
  prism::llm::parse_json(text, source);
  return nlohmann::ordered_json::parse(text);
}

int run(const Options& opts) {
  auto messages = parse_ordered(prism::llm::read_text_file(opts.messages_file), opts.messages_file);
  prism::llm::ChatTemplateOptions options;
  options.add_generation_prompt = opts.add_generation_prompt;
  // Either a list of messages, or {"messages": [...], "tools": [...]}.
  if (messages.is_object()) {
    if (messages.contains("tools")) options.tools = messages["tools"];
    if (!messages.contains("messages"))
      prism::fail("{}: expected a \"messages\" list", opts.messages_file);
    messages = nlohmann::ordered_json(messages["messages"]);
  }
  if (!opts.kwargs.empty()) {
    options.kwargs = parse_ordered(opts.kwargs, "--kwargs");
    if (!options.kwargs.is_object()) prism::fail("--kwargs: expected a JSON object");
  }
  auto tokenizer = prism::llm::Tokenizer::load(opts.tokenizer);
  auto chat = prism::llm::ChatTemplate::from_tokenizer(tokenizer);
  std::string prompt = chat.apply(messages, options);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

const prism::cli::RegisterCommand kChatTemplate{
    "chat-template", "Render a conversation with the tokenizer's chat template",
    [](CLI::App& app) -> prism::cli::Action {
      auto opts = std::make_shared<Options>();
      app.add_option("--tokenizer", opts->tokenizer,
                     "Directory with tokenizer.json and tokenizer_config.json")
          ->required();
      app.add_option("--messages", opts->messages_file,
                     "JSON file: a list of messages, or {\"messages\": [...], \"tools\": [...]}")
          ->required();
      app.add_flag("--add-generation-prompt", opts->add_generation_prompt,
                   "End with the start of an assistant turn");
      app.add_option(
          "--kwargs", opts->kwargs,
          "Extra template variables as a JSON object, e.g. '{\"enable_thinking\":false}'");
      return [opts] { return run(*opts); };
    }};

}  // namespace
