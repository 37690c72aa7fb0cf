// GGUF, llama.cpp's single-file model format: a header (magic "GGUF", version, tensor and
// metadata counts), typed metadata key-values, tensor infos (name, dims innermost first, ggml
// type, offset into the data section), then the tensor data, each tensor at a multiple of
// `general.alignment` (32 unless stated) from the data section's start, which is itself
// aligned. Everything little-endian.
//
// The reader is strict: a file that parses here is one whose every tensor lies inside the file
// at an aligned offset, overlapping no other, with a size its type and dims agree on, and whose
// metadata holds no repeated key. Anything else is one prism::Error naming the file and what
// is wrong, never a crash or an allocation the file's size cannot justify. It reads the header
// through the VFS in growing ranges, so inspecting a remote file reads its header and nothing
// else.
//
// Reading only: running GGUF models is not there yet. Dequantizing a tensor's bytes is
// prism/quant/dequantize.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prism/io/vfs.h"
#include "prism/quant/ggml_type.h"

namespace prism::io {

// The values are the format's.
enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

std::string_view name(GgufValueType type);  // "UINT32"

// One metadata value: a scalar, a string, or an array of either (arrays do not nest).
// Numeric arrays keep their elements' bytes as the file stores them, so a 150,000-entry
// token-type array costs its own size, not eight bytes an entry.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::ARRAY; }
  bool is_integer() const;  // UINT8 .. INT64 (not BOOL)
  bool is_float() const;    // FLOAT32, FLOAT64
  // Scalars. Each throws prism::Error when the value is not of that kind (as_int also when a
  // UINT64 does not fit in int64, as_uint for a negative value); GgufHeader's getters add the
  // file and key to the message.
  int64_t as_int() const;  // any integer type
  uint64_t as_uint() const;
  double as_float() const;  // FLOAT32 or FLOAT64
  bool as_bool() const;
  std::string_view as_string() const;

  // Arrays.
  GgufValueType element_type() const { return element_; }
  size_t size() const;  // elements of an array
  int64_t int_at(size_t i) const;
  double float_at(size_t i) const;
  bool bool_at(size_t i) const;
  std::string_view string_at(size_t i) const;
  std::vector<int64_t> ints() const;
  std::vector<double> floats() const;
  std::vector<std::string_view> strings() const;

  // "UINT32 7", "STRING \"llama\"", "ARRAY[STRING] of 128256: \"<unk>\", \"<s>\", ..." (at most
  // `max_items` elements shown).
  std::string to_string(size_t max_items = 8) const;

 private:
  friend class GgufReader;
  GgufValueType type_ = GgufValueType::UINT8;
  GgufValueType element_ = GgufValueType::UINT8;  // arrays
  uint64_t bits_ = 0;                             // a scalar's bytes, zero-extended
  // A STRING's bytes; a STRING array's strings back to back, ends_[i] the end of string i
  // (one buffer, not a std::string per token: 32 bytes of overhead each would let a small
  // file of empty strings ask for far more memory than its size).
  std::string chars_;
  std::vector<uint64_t> ends_;
  std::vector<std::byte> raw_;  // numeric and BOOL arrays
  size_t count_ = 0;            // array length

  void expect_array(const char* what) const;
};

struct GgufTensor {
  std::string name;
  quant::GgmlType type = quant::GgmlType::F32;
  std::vector<int64_t> dims;  // ggml's order: dims[0] is the innermost (a row's length)
  uint64_t offset = 0;        // from the start of the data section
  uint64_t file_offset = 0;   // from the start of the file
  uint64_t bytes = 0;

  int64_t numel() const;
  // Outermost first, as numpy, PyTorch and safetensors state shapes: dims reversed.
  std::vector<int64_t> shape() const;
  std::string shape_str() const;  // "[32000, 4096]", outermost first
  int64_t blocks() const;         // numel / the type's block_elements
};

struct GgufHeader {
  std::string uri;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // where the data section starts (aligned)
  uint64_t file_size = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensor> tensors;                          // in file order

  // Reads and validates the header of an opened file (ranged reads; the data is not read).
  static GgufHeader read(const File& file);
  // The same from the file's bytes in memory; `uri` names it in errors.
  static GgufHeader parse(std::span<const std::byte> bytes, std::string_view uri);

  // Metadata lookups. find returns nullptr for a missing key; the typed getters throw
  // prism::Error naming the file and key when it is missing or of another type.
  const GgufValue* find(std::string_view key) const;
  const GgufValue& at(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // FLOAT32 or FLOAT64
  bool get_bool(std::string_view key) const;
  const GgufValue& get_array(std::string_view key) const;

  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // throws naming the file
  uint64_t data_bytes() const;                            // sum of the tensors' sizes

  // A tensor's bytes, read from `file` (the one this header came from).
  void read_tensor_bytes(const File& file, const GgufTensor& t, std::span<std::byte> out) const;
  // A tensor dequantized to f32 (in file order, innermost dim fastest).
  std::vector<float> read_f32(const File& file, const GgufTensor& t) const;

 private:
  std::unordered_map<std::string, size_t> key_index_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend class GgufReader;
};

// True when the bytes start with GGUF's magic ("GGUF").
bool is_gguf_magic(std::span<const std::byte> first_bytes);
// True when `uri` ends in ".gguf" or the file starts with the magic.
bool is_gguf(const File& file);

}  // namespace prism::io
