// safetensors: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the tensor bytes. The header is validated as strictly as the reference implementation:
// a checkpoint that parses here is one every other tool reads the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/dtype.h"
#include "prism/core/shape.h"
#include "prism/io/vfs.h"

namespace prism::io {

// The element types a safetensors file can name. Wider than prism::DType: a header naming
// F8_E4M3 parses and is reported; only loading it asks for a core dtype.
enum class SafetensorsDType : uint8_t {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  I64,
  U64,
  F64
};

std::string_view name(SafetensorsDType dtype);  // "BF16"
int size_of(SafetensorsDType dtype);            // bytes per element
std::optional<SafetensorsDType> safetensors_dtype_from_name(std::string_view name);
// The core dtype with the same bits, if the core has one.
std::optional<DType> to_core_dtype(SafetensorsDType dtype);
SafetensorsDType from_core_dtype(DType dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;

  uint64_t bytes() const { return end - begin; }
  int64_t numel() const;
  // The tensor's core Shape (positional dims, no tags). Throws, naming the tensor, when its
  // dtype has no core equivalent (F8_*, U16, U64).
  Shape core_shape() const;
  std::string shape_str() const;  // "[4096, 11008]"
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                // where tensor bytes start: 8 + header length
  std::vector<SafetensorsTensor> tensors;  // in file order (by begin offset)
  std::map<std::string, std::string> metadata;

  // Validates the JSON header of a file of `file_size` bytes; `file` names it in errors.
  static SafetensorsHeader parse(std::string_view json, uint64_t file_size, std::string_view file);
  // Reads and validates the header of an opened file.
  static SafetensorsHeader read(const File& file);

  uint64_t data_bytes() const;
};

// Writing: used by tests, tools and anything that saves weights.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// The bytes of a complete safetensors file (tensors in the given order, header padded with
// spaces to a multiple of 8 bytes so that data starts aligned).
std::string encode_safetensors(std::span<const SafetensorsEntry> entries,
                               const std::map<std::string, std::string>& metadata = {});
// Writes a safetensors file atomically (temporary name, then rename).
void write_safetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace prism::io
