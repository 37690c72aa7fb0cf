// Writes GGUF files (version 3; the layout prism/io/gguf.h reads): metadata and tensor infos
// are declared first, then write() lays out the header and streams each tensor's bytes from a
// callback, one tensor at a time, so a model is never held whole.
//
// The file appears whole or not at all: it is written to a temporary file beside the target,
// flushed to disk, and renamed onto the target only when every tensor has been written. An
// error (a callback that throws, a full disk) removes the temporary file and leaves any
// existing target as it was.
//
//   io::GgufWriter w;
//   w.set_string("general.architecture", "llama");
//   w.set_u32("llama.block_count", 16);
//   w.add_tensor("token_embd.weight", {128256, 2048}, quant::GgmlType::Q8_0);
//   w.write("model.gguf", [&](size_t i, const io::GgufWriter::Sink& put) { put(bytes_of(i)); });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/io/gguf.h"
#include "prism/quant/ggml_type.h"

namespace prism::io {

class GgufWriter {
 public:
  // Metadata, written in the order set. Setting a key twice is an error (GGUF keys are unique).
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string_view v);
  void set_strings(std::string key, const std::vector<std::string>& v);
  void set_i32s(std::string key, std::span<const int32_t> v);
  void set_bools(std::string key, const std::vector<bool>& v);

  // A tensor of `shape` (outermost first, as safetensors and numpy state it) and `type`; rows
  // must be whole blocks of the type. Its data section offset follows the ones before it.
  void add_tensor(std::string name, std::vector<int64_t> shape, quant::GgmlType type);
  size_t tensor_count() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t i) const { return tensors_.at(i).bytes; }

  // Receives a tensor's bytes in order; the pieces must add up to the tensor's size.
  using Sink = std::function<void(std::span<const std::byte>)>;
  // Writes the file at local path `path` (see above), calling fill(i, sink) for each tensor in
  // the order added. Throws prism::Error naming the path when it cannot be written.
  void write(const std::string& path,
             const std::function<void(size_t tensor, const Sink& sink)>& fill) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    quant::GgmlType type;
    uint64_t offset = 0;  // in the data section
    uint64_t bytes = 0;
  };
  void add_key(std::string key, GgufValueType type, std::string encoded);

  std::string kv_;  // the encoded key-values, back to back
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace prism::io
