// libFuzzer target: Jinja chat templates (llm::jinja::Template), parsed and rendered with a
// conversation as transformers renders chat templates (messages, tools, add_generation_prompt,
// bos_token, eos_token). Templates come from model repositories: whatever they hold must end in
// prism::Error, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "prism/core/error.h"
#include "prism/llm/jinja/template.h"
#include "prism/llm/jinja/value.h"

namespace {

const prism::llm::jinja::Dict& context() {
  static const prism::llm::jinja::Dict kContext = [] {
    const auto json = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4", "tool_calls": [
          {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
      "tools": [{"type": "function", "function": {"name": "add", "description": "Adds",
                 "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}],
      "add_generation_prompt": true,
      "bos_token": "<s>",
      "eos_token": "</s>"
    })");
    return prism::llm::jinja::Value::from_json(json).as_dict();
  }();
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  // A twentieth of the default budgets: the sanitizers slow each step 30-50 times (allocations
  // most), and a template that reaches the defaults would take longer than an input may. The
  // code that counts them is the same; what escapes the count still hangs.
  const prism::llm::jinja::RenderLimits limits{.steps = 100'000, .work_bytes = 24 << 20};
  try {
    const prism::llm::jinja::Template t(source, "fuzz.jinja");
    t.render(context(), limits);
  } catch (const prism::Error&) {
  }
  return 0;
}
