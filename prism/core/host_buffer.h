// HostBuffer: an owned, aligned array of elements in host memory with a Shape. The way data
// enters and leaves the runtime (inputs, outputs, constants, test vectors).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "prism/core/error.h"
#include "prism/core/shape.h"

namespace prism {

// The C++ element type of each DType, for typed access.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  if constexpr (std::is_same_v<T, int16_t>) return DType::i16;
  if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  if constexpr (std::is_same_v<T, uint32_t>) return DType::u32;
  if constexpr (std::is_same_v<T, bool>) return DType::boolean;
}

// Converts n elements between dtypes (round to nearest even for halves, integers truncate).
void convert_elements(DType from, const std::byte* src, DType to, std::byte* dst, int64_t n);

class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(Shape shape);  // zero-filled
  HostBuffer(Shape shape, std::span<const std::byte> bytes);

  template <typename T>
  static HostBuffer from(Shape shape, std::span<const T> values) {
    shape = shape.with_dtype(dtype_of<T>());
    PRISM_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
                "HostBuffer: {} values for shape {} of {} elements", values.size(), shape.str(),
                shape.numel());
    return HostBuffer(shape, std::as_bytes(values));
  }
  template <typename T>
  static HostBuffer from(Shape shape, std::initializer_list<T> values) {
    return from(shape, std::span<const T>(values.begin(), values.size()));
  }
  template <typename T>
  static HostBuffer from(Shape shape, const std::vector<T>& values) {
    return from(shape, std::span<const T>(values));
  }

  const Shape& shape() const { return shape_; }
  DType dtype() const { return shape_.dtype(); }
  int64_t numel() const { return shape_.numel(); }
  size_t size_bytes() const { return static_cast<size_t>(shape_.bytes()); }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::span<const std::byte> bytes() const { return {data_.get(), size_bytes()}; }
  std::span<std::byte> bytes() { return {data_.get(), size_bytes()}; }

  // Typed views; the element type must match the dtype.
  template <typename T>
  std::span<T> as() {
    check_type(dtype_of<T>());
    return {reinterpret_cast<T*>(data_.get()), static_cast<size_t>(numel())};
  }
  template <typename T>
  std::span<const T> as() const {
    check_type(dtype_of<T>());
    return {reinterpret_cast<const T*>(data_.get()), static_cast<size_t>(numel())};
  }
  // Values converted to double, whatever the dtype (f16/bf16 included): for tests and printing.
  std::vector<double> to_f64() const;
  // A copy converted to another dtype (round to nearest even for halves; ints truncate).
  HostBuffer convert(DType dtype) const;
  // Same bytes, new dims (same number of elements).
  HostBuffer reshaped(const Shape& shape) const;

 private:
  void check_type(DType t) const;

  Shape shape_;
  std::shared_ptr<std::byte> data_;  // shared: copies of a HostBuffer are cheap views
};

}  // namespace prism
