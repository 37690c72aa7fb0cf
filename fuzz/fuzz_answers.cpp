// libFuzzer target: what `prism serve` reads out of a model's answers, which a prompt can steer
// anywhere: tool calls in each format (serve::parse_tool_calls, tool_call_start), and the JSON
// answers' grammar (llm::JsonPrefix), checked against nlohmann's parser: a text JsonPrefix
// takes whole and calls complete must parse as a JSON object. The first byte chooses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "prism/llm/json_prefix.h"
#include "prism/serve/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using prism::serve::ToolCallFormat;
  const int choice = data[0] % 4;
  if (choice < 3) {
    const auto format = static_cast<ToolCallFormat>(choice + 1);  // hermes, llama_json, pythonic
    const prism::serve::ToolCallAnswer answer = prism::serve::parse_tool_calls(format, text);
    for (const prism::serve::ToolCall& call : answer.calls) {
      // The arguments handed to clients are a JSON object's text.
      if (!nlohmann::json::parse(call.arguments).is_object()) std::abort();
    }
    const size_t start = prism::serve::tool_call_start(format, text);
    if (start != std::string_view::npos && start > text.size()) std::abort();
    return 0;
  }
  prism::llm::JsonPrefix json;
  if (!json.feed(text) || !json.complete()) return 0;
  try {
    if (!nlohmann::json::parse(text).is_object()) std::abort();
  } catch (const nlohmann::json::out_of_range&) {
    // A number past a double's range: JSON's grammar allows it, nlohmann does not.
  } catch (const nlohmann::json::parse_error&) {
    std::abort();  // JsonPrefix took a text that is not JSON
  }
  return 0;
}
