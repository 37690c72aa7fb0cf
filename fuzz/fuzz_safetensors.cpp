// libFuzzer target: a safetensors file's header (io::SafetensorsHeader::parse), the JSON and the
// file size it claims to describe. Input: 8 bytes of file size (little-endian), then the JSON.
// Bad input must end in prism::Error, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "prism/core/error.h"
#include "prism/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t file_size;
  std::memcpy(&file_size, data, 8);
  const std::string_view json(reinterpret_cast<const char*>(data + 8), size - 8);
  try {
    prism::io::SafetensorsHeader::parse(json, file_size, "fuzz.safetensors");
  } catch (const prism::Error&) {
  }
  return 0;
}
