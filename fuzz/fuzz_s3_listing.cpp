// libFuzzer target: an S3 server's ListObjectsV2 answer (io::s3::parse_list_page): the XML
// of objects, sizes, prefixes and continuation tokens. Whatever a server sends must end in
// prism::Error, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "prism/core/error.h"
#include "prism/io/s3.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    prism::io::s3::parse_list_page(std::string_view(reinterpret_cast<const char*>(data), size),
                                   "s3://fuzz/");
  } catch (const prism::Error&) {
  }
  return 0;
}
