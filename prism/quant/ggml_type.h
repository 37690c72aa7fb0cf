// ggml's tensor types, as GGUF files name them: the number a tensor info stores, its name, and
// how its elements pack into blocks (a block of a quantized type holds a fixed number of
// elements in a fixed number of bytes, scales included). Every type ggml defines is listed, so
// that a reader can check and show any GGUF file; dequantize.h says which ones prism can turn
// into floats.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace prism::quant {

// The values are ggml's (they are what a GGUF tensor info stores); gaps are types ggml retired.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;   // "Q4_K"
  int64_t block_elements;  // 1 for plain types, 32 or 256 (and a few others) for quantized ones
  int64_t block_bytes;     // bytes of one block, its scales included
};

// The type a GGUF tensor info's number names, or nothing for a number ggml does not define.
std::optional<GgmlType> ggml_type_from_id(uint32_t id);
const GgmlTypeInfo& info(GgmlType type);
inline std::string_view name(GgmlType type) { return info(type).name; }
// "Q4_K", "F32", ...; nothing for an unknown name.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace prism::quant
