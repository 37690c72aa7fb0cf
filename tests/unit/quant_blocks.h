// Blocks of ggml's quantized formats for tests: random bytes whose f16 scales are finite (of
// either sign, normal or subnormal), so that every value they hold is a number.
#pragma once

#include <cstdint>
#include <vector>

#include "prism/core/host_buffer.h"
#include "prism/quant/ggml_type.h"

namespace prism::testing {

// The byte offsets of a block's f16 fields (scales and offsets).
inline std::vector<int> f16_fields(quant::GgmlType t) {
  using quant::GgmlType;
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {0};
  }
}

// u8 {r: rows, b: blocks * block_bytes}: `blocks` random blocks of `t` a row.
inline HostBuffer random_blocks(quant::GgmlType t, int64_t rows, int64_t blocks, uint32_t seed,
                                Tag row_tag = "r", Tag byte_tag = "b") {
  const quant::GgmlTypeInfo& info = quant::info(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * blocks * info.block_bytes));
  uint32_t x = seed * 2654435761u + 7u;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return x >> 8;
  };
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(next());
  for (int64_t blk = 0; blk < rows * blocks; ++blk) {
    for (int at : f16_fields(t)) {
      // sign, exponent 0..20 (subnormals included, at most 2^5: values stay moderate), mantissa
      const uint32_t r = next();
      const uint16_t h =
          static_cast<uint16_t>(((r & 1) << 15) | ((r >> 1) % 21 << 10) | ((r >> 6) & 0x3ff));
      uint8_t* p = bytes.data() + blk * info.block_bytes + at;
      p[0] = static_cast<uint8_t>(h & 0xff);
      p[1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return HostBuffer::from(
      Shape(DType::u8, {{row_tag, rows}, {byte_tag, blocks * info.block_bytes}}),
      std::span<const uint8_t>(bytes));
}

}  // namespace prism::testing
