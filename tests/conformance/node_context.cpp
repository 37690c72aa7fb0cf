#include "tests/conformance/node_context.h"

#include <algorithm>
#include <array>

#include "prism/core/error.h"

namespace prism::conformance {

const HostBuffer& NodeContext::value(int i) const {
  PRISM_CHECK(has_input(i), "{}: input {} is missing", op(), i);
  return *values_[i];
}

std::vector<int64_t> NodeContext::ints(int i) const {
  const HostBuffer& v = value(i);
  PRISM_CHECK(is_integer(v.dtype()), "{}: input {} must be integers, got {}", op(), i,
              v.shape().str());
  std::vector<int64_t> out;
  for (double d : v.to_f64()) out.push_back(static_cast<int64_t>(d));
  return out;
}

double NodeContext::scalar(int i) const {
  std::vector<double> v = value(i).to_f64();
  PRISM_CHECK(v.size() == 1, "{}: input {} must hold one value, got {}", op(), i,
              value(i).shape().str());
  return v[0];
}

std::vector<int64_t> NodeContext::dims(int i) const { return value(i).shape().sizes(); }

Tensor NodeContext::input(int i) const {
  PRISM_CHECK(i < static_cast<int>(traced_.size()) && traced_[i].valid(),
              "{}: input {} is not available as a tensor", op(), i);
  return traced_[i];
}

int64_t NodeContext::attr_int(std::string_view name, int64_t fallback) const {
  const onnx::Attribute* a = attr(name);
  return a ? a->i : fallback;
}

float NodeContext::attr_float(std::string_view name, float fallback) const {
  const onnx::Attribute* a = attr(name);
  return a ? a->f : fallback;
}

std::string NodeContext::attr_string(std::string_view name, std::string fallback) const {
  const onnx::Attribute* a = attr(name);
  return a ? a->s : fallback;
}

std::vector<int64_t> NodeContext::attr_ints(std::string_view name,
                                            std::vector<int64_t> fallback) const {
  const onnx::Attribute* a = attr(name);
  return a ? a->ints : fallback;
}

void NodeContext::expect_attributes(std::initializer_list<std::string_view> known) const {
  for (const onnx::Attribute& a : node_.attributes) {
    if (std::find(known.begin(), known.end(), a.name) == known.end()) {
      unsupported("{}: attribute \"{}\" is not modelled", op(), a.name);
    }
  }
}

const OpTable& op_table() {
  static const OpTable table = [] {
    OpTable t;
    register_elementwise_ops(t);
    register_activation_ops(t);
    register_reduce_ops(t);
    register_shape_ops(t);
    register_index_ops(t);
    register_nn_ops(t);
    register_pool_ops(t);
    register_loss_ops(t);
    register_misc_ops(t);
    register_training_ops(t);
    register_resize_ops(t);
    register_conv_ops(t);
    register_recurrent_ops(t);
    register_sampling_ops(t);
    return t;
  }();
  return table;
}

const OpBuilder* find_builder(const onnx::Node& node) {
  bool default_domain = node.domain.empty() || node.domain == "ai.onnx";
  auto it = op_table().find(default_domain ? node.op_type : node.domain + "." + node.op_type);
  return it == op_table().end() ? nullptr : &it->second;
}

// --- Positional tags --------------------------------------------------------------------------

Tag axis_tag(int axis, int rank) {
  static const std::array<Tag, kMaxRank> kTags = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"};
  int from_right = rank - 1 - axis;
  PRISM_CHECK(from_right >= 0 && from_right < kMaxRank, "axis {} out of range for rank {}", axis,
              rank);
  return kTags[from_right];
}

Shape positional_shape(DType dtype, const std::vector<int64_t>& sizes) {
  if (sizes.size() > static_cast<size_t>(kMaxRank)) {
    unsupported("rank {} exceeds prism's maximum of {}", sizes.size(), kMaxRank);
  }
  std::vector<Dim> dims;
  int rank = static_cast<int>(sizes.size());
  for (int i = 0; i < rank; ++i) dims.push_back({axis_tag(i, rank), sizes[i]});
  return Shape(dtype, dims);
}

std::vector<int64_t> sizes_of(const Tensor& t) { return t.shape().sizes(); }

Tensor positional(const Tensor& t) { return t.reshape(positional_shape(t.dtype(), sizes_of(t))); }

Tensor reshape_to(const Tensor& t, const std::vector<int64_t>& sizes) {
  return t.reshape(positional_shape(t.dtype(), sizes));
}

int normalize_axis(int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  PRISM_CHECK(a >= 0 && a < std::max(rank, 1), "axis {} out of range for rank {}", axis, rank);
  return static_cast<int>(a);
}

std::vector<int64_t> broadcast_sizes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      PRISM_CHECK(o == 1, "broadcast: sizes {} and {} do not broadcast", o, s[i]);
      o = s[i];
    }
  }
  return out;
}

Tensor broadcast_to_sizes(const Tensor& t, const std::vector<int64_t>& sizes) {
  return positional(t).broadcast_to(positional_shape(t.dtype(), sizes));
}

std::vector<Tensor> broadcast_all(std::vector<Tensor> tensors) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor& t : tensors) shapes.push_back(sizes_of(t));
  std::vector<int64_t> out = broadcast_sizes(shapes);
  for (Tensor& t : tensors) t = broadcast_to_sizes(t, out);
  return tensors;
}

Tensor with_tags(const Tensor& x, const std::vector<Tag>& tags) {
  std::vector<Dim> dims;
  for (size_t i = 0; i < tags.size(); ++i) dims.push_back({tags[i], x.shape().size(int(i))});
  return x.reshape(Shape(x.dtype(), dims));
}

Tensor per_channel(const Tensor& v, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size() - 1, 1);
  s[0] = v.shape().size(0);
  return broadcast_to_sizes(reshape_to(v, s), sizes);
}

namespace {

double lowest(DType t) { return t == DType::u8 ? 0 : t == DType::i8 ? -128 : -2147483648.0; }
double highest(DType t) { return t == DType::u8 ? 255 : t == DType::i8 ? 127 : 2147483647.0; }

}  // namespace

Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, DType to) {
  Tensor q = (x / scale).round() + zero_point.convert(x.dtype());
  q = minimum(maximum(q, Tensor::scalar(lowest(to), x.dtype())),
              Tensor::scalar(highest(to), x.dtype()));
  return q.convert(to);
}

// --- Element types ----------------------------------------------------------------------------

DType to_dtype(onnx::ElemType t) {
  using E = onnx::ElemType;
  switch (t) {
    case E::float32:
      return DType::f32;
    case E::float64:
      return DType::f64;
    case E::float16:
      return DType::f16;
    case E::bfloat16:
      return DType::bf16;
    case E::int64:
      return DType::i64;
    case E::int32:
      return DType::i32;
    case E::int16:
      return DType::i16;
    case E::int8:
      return DType::i8;
    case E::uint8:
      return DType::u8;
    case E::uint32:
      return DType::u32;
    case E::boolean:
      return DType::boolean;
    default:
      unsupported("element type {} has no prism dtype", onnx::elem_type_name(t));
  }
}

HostBuffer to_host_buffer(const onnx::TensorProto& t) {
  if (t.external) unsupported("tensor \"{}\" keeps its data in an external file", t.name);
  DType dtype = to_dtype(t.type);
  Shape shape = positional_shape(dtype, t.dims);
  return HostBuffer(shape, std::as_bytes(std::span(t.data)));
}

}  // namespace prism::conformance
