// The graph IR: a list of nodes in SSA form (a node's inputs always come before it).
// Dimensions are positional here; the tags of each node's Shape are kept for printing and
// errors only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "prism/core/shape.h"
#include "prism/quant/ggml_type.h"

namespace prism::ir {

enum class Op : uint8_t {
#define PRISM_OP(name, kind, arity, attrs, types) name,
#include "prism/ir/ops.def"
#undef PRISM_OP
};

// The number of ops in ops.def.
inline constexpr int kOpCount = 0
#define PRISM_OP(name, kind, arity, attrs, types) +1
#include "prism/ir/ops.def"
#undef PRISM_OP
    ;

enum class OpKind : uint8_t { leaf, unary, binary, ternary, other, composite };
// How many operands an op takes (ops.def explains the names).
enum class Arity : uint8_t { n0, n1, n2, n3, n6, variadic, rank_plus_1, rank_plus_2, attention };

// The dtype rule of an op (ops.def explains the names).
enum class Types : uint8_t { any, same, floating, compare, float_test, logical, select, index_out };

std::string_view op_name(Op op);
OpKind op_kind(Op op);
Arity op_arity(Op op);
Types op_types(Op op);
inline bool is_elementwise(Op op) {
  OpKind k = op_kind(op);
  return k == OpKind::unary || k == OpKind::binary || k == OpKind::ternary;
}

using ValueId = int32_t;

// One field of an attributes struct, by name: what printing and hashing go through, so that a
// struct without fields() does not compile there.
template <typename T>
struct Field {
  std::string_view name;
  const T& value;
};
template <typename T>
Field<T> field(std::string_view name, const T& value) {
  return {name, value};
}

// Attributes, one struct per family of ops (ops.def says which op carries which).
using NoAttrs = std::monostate;
struct ParameterAttrs {
  std::string name;
  // How the weight is split across a mesh: Sharding::str() ("{f:model}"), "" when whole. Only
  // the partitioner reads it; a graph for one device has none.
  std::string sharding;
  bool operator==(const ParameterAttrs&) const = default;
  auto fields() const { return std::tuple{field("name", name), field("sharding", sharding)}; }
};
struct InputAttrs {
  int index = 0;
  bool operator==(const InputAttrs&) const = default;
  auto fields() const { return std::tuple{field("index", index)}; }
};
struct ConstantAttrs {
  std::shared_ptr<const std::vector<std::byte>> data;  // shape.bytes() bytes, row-major
  bool operator==(const ConstantAttrs& o) const { return data == o.data || *data == *o.data; }
  auto fields() const { return std::tuple{field("data", data)}; }
};
struct AxisAttrs {  // iota, argmax/argmin, concatenate, gather, take_along, cumsum, softmax
  int axis = 0;
  bool exclusive = false;  // cumsum
  bool reverse = false;    // cumsum
  bool operator==(const AxisAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("axis", axis), field("exclusive", exclusive),
                      field("reverse", reverse)};
  }
};
struct AxesAttrs {  // reductions, transpose (a permutation), broadcast (operand axis -> out axis)
  std::vector<int> axes;
  bool operator==(const AxesAttrs&) const = default;
  auto fields() const { return std::tuple{field("axes", axes)}; }
};
struct DotAttrs {
  std::vector<int> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  bool operator==(const DotAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("lhs_batch", lhs_batch), field("rhs_batch", rhs_batch),
                      field("lhs_contract", lhs_contract), field("rhs_contract", rhs_contract)};
  }
};
struct SliceAttrs {
  std::vector<int64_t> starts, limits, strides;
  bool operator==(const SliceAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("starts", starts), field("limits", limits), field("strides", strides)};
  }
};
enum class PadMode : uint8_t { constant, edge, reflect };
struct PadAttrs {
  std::vector<int64_t> low, high;  // negative values crop
  PadMode mode = PadMode::constant;
  bool operator==(const PadAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("low", low), field("high", high), field("mode", mode)};
  }
};
enum class ScatterReduce : uint8_t { none, add, mul, max, min };
struct ScatterAttrs {
  int axis = 0;
  ScatterReduce reduce = ScatterReduce::none;
  bool operator==(const ScatterAttrs&) const = default;
  auto fields() const { return std::tuple{field("axis", axis), field("reduce", reduce)}; }
};
struct ConvAttrs {  // lhs {N, C, spatial...}, rhs {O, C/groups, spatial...}, out {N, O, spatial...}
  std::vector<int64_t> strides, pad_low, pad_high, dilations;
  int64_t groups = 1;
  bool operator==(const ConvAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("strides", strides), field("pad_low", pad_low),
                      field("pad_high", pad_high), field("dilations", dilations),
                      field("groups", groups)};
  }
};
struct ArgsortAttrs {
  int axis = 0;
  int64_t k = 0;
  bool descending = true;
  bool operator==(const ArgsortAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("axis", axis), field("k", k), field("descending", descending)};
  }
};
struct NormAttrs {  // rms_norm / layer_norm over `axes`
  std::vector<int> axes;
  double eps = 1e-6;
  bool operator==(const NormAttrs&) const = default;
  auto fields() const { return std::tuple{field("axes", axes), field("eps", eps)}; }
};
struct RopeAttrs {  // x {..., d}, cos and sin {..., d/2} of x's rank
  bool interleaved = false;
  bool operator==(const RopeAttrs&) const = default;
  auto fields() const { return std::tuple{field("interleaved", interleaved)}; }
};
struct AttentionAttrs {  // q {B,Hq,Sq,D} k {B,Hkv,Sk,D} v {B,Hkv,Sk,Dv} [mask {B,Hq,Sq,Sk}]
                         // [offset]
  double scale = 1.0;
  bool causal = false;
  int64_t window = 0;  // sliding window in keys, 0 = none
  bool has_mask = false;
  bool has_offset = false;  // a scalar i32/i64 input: position of the first query
  bool operator==(const AttentionAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("scale", scale), field("causal", causal), field("window", window),
                      field("has_mask", has_mask), field("has_offset", has_offset)};
  }
};

// q {B,Hk,S,Dk} k {B,Hk,S,Dk} v {B,H,S,Dv} g {B,H,S} beta {B,H,S} state {B,H,Dk,Dv}, all of
// the output's dtype. Output {B,H,S+Dk,Dv}: rows 0..S-1 of each head are the outputs, the Dk
// rows after them the final state.
// dequantize: an operand of bytes {..., b} holding, along its last axis, whole blocks of one of
// ggml's formats (the blocks of a GGUF file's rows), to floats {..., b / block_bytes *
// block_elements} of the node's dtype.
struct DequantizeAttrs {
  quant::GgmlType format = quant::GgmlType::F32;
  bool operator==(const DequantizeAttrs&) const = default;
  auto fields() const { return std::tuple{field("format", format)}; }
};
struct GatedDeltaRuleAttrs {
  int64_t chunk = 0;  // 0: token by token; else the chunked form over blocks of `chunk`
  bool operator==(const GatedDeltaRuleAttrs&) const = default;
  auto fields() const { return std::tuple{field("chunk", chunk)}; }
};

// A collective among the `group` devices that share every mesh coordinate but `mesh_axis`'s
// (the partitioner inserts them; docs/sharding.md). all_reduce sums; all_gather concatenates
// the devices' operands along `axis` in device order; reduce_scatter sums and keeps this
// device's block of `axis`.
struct CollectiveAttrs {
  int mesh_axis = 0;
  int64_t group = 1;
  int axis = 0;  // all_gather, reduce_scatter
  bool operator==(const CollectiveAttrs&) const = default;
  auto fields() const {
    return std::tuple{field("mesh_axis", mesh_axis), field("group", group), field("axis", axis)};
  }
};

using Attrs =
    std::variant<NoAttrs, ParameterAttrs, InputAttrs, ConstantAttrs, AxisAttrs, AxesAttrs, DotAttrs,
                 SliceAttrs, PadAttrs, ScatterAttrs, ConvAttrs, ArgsortAttrs, NormAttrs, RopeAttrs,
                 AttentionAttrs, GatedDeltaRuleAttrs, CollectiveAttrs, DequantizeAttrs>;

// The index in Attrs of the attributes `op` carries.
size_t op_attrs_index(Op op);
// The name of the attributes at `index` in Attrs ("NoAttrs", "AxisAttrs", ...).
std::string_view attrs_name(size_t index);

struct Node {
  Op op;
  Shape shape;
  std::vector<ValueId> inputs;
  Attrs attrs;

  template <typename T>
  const T& attr() const {
    return std::get<T>(attrs);
  }
  bool operator==(const Node& o) const {
    return op == o.op && shape == o.shape && inputs == o.inputs && attrs == o.attrs;
  }
};

// Hash of one node (op, shape, inputs, attributes), consistent with Node::operator==.
uint64_t hash(const Node& node);

class Graph {
 public:
  ValueId add(Node node);
  const Node& node(ValueId id) const { return nodes_[id]; }
  Node& node(ValueId id) { return nodes_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }

  std::vector<ValueId>& outputs() { return outputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }

  // Inputs by position and parameters in order of first use.
  std::vector<ValueId> inputs() const;
  std::vector<ValueId> parameters() const;

  // Structural hash: ops, shapes, attributes, constants' bytes, parameter names.
  uint64_t hash() const;
  // Node for node, and the same outputs: what the hash summarizes, compared in full.
  bool operator==(const Graph& o) const { return nodes_ == o.nodes_ && outputs_ == o.outputs_; }

 private:
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;
};

// A readable text form, one node a line:  %3 = f32{s=7,d=64} add(%1, %2)
std::string print(const Graph& graph);
std::string print(const Graph& graph, ValueId id);

}  // namespace prism::ir
