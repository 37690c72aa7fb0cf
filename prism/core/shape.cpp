#include "prism/core/shape.h"

#include "prism/core/error.h"

namespace prism {

Shape::Shape(DType dtype, std::span<const Dim> dims, std::string_view op) : dtype_(dtype) {
  if (dims.size() > kMaxRank) {
    std::string s;
    for (const Dim& d : dims)
      s += fmt::format("{}{}={}", s.empty() ? "" : ",", d.tag.str(), d.size);
    fail("{}: rank {} exceeds the maximum of {} in {{{}}}", op, dims.size(), kMaxRank, s);
  }
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    dims_[i] = dims[i];
    if (dims[i].size < 0) {
      fail("{}: negative size {} for tag \"{}\"", op, dims[i].size, dims[i].tag.str());
    }
  }
  for (int i = 0; i < rank_; ++i) {
    for (int j = i + 1; j < rank_; ++j) {
      if (!dims_[i].tag.empty() && dims_[i].tag == dims_[j].tag) {
        fail("{}: duplicate tag \"{}\" in {}", op, dims_[i].tag.str(), dims_str());
      }
    }
  }
}

std::vector<int64_t> Shape::sizes() const {
  std::vector<int64_t> s(rank_);
  for (int i = 0; i < rank_; ++i) s[i] = dims_[i].size;
  return s;
}

int Shape::find(Tag tag) const {
  if (tag.empty()) return -1;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i].tag == tag) return i;
  }
  return -1;
}

int Shape::axis(Tag tag, std::string_view op) const {
  int a = find(tag);
  if (a < 0) fail("{}: unknown tag \"{}\" in {}", op, tag.str(), dims_str());
  return a;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i].size;
  return n;
}

Shape Shape::with_dtype(DType dtype) const {
  Shape s = *this;
  s.dtype_ = dtype;
  return s;
}

std::array<int64_t, kMaxRank> Shape::strides() const {
  std::array<int64_t, kMaxRank> s{};
  int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= dims_[i].size;
  }
  return s;
}

std::string Shape::dims_str() const {
  std::string s = "{";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ",";
    s += fmt::format("{}={}", dims_[i].tag.str(), dims_[i].size);
  }
  return s + "}";
}

std::string Shape::str() const { return std::string(name(dtype_)) + dims_str(); }

bool Shape::same_dims(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i].tag != o.dims_[i].tag || dims_[i].size != o.dims_[i].size) return false;
  }
  return true;
}

bool operator==(const Shape& a, const Shape& b) { return a.dtype_ == b.dtype_ && a.same_dims(b); }

}  // namespace prism
