// Tag: an interned dimension name ("b", "s", "d"), compared as an integer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace prism {

class Tag {
 public:
  constexpr Tag() = default;                              // the empty tag: an unnamed dimension
  Tag(const char* name) : Tag(std::string_view(name)) {}  // NOLINT: tags read like names
  Tag(std::string_view name);                             // NOLINT
  Tag(const std::string& name) : Tag(std::string_view(name)) {}  // NOLINT

  bool empty() const { return id_ == 0; }
  uint32_t id() const { return id_; }
  const std::string& str() const;  // "_" for the empty tag

  friend bool operator==(Tag a, Tag b) { return a.id_ == b.id_; }
  friend bool operator!=(Tag a, Tag b) { return a.id_ != b.id_; }
  friend bool operator<(Tag a, Tag b) { return a.id_ < b.id_; }

 private:
  uint32_t id_ = 0;
};

}  // namespace prism

template <>
struct std::hash<prism::Tag> {
  size_t operator()(prism::Tag t) const noexcept { return t.id(); }
};
