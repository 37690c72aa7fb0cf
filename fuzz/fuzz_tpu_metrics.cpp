// libFuzzer target: what a TPU runtime metrics server sends prism smi (prism/smi/tpu_source.cpp,
// grpc.h), any process on the host being able to listen on its port. The first byte picks the
// parser: a MetricResponse message (smi::tpu_metric_values); a sequence of HPACK header blocks
// decoded on one connection's dynamic table (each block prefixed by a byte of length, the last
// taking what is left); or one Huffman-coded string. Whatever comes must end in "does not
// parse", never a crash, a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "prism/smi/grpc.h"
#include "prism/smi/smi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)prism::smi::tpu_metric_values(rest);
      break;
    case 1: {
      prism::smi::grpc::HpackDecoder decoder;
      while (!rest.empty()) {
        const size_t n = static_cast<uint8_t>(rest[0]);
        rest.remove_prefix(1);
        const std::string_view block = rest.substr(0, n);
        rest.remove_prefix(block.size());
        if (!decoder.decode(block)) break;  // a connection ends at a malformed block
      }
      break;
    }
    default:
      (void)prism::smi::grpc::huffman_decode(rest);
      break;
  }
  return 0;
}
