// libFuzzer target: a GGUF file's header (io::GgufHeader::parse: metadata, tensor infos,
// alignment, offsets), and the tokenizer built from it when it parses (Tokenizer::from_gguf).
// Bad input must end in prism::Error, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <span>

#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/llm/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const prism::io::GgufHeader h = prism::io::GgufHeader::parse(
        std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.gguf");
    if (h.find("tokenizer.ggml.model")) {
      const prism::llm::Tokenizer t = prism::llm::Tokenizer::from_gguf(h);
      t.decode(t.encode("Hello world <s> 123 é"));
    }
  } catch (const prism::Error&) {
  }
  return 0;
}
