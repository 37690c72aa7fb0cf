// Shape: a dtype and up to 8 dimensions, each a (tag, size) pair.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prism/core/dtype.h"
#include "prism/core/tag.h"

namespace prism {

inline constexpr int kMaxRank = 8;

struct Dim {
  Tag tag;
  int64_t size = 0;
};

class Shape {
 public:
  Shape() = default;
  // `op` names the caller in errors (duplicate tag, rank > 8, negative size).
  Shape(DType dtype, std::span<const Dim> dims, std::string_view op = "shape");
  Shape(DType dtype, std::initializer_list<Dim> dims) : Shape(dtype, std::span(dims)) {}
  static Shape scalar(DType dtype) { return Shape(dtype, std::span<const Dim>{}); }

  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t size(int axis) const { return dims_[axis].size; }
  Tag tag(int axis) const { return dims_[axis].tag; }
  const Dim& dim(int axis) const { return dims_[axis]; }
  std::span<const Dim> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  std::vector<int64_t> sizes() const;

  // Position of `tag`, or -1.
  int find(Tag tag) const;
  bool has(Tag tag) const { return find(tag) >= 0; }
  // Position of `tag`; throws `op: unknown tag "x" in {a=2,b=3}` when absent.
  int axis(Tag tag, std::string_view op) const;
  int64_t size(Tag tag) const { return dims_[axis(tag, "size")].size; }

  int64_t numel() const;
  int64_t bytes() const { return numel() * size_of(dtype_); }

  Shape with_dtype(DType dtype) const;
  // Row-major strides in elements.
  std::array<int64_t, kMaxRank> strides() const;

  // "{s=7,d=4096}" and "f32{s=7,d=4096}".
  std::string dims_str() const;
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b);
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  bool same_dims(const Shape& other) const;  // sizes and tags, ignoring dtype

 private:
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<Dim, kMaxRank> dims_{};
};

}  // namespace prism
