// libFuzzer target: `prism serve`'s request bodies (serve::parse_request), for
// /v1/chat/completions and /v1/completions (the first byte chooses). Whatever a client sends
// must end in an ApiError (a prism::Error the server answers with its status), never a crash,
// a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "prism/core/error.h"
#include "prism/serve/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  try {
    prism::serve::parse_request(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                                chat, "prism-model");
  } catch (const prism::Error&) {
  }
  return 0;
}
