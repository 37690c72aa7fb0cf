// Element storage types and their conversion to the types kernels compute in: f64 in double,
// f32/f16/bf16 in float, integers and bool in int64_t.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "prism/core/dtype.h"
#include "prism/core/error.h"

namespace prism::cpu {

struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
struct Bool {
  uint8_t value;
};

// Storage -> compute.
template <typename T, typename S>
inline T to_compute(S s) {
  if constexpr (std::is_same_v<S, F16>) {
    return static_cast<T>(f16_to_f32(s.bits));
  } else if constexpr (std::is_same_v<S, BF16>) {
    return static_cast<T>(bf16_to_f32(s.bits));
  } else if constexpr (std::is_same_v<S, Bool>) {
    return static_cast<T>(s.value != 0);
  } else {
    return static_cast<T>(s);
  }
}

// Compute -> storage: halves round to nearest even; float -> integer truncates toward zero
// and saturates (NaN becomes 0) instead of being undefined.
template <typename S, typename T>
inline S to_storage(T v) {
  if constexpr (std::is_same_v<S, F16>) {
    return F16{f32_to_f16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<S, BF16>) {
    return BF16{f32_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<S, Bool>) {
    return Bool{static_cast<uint8_t>(v != 0)};
  } else if constexpr (std::is_integral_v<S> && std::is_floating_point_v<T>) {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<T>(std::numeric_limits<S>::min())) return std::numeric_limits<S>::min();
    if (v >= static_cast<T>(std::numeric_limits<S>::max())) return std::numeric_limits<S>::max();
    return static_cast<S>(v);
  } else {
    return static_cast<S>(v);
  }
}

// Calls f(S{}) with the storage type of `t`.
template <typename F>
inline decltype(auto) visit_storage(DType t, F&& f) {
  switch (t) {
    case DType::f64:
      return f(double{});
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(F16{});
    case DType::bf16:
      return f(BF16{});
    case DType::i64:
      return f(int64_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i16:
      return f(int16_t{});
    case DType::i8:
      return f(int8_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::u32:
      return f(uint32_t{});
    case DType::boolean:
      return f(Bool{});
  }
  fail("cpu: unknown dtype");
}

// The compute class of a dtype.
enum class Class : uint8_t { f64, f32, i64 };
inline Class class_of(DType t) {
  if (t == DType::f64) return Class::f64;
  if (is_float(t)) return Class::f32;
  return Class::i64;
}

// Calls f(T{}) with the compute type of `c`.
template <typename F>
inline decltype(auto) visit_class(Class c, F&& f) {
  switch (c) {
    case Class::f64:
      return f(double{});
    case Class::f32:
      return f(float{});
    case Class::i64:
      return f(int64_t{});
  }
  fail("cpu: unknown compute class");
}

// Reads element `i` of an array of dtype `t` as double (slow paths and indices).
inline double load_f64(DType t, const std::byte* p, int64_t i) {
  return visit_storage(t, [&](auto s) {
    using S = decltype(s);
    return to_compute<double>(reinterpret_cast<const S*>(p)[i]);
  });
}
inline int64_t load_index(DType t, const std::byte* p, int64_t i) {
  return visit_storage(t, [&](auto s) -> int64_t {
    using S = decltype(s);
    if constexpr (std::is_integral_v<S>) {
      return static_cast<int64_t>(reinterpret_cast<const S*>(p)[i]);
    } else {
      return static_cast<int64_t>(to_compute<double>(reinterpret_cast<const S*>(p)[i]));
    }
  });
}

}  // namespace prism::cpu
