// What an op builder sees of one ONNX node: its attributes, the host values of its inputs
// (known before tracing, so shapes, axes and pads given as inputs are plain numbers), and its
// inputs as traced Tensors. Builders turn the node into prism ops; a node prism cannot express
// throws Unsupported, which skips the test case with that reason.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/host_buffer.h"
#include "prism/tensor/tensor.h"
#include "tests/conformance/onnx_proto.h"

namespace prism::conformance {

// A node (or a value) that prism cannot express; the message says why.
class Unsupported : public std::runtime_error {
 public:
  explicit Unsupported(const std::string& why) : std::runtime_error(why) {}
};
template <typename... Args>
[[noreturn]] void unsupported(fmt::format_string<Args...> format, Args&&... args) {
  throw Unsupported(fmt::format(format, std::forward<Args>(args)...));
}

class NodeContext {
 public:
  NodeContext(const onnx::Node& node, int64_t opset, std::vector<std::optional<HostBuffer>> inputs)
      : node_(node), opset_(opset), values_(std::move(inputs)) {}

  const onnx::Node& node() const { return node_; }
  const std::string& op() const { return node_.op_type; }
  int64_t opset() const { return opset_; }
  int num_outputs() const { return static_cast<int>(node_.outputs.size()); }
  bool wants_output(int i) const { return i < num_outputs() && !node_.outputs[i].empty(); }

  // Inputs. Optional inputs may be omitted (has_input is false).
  int num_inputs() const { return static_cast<int>(values_.size()); }
  bool has_input(int i) const { return i < num_inputs() && values_[i].has_value(); }
  const HostBuffer& value(int i) const;
  std::vector<int64_t> ints(int i) const;  // an integer input read on the host
  double scalar(int i) const;              // a one-element input read on the host
  std::vector<int64_t> dims(int i) const;  // the sizes of input i
  int rank(int i) const { return value(i).shape().rank(); }
  DType dtype(int i) const { return value(i).dtype(); }
  // Input i as a traced tensor with positional tags (valid while the builder runs).
  Tensor input(int i) const;

  // Attributes.
  const onnx::Attribute* attr(std::string_view name) const { return node_.attribute(name); }
  bool has_attr(std::string_view name) const { return attr(name) != nullptr; }
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, std::string fallback = "") const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const;
  // Throws Unsupported naming any attribute outside `known`, so that none is silently ignored.
  void expect_attributes(std::initializer_list<std::string_view> known) const;

  // Set by the runner around the builder call.
  void set_traced(std::vector<Tensor> traced) { traced_ = std::move(traced); }

 private:
  const onnx::Node& node_;
  int64_t opset_;
  std::vector<std::optional<HostBuffer>> values_;
  std::vector<Tensor> traced_;  // one per input, invalid where omitted
};

// Builds one node inside a trace and returns one tensor per output (extra ones are dropped).
using OpBuilder = std::function<std::vector<Tensor>(const NodeContext&)>;
// Keyed by op type for the default domain, "domain.OpType" for others.
using OpTable = std::map<std::string, OpBuilder, std::less<>>;

// The op families, one file each (ops_<family>.cpp).
void register_elementwise_ops(OpTable& table);
void register_activation_ops(OpTable& table);
void register_reduce_ops(OpTable& table);
void register_shape_ops(OpTable& table);
void register_index_ops(OpTable& table);
void register_nn_ops(OpTable& table);
void register_pool_ops(OpTable& table);
void register_loss_ops(OpTable& table);
void register_misc_ops(OpTable& table);
void register_training_ops(OpTable& table);
void register_resize_ops(OpTable& table);
void register_conv_ops(OpTable& table);
void register_recurrent_ops(OpTable& table);
void register_sampling_ops(OpTable& table);
const OpTable& op_table();
// The builder of `node`, or nullptr.
const OpBuilder* find_builder(const onnx::Node& node);

// Builders shared by several ops.
// numpy's matmul: 1-D operands gain a unit dim (removed again), batch dims broadcast.
Tensor numpy_matmul(const Tensor& a, const Tensor& b);
// round(x / scale) + zero_point (half to even), saturated to `to` (u8, i8 or i32).
Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, DType to);

// --- Positional tags --------------------------------------------------------------------------
// ONNX addresses dimensions by position and broadcasts like numpy (aligned from the right). The
// harness gives axis i of a rank-r tensor the tag "p{r-1-i}", so that broadcasting by tag lines
// up the same dimensions numpy would; size-1 dimensions are stretched with broadcast_to.

Tag axis_tag(int axis, int rank);
Shape positional_shape(DType dtype, const std::vector<int64_t>& sizes);
// The same values with positional tags (a free relabelling of the dims in their current order).
Tensor positional(const Tensor& t);
Tensor reshape_to(const Tensor& t, const std::vector<int64_t>& sizes);
std::vector<int64_t> sizes_of(const Tensor& t);
// Resolves a possibly negative axis; an out-of-range one is a prism::Error (a failed case).
int normalize_axis(int64_t axis, int rank);
// numpy broadcasting of several tensors: each comes back with the common positional shape.
std::vector<int64_t> broadcast_sizes(const std::vector<std::vector<int64_t>>& shapes);
Tensor broadcast_to_sizes(const Tensor& t, const std::vector<int64_t>& sizes);
std::vector<Tensor> broadcast_all(std::vector<Tensor> tensors);
// x's dims relabelled by `tags`, in order (for ops that name dims: dot, conv).
Tensor with_tags(const Tensor& x, const std::vector<Tag>& tags);
// A per-channel vector [C] broadcast against [N, C, spatial...] of `sizes`.
Tensor per_channel(const Tensor& v, const std::vector<int64_t>& sizes);

// The prism dtype of an ONNX element type; Unsupported for strings, complex, u16, u64...
DType to_dtype(onnx::ElemType t);
HostBuffer to_host_buffer(const onnx::TensorProto& t);

}  // namespace prism::conformance
