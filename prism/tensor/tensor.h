// Tensor: a symbolic value with tagged dimensions, recorded into a graph while a function is
// traced (see prism/runtime/compile.h). Ops address dimensions by tag:
//
//   auto y = x.dot(w, "d").softmax("k");          // contract "d", softmax over "k"
//   auto q = x.split("d", {{"h", 32}, {"hd", -1}}); // reshape by name
//
// Elementwise ops broadcast by tag (a missing tag is broadcast; the same tag with two sizes is
// an error). Every error names the op, the tags and the sizes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "prism/core/host_buffer.h"
#include "prism/core/mesh.h"
#include "prism/core/shape.h"
#include "prism/ir/graph.h"

namespace prism {

// One or several tags: x.sum("d"), x.sum({"h", "d"}).
class TagList {
 public:
  TagList(Tag t) : tags_{t} {}                                // NOLINT
  TagList(const char* t) : tags_{Tag(t)} {}                   // NOLINT
  TagList(std::initializer_list<Tag> tags) : tags_(tags) {}   // NOLINT
  TagList(std::vector<Tag> tags) : tags_(std::move(tags)) {}  // NOLINT
  auto begin() const { return tags_.begin(); }
  auto end() const { return tags_.end(); }
  size_t size() const { return tags_.size(); }
  Tag operator[](size_t i) const { return tags_[i]; }
  std::string str() const;

 private:
  std::vector<Tag> tags_;
};

class Tracer;

class Tensor {
 public:
  Tensor() = default;

  // A named weight. It can be created outside any trace (a model's constructor does that) and
  // becomes a parameter of each graph it is used in. `sharding` says how it is split when the
  // graph runs on a mesh (docs/sharding.md); on one device it changes nothing.
  static Tensor parameter(std::string name, const Shape& shape, const Sharding& sharding = {});
  static Tensor scalar(double value, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value);
  static Tensor zeros(const Shape& shape) { return full(shape, 0); }
  static Tensor constant(const HostBuffer& data);
  static Tensor iota(const Shape& shape, Tag axis);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return shape_.dtype(); }
  int rank() const { return shape_.rank(); }
  int64_t size(Tag tag) const { return shape_.size(tag); }
  bool has(Tag tag) const { return shape_.has(tag); }
  bool valid() const { return id_ >= 0 || param_; }
  // The node of this value in the current trace (parameters are added on first use).
  ir::ValueId id() const;

  // Elementwise, one operand.
  Tensor operator-() const { return neg(); }
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor tanh() const;
  Tensor logistic() const;  // sigmoid
  Tensor sin() const;
  Tensor cos() const;
  Tensor erf() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;  // half to even
  Tensor sign() const;
  Tensor logical_not() const;
  Tensor is_nan() const;
  Tensor convert(DType dtype) const;
  // Common activations, written with the primitives above.
  Tensor relu() const;
  Tensor silu() const;
  Tensor gelu(bool tanh_approximation = false) const;

  // Reductions over one or several tags (removed from the result).
  Tensor sum(TagList tags) const;
  Tensor mean(TagList tags) const;
  Tensor max(TagList tags) const;
  Tensor min(TagList tags) const;
  Tensor prod(TagList tags) const;
  Tensor argmax(Tag tag, DType index_dtype = DType::i32) const;
  Tensor argmin(Tag tag, DType index_dtype = DType::i32) const;

  // Contracts `tags`; every other tag in both is a batch tag. Result: batch tags, then this
  // tensor's free tags, then other's.
  Tensor dot(const Tensor& other, TagList contract) const;

  // Shape by name.
  Tensor transpose(TagList order) const;
  Tensor rename(std::initializer_list<std::pair<Tag, Tag>> renames) const;
  Tensor rename(std::span<const std::pair<Tag, Tag>> renames) const;
  Tensor split(Tag tag, std::initializer_list<Dim> parts) const;  // one part may be -1
  Tensor split(Tag tag, std::span<const Dim> parts) const;
  Tensor merge(TagList tags, Tag into) const;  // the tags must be adjacent, in this order
  Tensor reshape(const Shape& shape) const;    // row-major reinterpretation, same numel
  // Adds the tags of `shape` this tensor lacks, in `shape`'s order.
  Tensor broadcast_to(const Shape& shape) const;
  // Inserts a new tag of size `size` at position `axis` (broadcast).
  Tensor insert(Tag tag, int64_t size, int axis = 0) const;

  Tensor slice(Tag tag, int64_t start, int64_t length, int64_t stride = 1) const;
  Tensor dynamic_slice(Tag tag, const Tensor& start, int64_t length) const;
  // Writes `update` (same tags, smaller sizes) at `starts` (tags not named start at 0).
  Tensor dynamic_update_slice(const Tensor& update,
                              std::initializer_list<std::pair<Tag, Tensor>> starts) const;
  // Index select: replaces `tag` by the tags of `indices` (an embedding lookup).
  Tensor gather(Tag tag, const Tensor& indices) const;
  // Picks along `tag` with indices that have this tensor's tags (`tag` may differ in size).
  Tensor take_along(Tag tag, const Tensor& indices) const;
  Tensor scatter(Tag tag, const Tensor& indices, const Tensor& updates,
                 ir::ScatterReduce reduce = ir::ScatterReduce::none) const;
  Tensor pad(Tag tag, int64_t low, int64_t high, double value = 0,
             ir::PadMode mode = ir::PadMode::constant) const;
  Tensor cumsum(Tag tag, bool exclusive = false, bool reverse = false) const;
  // The k largest (or smallest) along `tag`, sorted, ties to the lower index: values, indices.
  std::pair<Tensor, Tensor> top_k(Tag tag, int64_t k, bool largest = true,
                                  DType index_dtype = DType::i32) const;

  // Composites.
  Tensor softmax(Tag tag) const;
  Tensor log_softmax(Tag tag) const;
  Tensor rms_norm(TagList tags, double eps) const;
  // Weights kept in one of ggml's quantized block formats: this tensor holds bytes (u8), whole
  // blocks of `format` along its last tag (a GGUF tensor's rows); the result holds their values
  // in `dtype`, the last tag's size now the values' count (Q8_0: 34 bytes -> 32 values).
  Tensor dequantize(quant::GgmlType format, DType dtype) const;
  Tensor layer_norm(TagList tags, double eps) const;

 private:
  friend class Tracer;
  friend Tensor make_node(ir::Node node);
  Shape shape_;
  ir::ValueId id_ = -1;
  uint64_t trace_ = 0;  // which trace id_ belongs to
  // A parameter declared outside a trace: its name and Sharding::str() (or "").
  std::shared_ptr<const ir::ParameterAttrs> param_;
};

// Binary elementwise ops, broadcasting by tag. Scalars take the tensor's dtype.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor rem(const Tensor& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor select(const Tensor& cond, const Tensor& on_true, const Tensor& on_false);
Tensor concat(std::span<const Tensor> tensors, Tag tag);
inline Tensor concat(std::initializer_list<Tensor> tensors, Tag tag) {
  return concat(std::span<const Tensor>(tensors.begin(), tensors.size()), tag);
}

// Convolution by tags: `input` has `batch`, `channels` and the spatial tags; `kernel` has
// `out_channels`, `channels` (input channels / groups) and the same spatial tags. The result
// has the tags batch, out_channels, then the spatial tags.
struct ConvOptions {
  Tag batch = "b";
  Tag channels = "c";
  Tag out_channels = "o";
  std::vector<Tag> spatial;        // e.g. {"h", "w"}
  std::vector<int64_t> strides;    // default 1
  std::vector<int64_t> pad_low;    // default 0
  std::vector<int64_t> pad_high;   // default 0
  std::vector<int64_t> dilations;  // default 1
  int64_t groups = 1;
};
Tensor conv(const Tensor& input, const Tensor& kernel, const ConvOptions& options);

// Emits a node into the current trace and returns its value (for op implementations).
Tensor make_node(ir::Node node);

}  // namespace prism
