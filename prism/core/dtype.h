// Element types. One table (kDTypeInfo) describes them all.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "prism/core/error.h"

namespace prism {

enum class DType : uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u8, u32, boolean };
inline constexpr int kNumDTypes = 11;

struct DTypeInfo {
  std::string_view name;
  int size;  // bytes per element
  bool is_float;
  bool is_signed;
};

inline constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    {"f64", 8, true, true},   {"f32", 4, true, true},    {"f16", 2, true, true},
    {"bf16", 2, true, true},  {"i64", 8, false, true},   {"i32", 4, false, true},
    {"i16", 2, false, true},  {"i8", 1, false, true},    {"u8", 1, false, false},
    {"u32", 4, false, false}, {"bool", 1, false, false},
};

constexpr const DTypeInfo& info(DType t) { return kDTypeInfo[static_cast<int>(t)]; }
constexpr int size_of(DType t) { return info(t).size; }
constexpr std::string_view name(DType t) { return info(t).name; }
constexpr bool is_float(DType t) { return info(t).is_float; }
constexpr bool is_integer(DType t) { return !info(t).is_float && t != DType::boolean; }

// Calls f with a value of the C++ type of integer dtype `t` (int64_t, int32_t, ..., uint8_t);
// throws prism::Error for any other dtype.
template <typename F>
auto with_integer_type(DType t, F&& f) {
  switch (t) {
    case DType::i64:
      return f(int64_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i16:
      return f(int16_t{});
    case DType::i8:
      return f(int8_t{});
    case DType::u32:
      return f(uint32_t{});
    case DType::u8:
      return f(uint8_t{});
    default:
      fail("{} is not an integer dtype", name(t));
  }
}

// Parses "f32", "bf16", ...; throws prism::Error on an unknown name.
DType dtype_from_name(std::string_view name);

// Half-precision conversions (round to nearest even), used wherever f16/bf16 are computed
// in f32.
inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace prism
