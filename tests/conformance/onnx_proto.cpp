#include "tests/conformance/onnx_proto.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "prism/core/error.h"

namespace prism::onnx {
namespace {

enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type, and value (a varint or fixed value in
// `scalar`, the bytes of a length-delimited field in `bytes`).
struct Field {
  uint32_t number = 0;
  int wire = 0;
  uint64_t scalar = 0;
  std::string_view bytes;
};

// Walks the fields of one message.
class WireReader {
 public:
  WireReader(std::string_view bytes, std::string_view message) : rest_(bytes), message_(message) {}

  bool at_end() const { return rest_.empty(); }

  bool next(Field& f) {
    if (rest_.empty()) return false;
    uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    switch (f.wire) {
      case kVarint:
        f.scalar = varint();
        break;
      case kFixed64:
        f.scalar = fixed(8);
        break;
      case kFixed32:
        f.scalar = fixed(4);
        break;
      case kLengthDelimited: {
        uint64_t n = varint();
        PRISM_CHECK(n <= rest_.size(), "onnx: {} field {} runs past the end ({} > {} bytes)",
                    message_, f.number, n, rest_.size());
        f.bytes = rest_.substr(0, n);
        rest_.remove_prefix(n);
        break;
      }
      default:
        fail("onnx: {} field {} has unsupported wire type {}", message_, f.number, f.wire);
    }
    return true;
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      PRISM_CHECK(!rest_.empty(), "onnx: truncated varint in {}", message_);
      auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("onnx: varint longer than 10 bytes in {}", message_);
  }

 private:
  uint64_t fixed(int n) {
    PRISM_CHECK(rest_.size() >= static_cast<size_t>(n), "onnx: truncated fixed{} in {}", n * 8,
                message_);
    uint64_t value = 0;
    std::memcpy(&value, rest_.data(), n);  // little-endian on the wire and on our targets
    rest_.remove_prefix(n);
    return value;
  }

  std::string_view rest_;
  std::string_view message_;
};

// Appends the values of a repeated scalar field, packed or not. `width` is 0 for varints,
// else 4 or 8 for fixed-size values.
void append_repeated(const Field& f, int width, std::vector<uint64_t>& out) {
  if (f.wire != kLengthDelimited) {
    out.push_back(f.scalar);
    return;
  }
  if (width == 0) {
    WireReader packed(f.bytes, "packed varints");
    while (!packed.at_end()) out.push_back(packed.varint());
    return;
  }
  PRISM_CHECK(f.bytes.size() % width == 0,
              "onnx: packed field {} of {} bytes is not a multiple "
              "of {}",
              f.number, f.bytes.size(), width);
  for (size_t i = 0; i < f.bytes.size(); i += width) {
    uint64_t v = 0;
    std::memcpy(&v, f.bytes.data() + i, width);
    out.push_back(v);
  }
}

float as_float(uint64_t bits) {
  auto b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

int element_size(ElemType t) {
  switch (t) {
    case ElemType::uint8:
    case ElemType::int8:
    case ElemType::boolean:
      return 1;
    case ElemType::uint16:
    case ElemType::int16:
    case ElemType::float16:
    case ElemType::bfloat16:
      return 2;
    case ElemType::float32:
    case ElemType::int32:
    case ElemType::uint32:
      return 4;
    case ElemType::int64:
    case ElemType::uint64:
    case ElemType::float64:
    case ElemType::complex64:
      return 8;
    case ElemType::complex128:
      return 16;
    default:
      return 0;
  }
}

// Each typed field's values, truncated to the element size, in little-endian order.
void append_values(std::vector<uint8_t>& data, const std::vector<uint64_t>& values, int size) {
  for (uint64_t v : values) {
    uint8_t bytes[8];
    std::memcpy(bytes, &v, 8);
    data.insert(data.end(), bytes, bytes + size);
  }
}

std::vector<int64_t> to_signed(const std::vector<uint64_t>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

ValueInfo parse_value_info(std::string_view bytes) {
  ValueInfo info;
  WireReader r(bytes, "ValueInfoProto");
  Field f;
  while (r.next(f)) {
    if (f.number == 1) info.name = f.bytes;
    if (f.number != 2) continue;
    WireReader type(f.bytes, "TypeProto");
    Field tf;
    while (type.next(tf)) {
      if (tf.number != 1) continue;  // 1 = tensor_type; others are sequences, maps, optionals
      info.is_tensor = true;
      WireReader tensor(tf.bytes, "TypeProto.Tensor");
      Field ef;
      while (tensor.next(ef)) {
        if (ef.number == 1) info.elem_type = static_cast<ElemType>(ef.scalar);
      }
    }
  }
  return info;
}

Attribute parse_attribute(std::string_view bytes) {
  Attribute a;
  WireReader r(bytes, "AttributeProto");
  Field f;
  std::vector<uint64_t> floats, ints;
  using Kind = Attribute::Kind;
  while (r.next(f)) {
    switch (f.number) {
      case 1:
        a.name = f.bytes;
        break;
      case 2:
        a.f = as_float(f.scalar);
        break;
      case 3:
        a.i = static_cast<int64_t>(f.scalar);
        break;
      case 4:
        a.s = f.bytes;
        break;
      case 5:
        a.t = parse_tensor(f.bytes);
        break;
      case 7:
        append_repeated(f, 4, floats);
        break;
      case 8:
        append_repeated(f, 0, ints);
        break;
      case 9:
        a.strings.emplace_back(f.bytes);
        break;
      case 20: {
        // AttributeType: 1 FLOAT 2 INT 3 STRING 4 TENSOR 5 GRAPH 6 FLOATS 7 INTS 8 STRINGS
        // 9 TENSORS 10 GRAPHS; later ones (sparse tensors, type protos) are not modelled.
        static constexpr Kind kKinds[] = {Kind::undefined, Kind::f,       Kind::i,      Kind::s,
                                          Kind::t,         Kind::g,       Kind::floats, Kind::ints,
                                          Kind::strings,   Kind::tensors, Kind::graphs};
        a.kind = f.scalar < std::size(kKinds) ? kKinds[f.scalar] : Kind::other;
        break;
      }
      default:
        break;
    }
  }
  for (uint64_t v : floats) a.floats.push_back(as_float(v));
  a.ints = to_signed(ints);
  return a;
}

Node parse_node(std::string_view bytes) {
  Node n;
  WireReader r(bytes, "NodeProto");
  Field f;
  while (r.next(f)) {
    switch (f.number) {
      case 1:
        n.inputs.emplace_back(f.bytes);
        break;
      case 2:
        n.outputs.emplace_back(f.bytes);
        break;
      case 3:
        n.name = f.bytes;
        break;
      case 4:
        n.op_type = f.bytes;
        break;
      case 5:
        n.attributes.push_back(parse_attribute(f.bytes));
        break;
      case 7:
        n.domain = f.bytes;
        break;
      default:
        break;
    }
  }
  return n;
}

Graph parse_graph(std::string_view bytes) {
  Graph g;
  WireReader r(bytes, "GraphProto");
  Field f;
  while (r.next(f)) {
    switch (f.number) {
      case 1:
        g.nodes.push_back(parse_node(f.bytes));
        break;
      case 2:
        g.name = f.bytes;
        break;
      case 5:
        g.initializers.push_back(parse_tensor(f.bytes));
        break;
      case 11:
        g.inputs.push_back(parse_value_info(f.bytes));
        break;
      case 12:
        g.outputs.push_back(parse_value_info(f.bytes));
        break;
      default:
        break;
    }
  }
  return g;
}

}  // namespace

std::string_view elem_type_name(ElemType t) {
  static constexpr std::string_view kNames[] = {
      "undefined", "float",  "uint8",     "int8",       "uint16",  "int16",
      "int32",     "int64",  "string",    "bool",       "float16", "double",
      "uint32",    "uint64", "complex64", "complex128", "bfloat16"};
  auto i = static_cast<size_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

int64_t TensorProto::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

const Attribute* Node::attribute(std::string_view attr) const {
  for (const Attribute& a : attributes) {
    if (a.name == attr) return &a;
  }
  return nullptr;
}

TensorProto parse_tensor(std::string_view bytes) {
  TensorProto t;
  WireReader r(bytes, "TensorProto");
  Field f;
  std::vector<uint64_t> dims, floats, int32s, int64s, doubles, uint64s;
  std::string_view raw;
  bool has_raw = false;
  while (r.next(f)) {
    switch (f.number) {
      case 1:
        append_repeated(f, 0, dims);
        break;
      case 2:
        t.type = static_cast<ElemType>(f.scalar);
        break;
      case 4:
        append_repeated(f, 4, floats);
        break;
      case 5:
        append_repeated(f, 0, int32s);
        break;
      case 7:
        append_repeated(f, 0, int64s);
        break;
      case 8:
        t.name = f.bytes;
        break;
      case 9:
        raw = f.bytes;
        has_raw = true;
        break;
      case 10:
        append_repeated(f, 8, doubles);
        break;
      case 11:
        append_repeated(f, 0, uint64s);
        break;
      case 14:
        t.external = f.scalar == 1;
        break;
      default:
        break;  // string_data, segment, doc_string, external_data
    }
  }
  t.dims = to_signed(dims);
  int size = element_size(t.type);
  if (has_raw) {
    t.data.assign(raw.begin(), raw.end());
  } else {
    switch (t.type) {
      case ElemType::float32:
      case ElemType::complex64:
        append_values(t.data, floats, 4);
        break;
      case ElemType::float64:
      case ElemType::complex128:
        append_values(t.data, doubles, 8);
        break;
      case ElemType::int64:
        append_values(t.data, int64s, 8);
        break;
      case ElemType::uint32:
      case ElemType::uint64:
        append_values(t.data, uint64s, size);
        break;
      default:
        // int32_data carries every type of 4 bytes or fewer (halves as their bit patterns).
        if (size > 0) append_values(t.data, int32s, size);
        break;
    }
  }
  if (size > 0 && !t.external) {
    PRISM_CHECK(static_cast<int64_t>(t.data.size()) == t.numel() * size,
                "onnx: tensor \"{}\" has {} bytes of data for {} elements of {}", t.name,
                t.data.size(), t.numel(), elem_type_name(t.type));
  }
  return t;
}

Model parse_model(std::string_view bytes) {
  Model m;
  WireReader r(bytes, "ModelProto");
  Field f;
  while (r.next(f)) {
    if (f.number == 7) m.graph = parse_graph(f.bytes);
    if (f.number != 8) continue;
    // OperatorSetIdProto: domain = 1, version = 2.
    WireReader opset(f.bytes, "OperatorSetIdProto");
    Field of;
    std::string_view domain;
    int64_t version = 0;
    while (opset.next(of)) {
      if (of.number == 1) domain = of.bytes;
      if (of.number == 2) version = static_cast<int64_t>(of.scalar);
    }
    if (domain.empty() || domain == "ai.onnx") m.opset = version;
  }
  return m;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PRISM_CHECK(in.good(), "cannot open {}", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace prism::onnx
