// libFuzzer target: JSON Schemas as `prism serve` takes them from requests (response_format
// json_schema, tools' parameters) compiled to grammars (llm::JsonSchema), and texts fed to
// them. The input is a schema's JSON text, a NUL byte, and the text. A schema compiles or
// throws prism::Error (nothing else, and within bounds); along the text, every prefix the
// grammar takes has some byte to go on with or is whole (no answer is left without a token);
// a text it takes whole parses as JSON by nlohmann's parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "prism/core/error.h"
#include "prism/llm/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return 0;
  const auto schema = nlohmann::ordered_json::parse(input.substr(0, nul), nullptr, false);
  if (schema.is_discarded()) return 0;
  std::shared_ptr<const prism::llm::JsonSchema> g;
  try {
    g = prism::llm::JsonSchema::compile(schema);
  } catch (const prism::Error&) {
    return 0;
  }
  const std::string_view text = input.substr(nul + 1);
  prism::llm::JsonSchema::State s = g->start();
  for (size_t i = 0; i < text.size(); ++i) {
    if (i < 64) {  // (256 feeds a byte: the first bytes only)
      bool on = g->complete(s);
      for (int b = 0; b < 256 && !on; ++b) {
        prism::llm::JsonSchema::State t = s;
        on = g->feed(t, static_cast<char>(b));
      }
      if (!on) std::abort();  // a prefix with no way on
    }
    if (!g->feed(s, text[i])) return 0;
  }
  if (!g->complete(s)) return 0;
  try {
    (void)nlohmann::json::parse(text);
  } catch (const nlohmann::json::out_of_range&) {
    // A number past a double's range: JSON's grammar allows it, nlohmann does not.
  } catch (const nlohmann::json::parse_error&) {
    std::abort();  // the grammar took a text that is not JSON
  }
  return 0;
}
