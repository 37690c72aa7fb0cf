// Reading tool calls out of answers: the formats' detection from chat templates (Qwen 3's and
// LFM 2's own), each format's calls and the text around them, text that only looks like a
// call left as text, and where a streamed answer must start holding text back. The Hermes
// case parses the assistant turn transformers rendered from a conversation's tool_calls back
// into those calls.
#include "prism/serve/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "prism/llm/tokenizer.h"

namespace prism {
namespace {

using serve::parse_tool_calls;
using serve::tool_call_start;
using serve::ToolCallFormat;
using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return Json::parse(s.str());
}

TEST(ToolCalls, FormatFromTheChatTemplate) {
  const llm::Tokenizer qwen = llm::Tokenizer::load(std::string(PRISM_TOKENIZERS_DIR) + "/qwen3");
  EXPECT_EQ(serve::tool_call_format(qwen.config().chat_template), ToolCallFormat::hermes);
  const Json lfm2 =
      read_json(std::string(PRISM_TEST_DATA) + "/lfm2/tokenizer/tokenizer_config.json");
  EXPECT_EQ(serve::tool_call_format(lfm2["chat_template"].get<std::string>()),
            ToolCallFormat::pythonic);
  EXPECT_EQ(serve::tool_call_format("{{ '<|python_tag|>' }}"), ToolCallFormat::llama_json);
  // The Llama 3.1 tokenizer here carries a template without tools.
  const llm::Tokenizer llama =
      llm::Tokenizer::load(std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1");
  EXPECT_EQ(serve::tool_call_format(llama.config().chat_template), ToolCallFormat::none);
}

// transformers rendered the fixture's conversation through Qwen 3's template: the assistant's
// turn with its tool call reads back as that call.
TEST(ToolCalls, HermesReadsTheTurnTransformersRendered) {
  const Json fixture = read_json(std::string(PRISM_TEST_DATA) + "/tokenizers/qwen3.json");
  const Json* chat = nullptr;
  for (const Json& c : fixture["chats"]) {
    if (c["name"] == "tools") chat = &c;
  }
  ASSERT_NE(chat, nullptr);
  const std::string rendered = (*chat)["rendered"];
  const std::string open = "<|im_start|>assistant\n", close = "<|im_end|>";
  const size_t from = rendered.find(open) + open.size();
  const std::string turn = rendered.substr(from, rendered.find(close, from) - from);
  const serve::ToolCallAnswer answer = parse_tool_calls(ToolCallFormat::hermes, turn);
  const Json& want = (*chat)["messages"][2]["tool_calls"][0]["function"];
  ASSERT_EQ(answer.calls.size(), 1u) << turn;
  EXPECT_EQ(answer.calls[0].name, want["name"]);
  EXPECT_EQ(Json::parse(answer.calls[0].arguments), want["arguments"]);
  EXPECT_EQ(answer.content, "");
}

TEST(ToolCalls, HermesCallsAndTheTextAround) {
  const auto a = parse_tool_calls(
      ToolCallFormat::hermes,
      "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}"
      "</tool_call>");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "weather");
  EXPECT_EQ(a.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(a.calls[1].name, "time");
  EXPECT_EQ(a.calls[1].arguments, R"({"tz":"CET"})");  // arguments given as JSON text
  EXPECT_EQ(a.content, "Let me look.\n\n");
  // No arguments: an empty object.
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::hermes, "<tool_call>{\"name\": \"now\"}</tool_call>")
                .calls.at(0)
                .arguments,
            "{}");
  // Not calls: plain text, cut off, broken JSON, no name, arguments not an object.
  for (const char* text :
       {"Just words.", "<tool_call>{\"name\": \"f\", \"arguments\": {}}",
        "<tool_call>{\"name\": \"f\", </tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"}) {
    const auto none = parse_tool_calls(ToolCallFormat::hermes, text);
    EXPECT_TRUE(none.calls.empty()) << text;
    EXPECT_EQ(none.content, text);
  }
}

TEST(ToolCalls, LlamaJson) {
  auto a = parse_tool_calls(ToolCallFormat::llama_json,
                            " {\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "search");
  EXPECT_EQ(a.calls[0].arguments, R"({"q":"a;b"})");
  EXPECT_EQ(a.content, "");
  a = parse_tool_calls(ToolCallFormat::llama_json,
                       "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", "
                       "\"arguments\": {\"x\": 1}}");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[1].name, "g");
  EXPECT_EQ(a.calls[1].arguments, R"({"x":1})");
  for (const char* text : {"The answer is {x}.", "{\"name\": \"f\"", "{\"city\": \"Paris\"}"}) {
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::llama_json, text).calls.empty()) << text;
  }
}

TEST(ToolCalls, PythonicCallsWithPythonLiterals) {
  const auto a = parse_tool_calls(
      ToolCallFormat::pythonic,
      "<|tool_call_start|>[get_weather(city='Paris', days=3, scale=-1.5e2, metric=True, "
      "tags=['a', \"it's\"], opts={'x': None, 'y': (1, 2)}), now()]<|tool_call_end|>Checking.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(a.calls[0].arguments),
            Json::parse(R"({"city": "Paris", "days": 3, "scale": -150.0, "metric": true,
                            "tags": ["a", "it's"], "opts": {"x": null, "y": [1, 2]}})"));
  EXPECT_EQ(a.calls[1].name, "now");
  EXPECT_EQ(a.calls[1].arguments, "{}");
  EXPECT_EQ(a.content, "Checking.");
  for (const char* text :
       {"<|tool_call_start|>[f('positional')]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=]<|tool_call_end|>", "<|tool_call_start|>f(a=1)<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1)]", "[f(a=1)]"}) {
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::pythonic, text).calls.empty()) << text;
  }
  // Bytes that are not UTF-8 in a string (a model may write any): U+FFFD in the arguments.
  const auto bad_utf8 = parse_tool_calls(ToolCallFormat::pythonic,
                                         "<|tool_call_start|>[f(a='x\xffy')]<|tool_call_end|>");
  ASSERT_EQ(bad_utf8.calls.size(), 1u);
  EXPECT_EQ(bad_utf8.calls[0].arguments, "{\"a\":\"x\xef\xbf\xbdy\"}");
  // Nesting past a depth is not read (and the parser goes no deeper).
  const std::string deep = "<|tool_call_start|>[f(a=" + std::string(100000, '[') +
                           std::string(100000, ']') + ")]<|tool_call_end|>";
  EXPECT_TRUE(parse_tool_calls(ToolCallFormat::pythonic, deep).calls.empty());
  const std::string nested = "<|tool_call_start|>[f(a=" + std::string(60, '[') +
                             std::string(60, ']') + ")]<|tool_call_end|>";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::pythonic, nested).calls.size(), 1u);
}

TEST(ToolCalls, WhereAStreamHoldsBack) {
  constexpr size_t npos = std::string_view::npos;
  EXPECT_EQ(tool_call_start(ToolCallFormat::hermes, "Sure. <tool_call>{"), 6u);
  EXPECT_EQ(tool_call_start(ToolCallFormat::hermes, "Sure. <tool"), 6u);  // maybe a marker
  EXPECT_EQ(tool_call_start(ToolCallFormat::hermes, "a < b"), npos);
  EXPECT_EQ(tool_call_start(ToolCallFormat::pythonic, "x<|tool_call_start|>["), 1u);
  EXPECT_EQ(tool_call_start(ToolCallFormat::llama_json, ""), 0u);
  EXPECT_EQ(tool_call_start(ToolCallFormat::llama_json, "  {\"na"), 0u);
  EXPECT_EQ(tool_call_start(ToolCallFormat::llama_json, "<|pyth"), 0u);
  EXPECT_EQ(tool_call_start(ToolCallFormat::llama_json, "Paris is"), npos);
  EXPECT_EQ(tool_call_start(ToolCallFormat::none, "<tool_call>"), npos);
}

}  // namespace
}  // namespace prism
