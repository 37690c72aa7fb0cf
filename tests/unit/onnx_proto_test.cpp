// The protobuf wire-format reader of the ONNX conformance harness, on hand-encoded messages.
#include "tests/conformance/onnx_proto.h"

#include <cstring>

#include "tests/unit/test_util.h"

namespace prism {
namespace {

std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    out += static_cast<char>(v ? byte | 0x80 : byte);
  } while (v);
  return out;
}
std::string key(int number, int wire) { return varint(static_cast<uint64_t>(number) << 3 | wire); }
std::string varint_field(int number, uint64_t v) { return key(number, 0) + varint(v); }
std::string bytes_field(int number, const std::string& b) {
  return key(number, 2) + varint(b.size()) + b;
}
std::string float_field(int number, float f) {
  std::string b(4, '\0');
  std::memcpy(b.data(), &f, 4);
  return key(number, 5) + b;
}

TEST(OnnxProto, TensorFromTypedFieldsPackedAndNot) {
  // dims unpacked, int32_data packed with a negative value (a ten-byte varint).
  std::string t = varint_field(1, 2) + varint_field(2, 6) +
                  bytes_field(5, varint(7) + varint(static_cast<uint64_t>(int64_t{-2}))) +
                  bytes_field(8, "w");
  onnx::TensorProto p = onnx::parse_tensor(t);
  EXPECT_EQ(p.name, "w");
  EXPECT_EQ(p.type, onnx::ElemType::int32);
  EXPECT_EQ(p.dims, std::vector<int64_t>{2});
  ASSERT_EQ(p.data.size(), 8u);
  int32_t v[2];
  std::memcpy(v, p.data.data(), 8);
  EXPECT_EQ(v[0], 7);
  EXPECT_EQ(v[1], -2);
}

TEST(OnnxProto, TensorFromRawData) {
  float values[2] = {1.5f, -4.0f};
  std::string raw(reinterpret_cast<const char*>(values), sizeof(values));
  std::string t = bytes_field(1, varint(1) + varint(2)) + varint_field(2, 1) + bytes_field(9, raw);
  onnx::TensorProto p = onnx::parse_tensor(t);
  EXPECT_EQ(p.dims, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(p.data.size(), 8u);
  EXPECT_EQ(std::memcmp(p.data.data(), values, 8), 0);
}

TEST(OnnxProto, ModelWithOpsetNodeAndAttributes) {
  std::string attr = bytes_field(1, "alpha") + float_field(2, 0.5f) + varint_field(20, 1);
  std::string ints =
      bytes_field(1, "perm") + bytes_field(8, varint(1) + varint(0)) + varint_field(20, 7);
  std::string node = bytes_field(1, "x") + bytes_field(1, "") + bytes_field(2, "y") +
                     bytes_field(4, "LeakyRelu") + bytes_field(5, attr) + bytes_field(5, ints);
  std::string tensor_type = bytes_field(1, varint_field(1, 1));  // TypeProto.tensor_type
  std::string input = bytes_field(1, "x") + bytes_field(2, tensor_type);
  std::string graph = bytes_field(1, node) + bytes_field(11, input);
  std::string model =
      varint_field(1, 8) + bytes_field(8, varint_field(2, 17)) + bytes_field(7, graph);
  onnx::Model m = onnx::parse_model(model);
  EXPECT_EQ(m.opset, 17);
  ASSERT_EQ(m.graph.nodes.size(), 1u);
  const onnx::Node& n = m.graph.nodes[0];
  EXPECT_EQ(n.op_type, "LeakyRelu");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", ""}));
  ASSERT_NE(n.attribute("alpha"), nullptr);
  EXPECT_EQ(n.attribute("alpha")->f, 0.5f);
  EXPECT_EQ(n.attribute("perm")->ints, (std::vector<int64_t>{1, 0}));
  ASSERT_EQ(m.graph.inputs.size(), 1u);
  EXPECT_TRUE(m.graph.inputs[0].is_tensor);
  EXPECT_EQ(m.graph.inputs[0].elem_type, onnx::ElemType::float32);
}

TEST(OnnxProto, TruncatedMessagesAreErrors) {
  std::string t = bytes_field(9, std::string(8, 'x'));
  t.resize(t.size() - 3);
  EXPECT_EQ(testing::error_of([&] { onnx::parse_tensor(t); }),
            "onnx: TensorProto field 9 runs past the end (8 > 5 bytes)");
  // Four raw bytes cannot hold the two floats the dims ask for.
  std::string short_data = varint_field(1, 2) + varint_field(2, 1) + bytes_field(9, "abcd");
  EXPECT_EQ(testing::error_of([&] { onnx::parse_tensor(short_data); }),
            "onnx: tensor \"\" has 4 bytes of data for 2 elements of float");
}

}  // namespace
}  // namespace prism
