// Tool calls in a model's answer, in the format its chat template teaches it: the server
// renders a request's `tools` through the template and reads the calls back out of the text.
//   - hermes (Qwen 2.5-3.5 and many others): <tool_call>{"name": ..., "arguments": {...}}
//     </tool_call>, one block per call.
//   - llama_json (Llama 3.1-3.3's templates with tools): the whole answer is a JSON object
//     {"name": ..., "parameters": {...}}, maybe after <|python_tag|>; several joined by ';'.
//   - pythonic (LFM 2): <|tool_call_start|>[name(arg=value, ...), ...]<|tool_call_end|>, the
//     values Python literals.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace prism::serve {

enum class ToolCallFormat { none, hermes, llama_json, pythonic };

// The format a chat template's source asks for; none where it shows no tool calls.
ToolCallFormat tool_call_format(std::string_view chat_template);
const char* tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text
};

// An answer split into its text and its calls. Where the answer does not hold well-formed
// calls, all of it is text and `calls` is empty.
struct ToolCallAnswer {
  std::string content;  // the text before the first call and after the last
  std::vector<ToolCall> calls;
};
ToolCallAnswer parse_tool_calls(ToolCallFormat format, std::string_view text);

// Where in an answer's text so far a call may be starting (its beginning, or a prefix of its
// marker at the end): a streamed answer holds back the text from there until the answer ends.
// npos where no call may start.
size_t tool_call_start(ToolCallFormat format, std::string_view text);

}  // namespace prism::serve
