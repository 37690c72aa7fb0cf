// Meshes and shardings: how one model is split across devices.
//
// A Mesh is the devices arranged along named axes, `{"model", 2}` or `{"data", 2}, {"model", 4}`
// (device k's coordinates are k in row-major order, the last axis fastest). A Sharding says
// which tags of one tensor are split over which mesh axes; every other tag is replicated:
//
//   Tensor::parameter("mlp.up_proj.weight", shape, Sharding().split("f", "model"));
//
// Device k then holds the k-th contiguous block of `f` along "model". A sharding naming an axis
// the mesh lacks leaves that tag whole, so a model annotated for tensor parallelism runs
// unchanged on one device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prism/core/shape.h"

namespace prism {

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshAxis&) const = default;
};

class Mesh {
 public:
  Mesh() = default;  // one device, no axes
  // Throws on an empty or repeated axis name or a size below 1.
  explicit Mesh(std::vector<MeshAxis> axes);
  // "model:2" or "data:2,model:4".
  static Mesh parse(std::string_view text);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int64_t devices() const;  // the product of the axes' sizes
  // The position of `axis`, or nullopt.
  std::optional<int> find(std::string_view axis) const;
  // Device `device`'s coordinate along axis `axis` (an index into axes()).
  int64_t coordinate(int64_t device, int axis) const;
  // How far apart two devices that differ by one along axis `axis` (and nowhere else) are:
  // the devices of device d's group along that axis are d - c * stride, ..., c its coordinate.
  int64_t stride(int axis) const;
  // The groups of devices that differ only along axis `axis`: each group's devices in the
  // order of their coordinate along it, the groups in the order of their first device. Every
  // walk over a mesh's collective groups takes this order (forming them across processes is
  // collective, so every process must take the same one).
  std::vector<std::vector<int64_t>> groups(int axis) const;
  // "{model=2}", "{data=2,model=4}", "{}" for one device.
  std::string str() const;
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<MeshAxis> axes_;
};

class Sharding {
 public:
  struct Split {
    Tag tag;
    std::string axis;
    int64_t unit = 1;       // the tag is cut only between blocks of this many elements
    bool optional = false;  // where it does not divide, the tag stays whole instead
    bool operator==(const Split&) const = default;
  };

  Sharding() = default;  // replicated
  // Splits `tag` over mesh axis `axis`, in blocks of `unit` elements (a projection's outputs
  // split by heads: unit = the head size). Throws when the tag is already split, or another
  // tag is already split over the same axis.
  Sharding& split(Tag tag, std::string axis, int64_t unit = 1);
  // The same, except that where the size does not divide into the axis' devices (GQA's
  // key/value heads on more devices than there are heads), the tag stays whole.
  Sharding& split_if_divisible(Tag tag, std::string axis, int64_t unit = 1);

  const std::vector<Split>& splits() const { return splits_; }
  bool replicated() const { return splits_.empty(); }

  // Per positional dim of `shape`, the index of the mesh axis it is split over, or -1; axes the
  // mesh does not have leave their tags whole. Throws, naming `what`, the tag, its size and the
  // axis, when a tag is not in `shape` or its size does not divide by the axis.
  std::vector<int> resolve(const Shape& shape, const Mesh& mesh, std::string_view what) const;

  // "{f:model}", "{o:model/64?}" (in blocks of 64, optional); "{}" when replicated. parse()
  // reads it back.
  std::string str() const;
  static Sharding parse(std::string_view text);
  bool operator==(const Sharding&) const = default;

 private:
  std::vector<Split> splits_;
};

// The shape one device holds of `shape` split as `axes` (Sharding::resolve's result) says.
Shape local_shape(const Shape& shape, const std::vector<int>& axes, const Mesh& mesh);

}  // namespace prism
