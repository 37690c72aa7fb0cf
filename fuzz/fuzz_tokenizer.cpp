// libFuzzer target: tokenizer.json loading (Tokenizer::from_json: every model, normalizer,
// pre-tokenizer, post-processor and decoder it knows), then encoding and decoding text. Input:
// the document, then a NUL byte, then the text to encode (the whole input is the document when
// there is no NUL). Bad input must end in prism::Error, never a crash, a hang or another
// exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "prism/core/error.h"
#include "prism/llm/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view document = input.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view("Hello, world! 123") : input.substr(nul + 1);
  try {
    const prism::llm::Tokenizer t = prism::llm::Tokenizer::from_json(document, "fuzz.json");
    for (bool special : {false, true}) {
      const auto ids = t.encode(text, {.add_special_tokens = special});
      t.decode(ids);
      t.decode(ids, {.skip_special_tokens = true});
    }
  } catch (const prism::Error&) {
  }
  return 0;
}
