#include "prism/io/store.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

#include "prism/core/error.h"
#include "prism/quant/dequantize.h"

namespace prism::io {

std::string StoredTensor::type_name() const {
  return std::string(blocks ? quant::name(*blocks) : name(info.dtype));
}

int64_t StoredTensor::rows() const { return info.shape.size() < 2 ? 1 : info.shape[0]; }

int64_t StoredTensor::row_elements() const {
  int64_t n = 1;
  for (size_t d = info.shape.size() < 2 ? 0 : 1; d < info.shape.size(); ++d) n *= info.shape[d];
  return n;
}

uint64_t StoredTensor::stored_row_bytes() const {
  if (!blocks) return row_elements() * size_of(info.dtype);
  const quant::GgmlTypeInfo& type = quant::info(*blocks);
  return row_elements() / type.block_elements * type.block_bytes;
}

struct Store::Catalog {
  std::string uri;
  std::vector<std::shared_ptr<File>> files;
  std::map<std::string, StoredTensor, std::less<>> tensors;
  std::map<std::string, std::string> metadata;
};

namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";

void add_file(Store::Catalog& catalog, std::shared_ptr<File> file,
              const SafetensorsHeader& header) {
  for (const auto& t : header.tensors) {
    auto [it, inserted] = catalog.tensors.try_emplace(
        t.name, StoredTensor{t, file, header.data_offset + t.begin, t.bytes()});
    if (!inserted) {
      fail("{}: tensor '{}' appears in both {} and {}", catalog.uri, t.name, it->second.file->uri(),
           file->uri());
    }
  }
  catalog.files.push_back(std::move(file));
}

// A GGUF tensor as the store holds it: plain types as the safetensors dtype of the same bits
// (copied, converted or used in place as any checkpoint's), the others as blocks to decode.
StoredTensor gguf_tensor(const std::shared_ptr<File>& file, const GgufTensor& t) {
  StoredTensor s;
  s.info.name = t.name;
  s.info.shape = t.shape();
  s.info.begin = t.offset;
  s.info.end = t.offset + t.bytes;
  s.file = file;
  s.offset = t.file_offset;
  s.bytes = t.bytes;
  using quant::GgmlType;
  switch (t.type) {
    case GgmlType::F32:
      s.info.dtype = SafetensorsDType::F32;
      break;
    case GgmlType::F16:
      s.info.dtype = SafetensorsDType::F16;
      break;
    case GgmlType::BF16:
      s.info.dtype = SafetensorsDType::BF16;
      break;
    case GgmlType::F64:
      s.info.dtype = SafetensorsDType::F64;
      break;
    case GgmlType::I8:
      s.info.dtype = SafetensorsDType::I8;
      break;
    case GgmlType::I16:
      s.info.dtype = SafetensorsDType::I16;
      break;
    case GgmlType::I32:
      s.info.dtype = SafetensorsDType::I32;
      break;
    case GgmlType::I64:
      s.info.dtype = SafetensorsDType::I64;
      break;
    default:
      s.info.dtype = SafetensorsDType::F32;  // what its blocks decode to
      s.blocks = t.type;
  }
  return s;
}

// Opens files and reads their headers with several requests in flight: over the network a
// header costs a round trip or two, and checkpoints have dozens of shards.
std::vector<std::pair<std::shared_ptr<File>, SafetensorsHeader>> open_all(
    const std::vector<std::string>& uris, const StoreOptions& options) {
  std::vector<std::pair<std::shared_ptr<File>, SafetensorsHeader>> opened(uris.size());
  parallel_for(uris.size(), options.parallelism, [&](size_t i) {
    opened[i].first = io::open(uris[i], {.metadata_only = options.metadata_only});
    opened[i].second = SafetensorsHeader::read(*opened[i].first);
  });
  return opened;
}

void open_index(Store::Catalog& catalog, const std::string& index_uri,
                const StoreOptions& options) {
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text(index_uri));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", index_uri, e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail("{}: no \"weight_map\" object", index_uri);
  }
  if (index.contains("metadata") && index["metadata"].is_object()) {
    for (const auto& [key, value] : index["metadata"].items()) {
      catalog.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map['{}'] is not a file name", index_uri, name);
    std::string file = shard.get<std::string>();
    if (file.empty() || file.front() == '/' || file.find("..") != std::string::npos) {
      fail("{}: weight_map['{}'] names '{}', which is not a file beside the index", index_uri, name,
           file);
    }
    names_by_shard[file].push_back(name);
  }
  std::string dir(parent_of(index_uri));
  std::vector<std::string> shard_uris;
  for (const auto& [file, names] : names_by_shard) {
    shard_uris.push_back(join(dir, file));
    if (!exists(shard_uris.back())) {
      fail("{}: missing shard '{}' (it holds {} tensors, e.g. '{}')", index_uri, file, names.size(),
           names.front());
    }
  }
  for (auto& [file, header] : open_all(shard_uris, options)) add_file(catalog, file, header);
  for (const auto& [file, names] : names_by_shard) {
    for (const auto& name : names) {
      auto it = catalog.tensors.find(name);
      if (it == catalog.tensors.end()) {
        fail("{}: tensor '{}' is listed in shard '{}' but that file does not hold it", index_uri,
             name, file);
      }
      if (base_name(it->second.file->uri()) != base_name(file)) {
        fail("{}: tensor '{}' is listed in shard '{}' but found in {}", index_uri, name, file,
             it->second.file->uri());
      }
    }
  }
}

}  // namespace

Store Store::open(std::string_view uri_view, const StoreOptions& options) {
  auto catalog = std::make_shared<Catalog>();
  std::string uri(uri_view);
  while (uri.size() > 1 && uri.back() == '/' && !uri.ends_with("://")) uri.pop_back();
  catalog->uri = uri;
  std::string_view base = base_name(uri);
  if (base.ends_with(".json")) {
    open_index(*catalog, uri, options);
  } else if (base.ends_with(".gguf")) {
    auto file = io::open(uri, {.metadata_only = options.metadata_only});
    return from_gguf(file, GgufHeader::read(*file));
  } else if (base.ends_with(".safetensors")) {
    auto file = io::open(uri, {.metadata_only = options.metadata_only});
    auto header = SafetensorsHeader::read(*file);
    catalog->metadata = header.metadata;
    add_file(*catalog, file, header);
  } else if (exists(join(uri, kIndexName))) {
    open_index(*catalog, join(uri, kIndexName), options);
  } else if (exists(join(uri, kSingleName))) {
    auto file = io::open(join(uri, kSingleName), {.metadata_only = options.metadata_only});
    auto header = SafetensorsHeader::read(*file);
    catalog->metadata = header.metadata;
    add_file(*catalog, file, header);
  } else {
    std::vector<std::string> uris;
    for (const auto& e : list(uri, false)) {
      if (!e.is_dir && e.path.ends_with(".safetensors")) uris.push_back(e.uri);
    }
    if (uris.empty()) {
      fail("{}: no {}, {} or *.safetensors files found", uri, kIndexName, kSingleName);
    }
    for (auto& [file, header] : open_all(uris, options)) add_file(*catalog, file, header);
  }
  return Store(std::move(catalog), "");
}

Store Store::from_files(std::string uri, const std::vector<std::shared_ptr<File>>& files) {
  auto catalog = std::make_shared<Catalog>();
  catalog->uri = std::move(uri);
  for (const auto& file : files) add_file(*catalog, file, SafetensorsHeader::read(*file));
  return Store(std::move(catalog), "");
}

Store Store::from_gguf(std::shared_ptr<File> file, const GgufHeader& header) {
  auto catalog = std::make_shared<Catalog>();
  catalog->uri = header.uri;
  for (const GgufTensor& t : header.tensors) catalog->tensors.emplace(t.name, gguf_tensor(file, t));
  catalog->files.push_back(std::move(file));
  return Store(std::move(catalog), "");
}

Store Store::from_tensors(std::string uri,
                          std::vector<std::pair<std::string, StoredTensor>> tensors) {
  auto catalog = std::make_shared<Catalog>();
  catalog->uri = std::move(uri);
  std::set<const File*> files;
  for (auto& [name, t] : tensors) {
    PRISM_CHECK(t.row_order.empty() || static_cast<int64_t>(t.row_order.size()) == t.rows(),
                "{}: tensor '{}' has {} rows but a row order of {}", catalog->uri, name, t.rows(),
                t.row_order.size());
    PRISM_CHECK(
        t.column_order.empty() || static_cast<int64_t>(t.column_order.size()) == t.row_elements(),
        "{}: tensor '{}' has rows of {} but a column order of {}", catalog->uri, name,
        t.row_elements(), t.column_order.size());
    if (files.insert(t.file.get()).second) catalog->files.push_back(t.file);
    std::string key = name;
    if (!catalog->tensors.emplace(std::move(key), std::move(t)).second) {
      fail("{}: tensor '{}' given twice", catalog->uri, name);
    }
  }
  return Store(std::move(catalog), "");
}

Store Store::view(std::string_view prefix) const {
  while (prefix.ends_with('.')) prefix.remove_suffix(1);
  if (prefix.empty()) return *this;
  return Store(catalog_, prefix_ + std::string(prefix) + ".");
}

const std::string& Store::uri() const { return catalog_->uri; }
const std::map<std::string, std::string>& Store::metadata() const { return catalog_->metadata; }

std::vector<std::string> Store::files() const {
  std::vector<std::string> uris;
  for (const auto& f : catalog_->files) uris.push_back(f->uri());
  return uris;
}

std::string Store::full_name(std::string_view name) const { return prefix_ + std::string(name); }

bool Store::contains(std::string_view name) const {
  return catalog_->tensors.find(full_name(name)) != catalog_->tensors.end();
}

const StoredTensor& Store::at(std::string_view name) const {
  std::string full = full_name(name);
  auto it = catalog_->tensors.find(full);
  if (it != catalog_->tensors.end()) return it->second;
  // Suggest the names that share the longest prefix with the one asked for: usually the
  // typo or the wrong layer number is then obvious.
  std::vector<std::string> near;
  auto pos = catalog_->tensors.lower_bound(full);
  for (auto back = pos; back != catalog_->tensors.begin() && near.size() < 2;) {
    --back;
    if (back->first.starts_with(prefix_)) near.insert(near.begin(), back->first);
  }
  for (auto fwd = pos; fwd != catalog_->tensors.end() && near.size() < 4; ++fwd) {
    if (fwd->first.starts_with(prefix_)) near.push_back(fwd->first);
  }
  fail("{}: no tensor '{}'{} (nearby names: {})", catalog_->uri, full,
       prefix_.empty() ? "" : fmt::format(" in view '{}'", prefix_.substr(0, prefix_.size() - 1)),
       near.empty() ? "none" : fmt::format("{}", fmt::join(near, ", ")));
}

StoredTensor Store::rows(std::string_view name) const {
  const size_t open = name.rfind('[');
  if (open == std::string_view::npos || name.back() != ']') return at(name);
  const std::string_view range = name.substr(open + 1, name.size() - open - 2);
  const size_t colon = range.find(':');
  int64_t first = -1, end = -1;
  auto number = [](std::string_view t, int64_t& v) {
    return !t.empty() &&
           std::from_chars(t.data(), t.data() + t.size(), v).ptr == t.data() + t.size();
  };
  PRISM_CHECK(colon != std::string_view::npos && number(range.substr(0, colon), first) &&
                  number(range.substr(colon + 1), end),
              "{}: '{}' is not a tensor's name followed by [first:end] rows", catalog_->uri, name);
  StoredTensor t = at(name.substr(0, open));
  const int64_t rows = t.info.shape.empty() ? 1 : t.info.shape[0];
  PRISM_CHECK(!t.info.shape.empty() && first >= 0 && first < end && end <= rows,
              "{}: rows {}..{} of tensor '{}' are outside its {} rows", catalog_->uri, first, end,
              name.substr(0, open), rows);
  if (t.decoded()) {  // its stored rows, picked from the whole tensor's as it loads
    PRISM_CHECK(t.info.shape.size() >= 2, "{}: tensor '{}' of {} dims cannot be cut into rows",
                catalog_->uri, name.substr(0, open), t.info.shape.size());
    std::vector<int64_t> order(end - first);
    for (int64_t r = first; r < end; ++r) order[r - first] = t.stored_row(r);
    t.row_order = std::move(order);
  } else {
    const uint64_t row_bytes = t.bytes / rows;
    t.offset += first * row_bytes;
    t.bytes = (end - first) * row_bytes;
  }
  t.info.shape[0] = end - first;
  t.info.name = std::string(name);
  return t;
}

Shape Store::shape(std::string_view name) const { return rows(name).info.core_shape(); }

std::vector<std::string> Store::names() const {
  std::vector<std::string> out;
  for (auto it = catalog_->tensors.lower_bound(prefix_);
       it != catalog_->tensors.end() && it->first.starts_with(prefix_); ++it) {
    out.push_back(it->first.substr(prefix_.size()));
  }
  return out;
}

size_t Store::size() const {
  if (prefix_.empty()) return catalog_->tensors.size();
  return names().size();
}

uint64_t Store::total_bytes() const {
  uint64_t total = 0;
  for (auto it = catalog_->tensors.lower_bound(prefix_);
       it != catalog_->tensors.end() && it->first.starts_with(prefix_); ++it) {
    total += it->second.bytes;
  }
  return total;
}

void Store::read_tensor_bytes(std::string_view name, std::span<std::byte> out,
                              const ReadOptions& options) const {
  TensorRead read{std::string(name), out};
  read_tensors(std::span(&read, 1), options);
}

void Store::read_tensors(std::span<const TensorRead> reads, const ReadOptions& options) const {
  std::vector<ReadRange> ranges;
  ranges.reserve(reads.size());
  for (const auto& r : reads) {
    const StoredTensor& t = at(r.name);
    if (r.out.size() != t.bytes) {
      fail("{}: tensor '{}' is {} bytes ({} {}) but the destination holds {}", catalog_->uri,
           t.info.name, t.bytes, name(t.info.dtype), t.info.shape_str(), r.out.size());
    }
    ranges.push_back({t.file.get(), t.offset, r.out});
  }
  read_ranges(ranges, options);
}

std::span<const std::byte> Store::mapped_bytes(std::string_view name) const {
  const StoredTensor t = rows(name);
  auto mapped = t.file->mapped();
  if (mapped.empty() || (t.decoded() && !t.blocks_as_stored())) return {};
  return mapped.subspan(t.offset, t.bytes);
}

}  // namespace prism::io
