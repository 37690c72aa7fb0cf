// Store: the map from tensor name to where its bytes live, over one safetensors file, a sharded
// checkpoint or a GGUF file, on any scheme the VFS knows. Opening a store reads headers only; bytes
// move when someone asks (read_tensor_bytes / read_tensors, or a loader on top of them).
//
//   auto store = prism::io::Store::open("hf://org/model");
//   auto layer = store.view("model.layers.3");          // names relative to the prefix
//   Shape w = layer.shape("self_attn.q_proj.weight");
//   layer.read_tensor_bytes("self_attn.q_proj.weight", buffer);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prism/core/shape.h"
#include "prism/io/gguf.h"
#include "prism/io/safetensors.h"
#include "prism/io/vfs.h"
#include "prism/quant/ggml_type.h"

namespace prism::io {

struct StoredTensor {
  SafetensorsTensor info;      // full name, file dtype (see `blocks`), dims
  std::shared_ptr<File> file;  // the shard that holds it
  uint64_t offset = 0;         // absolute byte offset in `file`
  uint64_t bytes = 0;          // as stored

  // Ways a tensor is decoded as it loads instead of copied (decoded(); GGUF files need them).
  // Its bytes are ggml blocks of this type (Q8_0, Q4_K, ...), dequantized to f32, which
  // info.dtype then says:
  std::optional<quant::GgmlType> blocks;
  // Row r is stored row row_order[r] (llama.cpp's files keep the query and key rows of each
  // head in another order); empty when the rows are stored in order. Rows are along the first
  // dim; a tensor of fewer than two dims is one row.
  std::vector<int64_t> row_order;
  // Element c of each row is stored element column_order[c] of its row (llama.cpp's Qwen 3.5
  // files keep the value heads in another order, also along the columns of a matrix and the
  // elements of a vector); empty when in order.
  std::vector<int64_t> column_order;
  // What the file holds of each value instead of the value itself, undone in f32 as it loads:
  // llama.cpp's converter stores Qwen 3.5's norm weights w as w + 1 and its A_log as
  // -exp(A_log).
  enum class Stored : uint8_t { as_is, plus_one, negated_exp };
  Stored stored_as = Stored::as_is;
  // Each row quantized to this ggml type and dequantized back as it loads (rows must be whole
  // blocks of it): the weights a file of that type would give, for measuring a format's effect
  // on a model before converting it (prism llm --quantize). Nothing is stored quantized.
  std::optional<quant::GgmlType> round_trip;

  bool decoded() const {
    return blocks.has_value() || !row_order.empty() || round_trip || rearranged();
  }
  // Whether its values, or their order within a row, differ from the model's: its blocks
  // cannot then be kept as they are (CausalLM::set_quantized_weights).
  bool rearranged() const { return !column_order.empty() || stored_as != Stored::as_is; }
  // Whether it is blocks that a model keeping them (a parameter of bytes) reads exactly as
  // stored: no rows, columns or values moved or changed, nothing quantized on the way.
  bool blocks_as_stored() const {
    return blocks && !round_trip && row_order.empty() && !rearranged();
  }
  // "Q8_0" for blocks, else the dtype's name ("BF16").
  std::string type_name() const;
  int64_t rows() const;               // along the first dim, 1 for fewer than two dims
  int64_t row_elements() const;       // elements of one row
  uint64_t stored_row_bytes() const;  // bytes of one row as stored
  // The stored row of row r.
  int64_t stored_row(int64_t r) const { return row_order.empty() ? r : row_order[r]; }
};

struct StoreOptions {
  int parallelism = 8;         // headers read at once (one round trip or two each, remotely)
  bool metadata_only = false;  // see OpenOptions: inspect a remote checkpoint without fetching it
};

class Store {
 public:
  // `uri` is a .safetensors file, a model.safetensors.index.json, or a directory/repo/prefix
  // holding either (index first, then model.safetensors, then every *.safetensors in it).
  static Store open(std::string_view uri, const StoreOptions& options = {});
  // A store over already opened safetensors files (tests, tools).
  static Store from_files(std::string uri, const std::vector<std::shared_ptr<File>>& files);
  // A store over a GGUF file whose header was read: its tensors under their names in the
  // file, quantized ones dequantized as they load (`uri` names the store). Store::open does
  // the same for a URI ending in ".gguf".
  static Store from_gguf(std::shared_ptr<File> file, const GgufHeader& header);
  // A store of the tensors given, under the names given: how a model's loader renames a
  // checkpoint's tensors (GGUF's names onto the model's) or reorders their rows.
  static Store from_tensors(std::string uri,
                            std::vector<std::pair<std::string, StoredTensor>> tensors);

  // The tensors whose names start with "<prefix>.", named without it. Views nest.
  Store view(std::string_view prefix) const;
  const std::string& prefix() const { return prefix_; }
  const std::string& uri() const;
  // URIs of the files the checkpoint is made of.
  std::vector<std::string> files() const;
  const std::map<std::string, std::string>& metadata() const;

  bool contains(std::string_view name) const;
  // Throws, naming the store, the view and the closest names, when `name` is absent.
  const StoredTensor& at(std::string_view name) const;
  // `name`, or a block of its rows: "<name>[<first>:<end>]" (along its first dim) is that block
  // as a tensor of its own, so a stored tensor that fuses several (a q|k|v projection) can be
  // loaded as the tensors it holds. Throws as at() does, or naming the rows out of range.
  StoredTensor rows(std::string_view name) const;
  Shape shape(std::string_view name) const;
  std::vector<std::string> names() const;  // relative to the view, sorted
  size_t size() const;
  uint64_t total_bytes() const;

  // Copies a tensor's bytes as stored (in its file dtype; a decoded tensor's blocks and row
  // order as the file holds them) into `out`, which must be exactly its size.
  void read_tensor_bytes(std::string_view name, std::span<std::byte> out,
                         const ReadOptions& options = {}) const;
  struct TensorRead {
    std::string name;
    std::span<std::byte> out;
  };
  // Reads many tensors with one bound on reads in flight across all of them.
  void read_tensors(std::span<const TensorRead> reads, const ReadOptions& options = {}) const;
  // The tensor's (or block of rows') bytes in place when its file is mapped (local files) and
  // it needs no decoding, or is blocks as stored (for a parameter that keeps them); empty
  // otherwise.
  std::span<const std::byte> mapped_bytes(std::string_view name) const;

  // The shared, immutable tables behind a store and all of its views (defined in store.cpp).
  struct Catalog;

 private:
  Store(std::shared_ptr<const Catalog> catalog, std::string prefix)
      : catalog_(std::move(catalog)), prefix_(std::move(prefix)) {}
  std::string full_name(std::string_view name) const;

  std::shared_ptr<const Catalog> catalog_;
  std::string prefix_;  // "" or "model.layers.3."
};

}  // namespace prism::io
