#include "prism/core/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "prism/core/error.h"

namespace prism {

Mesh::Mesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  for (size_t i = 0; i < axes_.size(); ++i) {
    PRISM_CHECK(!axes_[i].name.empty(), "mesh: an axis has no name");
    // Axis names travel into compiled modules (Shardy's meshes) and collective groups' names.
    const bool word = std::all_of(axes_[i].name.begin(), axes_[i].name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    PRISM_CHECK(word, "mesh: axis name '{}' is not a word (letters, digits and _)", axes_[i].name);
    PRISM_CHECK(axes_[i].size >= 1, "mesh: axis '{}' has size {} (at least 1)", axes_[i].name,
                axes_[i].size);
    for (size_t j = 0; j < i; ++j) {
      PRISM_CHECK(axes_[j].name != axes_[i].name, "mesh: axis '{}' is named twice", axes_[i].name);
    }
  }
}

Mesh Mesh::parse(std::string_view text) {
  std::vector<MeshAxis> axes;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    size_t colon = item.find(':');
    int64_t size = 0;
    const char* end = item.data() + item.size();
    if (colon == std::string_view::npos || colon == 0 ||
        std::from_chars(item.data() + colon + 1, end, size).ptr != end ||
        colon + 1 == item.size()) {
      fail("mesh: '{}' is not an axis and its size (as in model:2)", item);
    }
    axes.push_back({std::string(item.substr(0, colon)), size});
  }
  return Mesh(std::move(axes));
}

int64_t Mesh::devices() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

std::optional<int> Mesh::find(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == axis) return static_cast<int>(i);
  }
  return std::nullopt;
}

int64_t Mesh::coordinate(int64_t device, int axis) const {
  return device / stride(axis) % axes_[axis].size;
}

int64_t Mesh::stride(int axis) const {
  int64_t stride = 1;
  for (int a = static_cast<int>(axes_.size()) - 1; a > axis; --a) stride *= axes_[a].size;
  return stride;
}

std::vector<std::vector<int64_t>> Mesh::groups(int axis) const {
  const int64_t size = axes_.at(static_cast<size_t>(axis)).size, step = stride(axis);
  std::vector<std::vector<int64_t>> groups;
  for (int64_t first = 0; first < devices(); ++first) {
    if (coordinate(first, axis) != 0) continue;
    std::vector<int64_t>& members = groups.emplace_back();
    for (int64_t c = 0; c < size; ++c) members.push_back(first + c * step);
  }
  return groups;
}

std::string Mesh::str() const {
  std::vector<std::string> parts;
  for (const MeshAxis& a : axes_) parts.push_back(fmt::format("{}={}", a.name, a.size));
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

Sharding& Sharding::split(Tag tag, std::string axis, int64_t unit) {
  PRISM_CHECK(!axis.empty(), "sharding: tag '{}' is split over an unnamed axis", tag.str());
  PRISM_CHECK(unit >= 1, "sharding: tag '{}' is split in blocks of {}", tag.str(), unit);
  for (const Split& s : splits_) {
    PRISM_CHECK(s.tag != tag, "sharding: tag '{}' is split twice", tag.str());
    PRISM_CHECK(s.axis != axis, "sharding: tags '{}' and '{}' are both split over axis '{}'",
                s.tag.str(), tag.str(), axis);
  }
  splits_.push_back({tag, std::move(axis), unit, false});
  return *this;
}

Sharding& Sharding::split_if_divisible(Tag tag, std::string axis, int64_t unit) {
  split(tag, std::move(axis), unit);
  splits_.back().optional = true;
  return *this;
}

std::vector<int> Sharding::resolve(const Shape& shape, const Mesh& mesh,
                                   std::string_view what) const {
  std::vector<int> axes(shape.rank(), -1);
  for (const Split& s : splits_) {
    int dim = shape.find(s.tag);
    PRISM_CHECK(dim >= 0, "{}: split tag '{}' is not one of {}", what, s.tag.str(), shape.str());
    std::optional<int> a = mesh.find(s.axis);
    if (!a) continue;
    const int64_t n = mesh.axes()[*a].size;
    if (shape.size(dim) % (n * s.unit) != 0) {
      if (s.optional) continue;
      if (s.unit == 1) {
        fail("{}: tag '{}' of size {} does not divide by mesh axis '{}' of {} devices", what,
             s.tag.str(), shape.size(dim), s.axis, n);
      }
      fail(
          "{}: tag '{}' of size {} does not divide by mesh axis '{}' of {} devices in blocks of {}",
          what, s.tag.str(), shape.size(dim), s.axis, n, s.unit);
    }
    axes[dim] = *a;
  }
  return axes;
}

std::string Sharding::str() const {
  std::vector<std::string> parts;
  for (const Split& s : splits_) {
    parts.push_back(fmt::format("{}:{}{}{}", s.tag.str(), s.axis,
                                s.unit == 1 ? "" : fmt::format("/{}", s.unit),
                                s.optional ? "?" : ""));
  }
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

Sharding Sharding::parse(std::string_view text) {
  PRISM_CHECK(text.size() >= 2 && text.front() == '{' && text.back() == '}',
              "sharding: '{}' is not of the form {{tag:axis,...}}", text);
  text = text.substr(1, text.size() - 2);
  Sharding s;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    size_t colon = item.find(':');
    PRISM_CHECK(colon != std::string_view::npos && colon > 0, "sharding: '{}' is not tag:axis",
                item);
    std::string_view axis = item.substr(colon + 1);
    const bool optional = !axis.empty() && axis.back() == '?';
    if (optional) axis.remove_suffix(1);
    int64_t unit = 1;
    if (size_t slash = axis.find('/'); slash != std::string_view::npos) {
      const char* end = axis.data() + axis.size();
      PRISM_CHECK(std::from_chars(axis.data() + slash + 1, end, unit).ptr == end,
                  "sharding: '{}' has no block size after /", item);
      axis = axis.substr(0, slash);
    }
    s.split(Tag(item.substr(0, colon)), std::string(axis), unit);
    s.splits_.back().optional = optional;
  }
  return s;
}

Shape local_shape(const Shape& shape, const std::vector<int>& axes, const Mesh& mesh) {
  std::vector<Dim> dims(shape.dims().begin(), shape.dims().end());
  for (size_t d = 0; d < dims.size() && d < axes.size(); ++d) {
    if (axes[d] >= 0) dims[d].size /= mesh.axes()[axes[d]].size;
  }
  return Shape(shape.dtype(), dims);
}

}  // namespace prism
