#include "prism/io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"

namespace prism::io {
namespace {

struct SafetensorsDTypeInfo {
  std::string_view name;
  int size;
  std::optional<DType> core;
};

// Indexed by SafetensorsDType.
constexpr SafetensorsDTypeInfo kSafetensorsDTypes[] = {
    {"BOOL", 1, DType::boolean},  {"U8", 1, DType::u8},         {"I8", 1, DType::i8},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"I16", 2, DType::i16},
    {"U16", 2, std::nullopt},     {"F16", 2, DType::f16},       {"BF16", 2, DType::bf16},
    {"I32", 4, DType::i32},       {"U32", 4, DType::u32},       {"F32", 4, DType::f32},
    {"I64", 8, DType::i64},       {"U64", 8, std::nullopt},     {"F64", 8, DType::f64},
};

const SafetensorsDTypeInfo& info(SafetensorsDType dtype) {
  return kSafetensorsDTypes[static_cast<int>(dtype)];
}

// A header larger than this is corrupt, not a model: the reference reader's limit.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t json_uint(const nlohmann::json& value, std::string_view file, std::string_view tensor,
                   std::string_view field) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    fail("{}: tensor '{}': {} must hold non-negative integers, got {}", file, tensor, field,
         value.dump());
  }
  return value.get<uint64_t>();
}

SafetensorsTensor parse_tensor(const std::string& name, const nlohmann::json& entry,
                               uint64_t data_bytes, std::string_view file) {
  if (!entry.is_object()) fail("{}: tensor '{}': entry is not a JSON object", file, name);
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) fail("{}: tensor '{}': missing '{}'", file, name, field);
  }
  SafetensorsTensor t;
  t.name = name;
  const auto& dtype = entry["dtype"];
  auto parsed =
      dtype.is_string() ? safetensors_dtype_from_name(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) {
    fail(
        "{}: tensor '{}': unknown dtype {} (expected BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 "
        "BF16 I32 U32 F32 I64 U64 F64)",
        file, name, dtype.dump());
  }
  t.dtype = *parsed;
  const auto& shape = entry["shape"];
  if (!shape.is_array()) fail("{}: tensor '{}': shape is not an array", file, name);
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    uint64_t size = json_uint(d, file, name, "shape");
    t.shape.push_back(static_cast<int64_t>(size));
    if (size != 0 && numel > UINT64_MAX / size) overflow = true;
    numel *= size;
  }
  const auto& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    fail("{}: tensor '{}': data_offsets must be [begin, end], got {}", file, name, offsets.dump());
  }
  t.begin = json_uint(offsets[0], file, name, "data_offsets");
  t.end = json_uint(offsets[1], file, name, "data_offsets");
  if (t.begin > t.end) {
    fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name, t.begin,
         t.end);
  }
  if (t.end > data_bytes) {
    fail(
        "{}: tensor '{}': data_offsets [{}, {}] are out of bounds (the data section holds {} "
        "bytes)",
        file, name, t.begin, t.end, data_bytes);
  }
  uint64_t element = static_cast<uint64_t>(size_of(t.dtype));
  if (overflow || numel > UINT64_MAX / element || numel * element != t.bytes()) {
    fail("{}: tensor '{}': {} x {} needs {} bytes but data_offsets [{}, {}] hold {}", file, name,
         info(t.dtype).name, t.shape_str(), overflow ? 0 : numel * element, t.begin, t.end,
         t.bytes());
  }
  return t;
}

}  // namespace

std::string_view name(SafetensorsDType dtype) { return info(dtype).name; }
int size_of(SafetensorsDType dtype) { return info(dtype).size; }

std::optional<SafetensorsDType> safetensors_dtype_from_name(std::string_view n) {
  for (size_t i = 0; i < std::size(kSafetensorsDTypes); ++i) {
    if (kSafetensorsDTypes[i].name == n) return static_cast<SafetensorsDType>(i);
  }
  return std::nullopt;
}

std::optional<DType> to_core_dtype(SafetensorsDType dtype) { return info(dtype).core; }

SafetensorsDType from_core_dtype(DType dtype) {
  for (size_t i = 0; i < std::size(kSafetensorsDTypes); ++i) {
    if (kSafetensorsDTypes[i].core == dtype) return static_cast<SafetensorsDType>(i);
  }
  fail("dtype {} has no safetensors equivalent", prism::name(dtype));
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape SafetensorsTensor::core_shape() const {
  auto core = to_core_dtype(dtype);
  if (!core) {
    fail(
        "tensor '{}': dtype {} is not supported by prism's core yet (it can be inspected but "
        "not loaded)",
        name, io::name(dtype));
  }
  std::vector<Dim> dims;
  for (int64_t d : shape) dims.push_back({Tag(), d});
  return Shape(*core, dims, name);
}

std::string SafetensorsTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

uint64_t SafetensorsHeader::data_bytes() const { return tensors.empty() ? 0 : tensors.back().end; }

SafetensorsHeader SafetensorsHeader::parse(std::string_view json, uint64_t file_size,
                                           std::string_view file) {
  SafetensorsHeader header;
  header.data_offset = 8 + json.size();
  if (header.data_offset > file_size) {
    fail("{}: header length {} is larger than the file ({} bytes)", file, json.size(), file_size);
  }
  uint64_t data_bytes = file_size - header.data_offset;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {  // parse errors, numbers out of range
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!root.is_object()) fail("{}: header is not a JSON object", file);
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ is not a JSON object", file);
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) fail("{}: __metadata__ value '{}' is not a string", file, mkey);
        header.metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_tensor(key, value, data_bytes, file));
  }
  std::sort(header.tensors.begin(), header.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Tensors must tile the data section exactly: no overlaps (two names for the same bytes),
  // no holes and no trailing bytes, as the reference implementation requires.
  uint64_t expected = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const auto& t : header.tensors) {
    if (t.begin < expected) {
      fail("{}: tensor '{}' [{}, {}] overlaps tensor '{}' [{}, {}]", file, t.name, t.begin, t.end,
           previous->name, previous->begin, previous->end);
    }
    if (t.begin > expected) {
      fail("{}: {} unused bytes before tensor '{}' at data offset {}", file, t.begin - expected,
           t.name, expected);
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != data_bytes) {
    fail("{}: the data section holds {} bytes but the tensors cover {}", file, data_bytes,
         expected);
  }
  return header;
}

SafetensorsHeader SafetensorsHeader::read(const File& file) {
  uint64_t size = file.size();
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header", file.uri(), size);
  std::byte prefix[8];
  file.read_at(0, prefix);
  uint64_t length = read_le64(prefix);
  if (length > size - 8) {
    fail(
        "{}: header length {} is larger than the file ({} bytes); the file is truncated or "
        "not safetensors",
        file.uri(), length, size);
  }
  if (length > kMaxHeaderBytes)
    fail("{}: header length {} is implausibly large", file.uri(), length);
  std::string json(length, '\0');
  file.read_at(8, std::as_writable_bytes(std::span(json)));
  return parse(json, size, file.uri());
}

std::string encode_safetensors(std::span<const SafetensorsEntry> entries,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& e : entries) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    uint64_t bytes = static_cast<uint64_t>(numel) * size_of(e.dtype);
    PRISM_CHECK(bytes == e.data.size(), "encode_safetensors: tensor '{}' is {} {} but has {} bytes",
                e.name, name(e.dtype), fmt::join(e.shape, "x"), e.data.size());
    header[e.name] = {
        {"dtype", name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  out += json;
  for (const auto& e : entries) {
    out.append(reinterpret_cast<const char*>(e.data.data()), e.data.size());
  }
  return out;
}

void write_safetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(entries, metadata));
}

}  // namespace prism::io
