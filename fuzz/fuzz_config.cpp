// libFuzzer target: a checkpoint's config.json, read by each architecture prism runs
// (models::make_causal_lm: Llama, Qwen 3.5, LFM 2, by model_type). Input: the JSON text.
// Malformed JSON, wrong types, missing or absurd sizes must end in prism::Error, never a crash,
// a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "prism/core/dtype.h"
#include "prism/core/error.h"
#include "prism/models/causal_lm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;  // not JSON: the JSON reader's own errors, elsewhere
  try {
    prism::models::make_causal_lm(config, "fuzz/config.json", prism::DType::f32);
  } catch (const prism::Error&) {
  }
  return 0;
}
