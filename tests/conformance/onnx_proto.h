// A minimal reader of the ONNX protobuf messages the node tests use: ModelProto, GraphProto,
// NodeProto, AttributeProto, ValueInfoProto and TensorProto. It decodes the protobuf wire format
// directly (varints, fixed32/64, length-delimited fields), so the harness needs no protobuf
// library; fields it does not model are skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prism::onnx {

// TensorProto.DataType values.
enum class ElemType : int32_t {
  undefined = 0,
  float32 = 1,
  uint8 = 2,
  int8 = 3,
  uint16 = 4,
  int16 = 5,
  int32 = 6,
  int64 = 7,
  string = 8,
  boolean = 9,
  float16 = 10,
  float64 = 11,
  uint32 = 12,
  uint64 = 13,
  complex64 = 14,
  complex128 = 15,
  bfloat16 = 16,
};
std::string_view elem_type_name(ElemType t);

// A TensorProto with its data gathered into one little-endian byte array of dims' product
// elements (whichever of raw_data and the typed repeated fields held it). Strings are counted
// but not kept.
struct TensorProto {
  std::string name;
  ElemType type = ElemType::undefined;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
  bool external = false;  // data_location = EXTERNAL: not readable here
  int64_t numel() const;
};

struct Attribute {
  enum class Kind { undefined, f, i, s, t, g, floats, ints, strings, tensors, graphs, other };
  std::string name;
  Kind kind = Kind::undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::optional<TensorProto> t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string op_type;
  std::string domain;
  std::string name;
  std::vector<std::string> inputs;  // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::vector<Attribute> attributes;
  const Attribute* attribute(std::string_view name) const;
};

// A graph input or output: its name, and its element type when it is a plain tensor.
struct ValueInfo {
  std::string name;
  bool is_tensor = false;  // false for sequences, maps, optionals
  ElemType elem_type = ElemType::undefined;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<TensorProto> initializers;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
};

struct Model {
  int64_t opset = 0;  // version of the default ("" / "ai.onnx") domain
  Graph graph;
};

// Parse errors throw prism::Error naming the message and field.
Model parse_model(std::string_view bytes);
TensorProto parse_tensor(std::string_view bytes);

// Reads a whole file; throws prism::Error when it cannot.
std::string read_file(const std::string& path);

}  // namespace prism::onnx
