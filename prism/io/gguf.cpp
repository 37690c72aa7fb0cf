#include "prism/io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "prism/core/error.h"
#include "prism/quant/dequantize.h"

namespace prism::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read as little-endian; a big-endian host would need byte swaps");

constexpr uint64_t kDefaultAlignment = 32;
// A header past this is corrupt, not a model: the largest real ones (vocabularies of 256k
// tokens with their merges) are a few tens of MiB. It bounds what a corrupt count or length
// can make the reader read or allocate, whatever the file's size.
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
// The smallest encodings, to check a count against the bytes left before reserving anything.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;        // empty key, type, a 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims, type, offset
// Ranged reads of a remote header start small and double, so a small header costs one
// request and a large one a handful.
constexpr uint64_t kFirstRead = 64ull << 10;
constexpr uint64_t kMaxRead = 16ull << 20;

struct ValueTypeInfo {
  std::string_view name;
  uint64_t size;  // bytes of a scalar; 0 for STRING and ARRAY
};

// Indexed by GgufValueType.
constexpr ValueTypeInfo kValueTypes[] = {
    {"UINT8", 1},  {"INT8", 1},    {"UINT16", 2},  {"INT16", 2},  {"UINT32", 4},
    {"INT32", 4},  {"FLOAT32", 4}, {"BOOL", 1},    {"STRING", 0}, {"ARRAY", 0},
    {"UINT64", 8}, {"INT64", 8},   {"FLOAT64", 8},
};

const ValueTypeInfo& value_info(GgufValueType t) { return kValueTypes[static_cast<uint32_t>(t)]; }

bool is_signed(GgufValueType t) {
  return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
         t == GgufValueType::INT64;
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufValueType t) {
  return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64;
}

// A scalar's stored bytes (zero-extended into 64 bits) as the number it is.
int64_t signed_of(GgufValueType t, uint64_t bits) {
  if (!is_signed(t)) return static_cast<int64_t>(bits);
  const unsigned width = 8 * static_cast<unsigned>(value_info(t).size);
  if (width == 64) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (width - 1);
  return static_cast<int64_t>((bits ^ sign) - sign);  // sign-extends
}

double float_of(GgufValueType t, uint64_t bits) {
  if (t == GgufValueType::FLOAT32) {
    float f;
    auto b32 = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b32, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// A string for one line: control characters escaped, long strings cut.
std::string quoted(std::string_view s, size_t max_chars = 60) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (s.size() > max_chars) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string scalar_text(GgufValueType t, uint64_t bits) {
  if (t == GgufValueType::BOOL) return bits ? "true" : "false";
  if (t == GgufValueType::FLOAT32) return fmt::format("{}", static_cast<float>(float_of(t, bits)));
  if (t == GgufValueType::FLOAT64) return fmt::format("{}", float_of(t, bits));
  if (t == GgufValueType::UINT64) return fmt::format("{}", bits);
  return fmt::format("{}", signed_of(t, bits));
}

}  // namespace

std::string_view name(GgufValueType type) {
  auto i = static_cast<uint32_t>(type);
  return i < std::size(kValueTypes) ? kValueTypes[i].name : std::string_view("?");
}

// ---------------------------------------------------------------------------------------------
// GgufValue

bool GgufValue::is_integer() const { return is_integer_type(type_); }
bool GgufValue::is_float() const { return is_float_type(type_); }

int64_t GgufValue::as_int() const {
  if (!is_integer()) fail("value is {}, not an integer", name(type_));
  if (type_ == GgufValueType::UINT64 && bits_ > static_cast<uint64_t>(INT64_MAX)) {
    fail("UINT64 value {} does not fit in int64", bits_);
  }
  return signed_of(type_, bits_);
}

uint64_t GgufValue::as_uint() const {
  if (!is_integer()) fail("value is {}, not an integer", name(type_));
  if (type_ == GgufValueType::UINT64) return bits_;
  int64_t v = signed_of(type_, bits_);
  if (v < 0) fail("value {} is negative", v);
  return static_cast<uint64_t>(v);
}

double GgufValue::as_float() const {
  if (!is_float()) fail("value is {}, not FLOAT32 or FLOAT64", name(type_));
  return float_of(type_, bits_);
}

bool GgufValue::as_bool() const {
  if (type_ != GgufValueType::BOOL) fail("value is {}, not BOOL", name(type_));
  return bits_ != 0;
}

std::string_view GgufValue::as_string() const {
  if (type_ != GgufValueType::STRING) fail("value is {}, not STRING", name(type_));
  return chars_;
}

void GgufValue::expect_array(const char* what) const {
  if (!is_array()) fail("value is {}, not an array", name(type_));
  const std::string_view want(what);
  const bool ok = want == "integer" ? is_integer_type(element_)
                  : want == "float" ? is_float_type(element_)
                  : want == "BOOL"  ? element_ == GgufValueType::BOOL
                                    : element_ == GgufValueType::STRING;
  if (!ok) fail("value is an array of {}, not of {}", name(element_), what);
}

size_t GgufValue::size() const {
  if (!is_array()) fail("value is {}, not an array", name(type_));
  return count_;
}

namespace {
uint64_t element_bits_of(const std::vector<std::byte>& raw, uint64_t size, size_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, raw.data() + i * size, size);
  return bits;
}
}  // namespace

int64_t GgufValue::int_at(size_t i) const {
  expect_array("integer");
  PRISM_CHECK(i < count_, "index {} past the array's {} elements", i, count_);
  uint64_t bits = element_bits_of(raw_, value_info(element_).size, i);
  if (element_ == GgufValueType::UINT64 && bits > static_cast<uint64_t>(INT64_MAX)) {
    fail("UINT64 element {} ({}) does not fit in int64", i, bits);
  }
  return signed_of(element_, bits);
}

double GgufValue::float_at(size_t i) const {
  expect_array("float");
  PRISM_CHECK(i < count_, "index {} past the array's {} elements", i, count_);
  return float_of(element_, element_bits_of(raw_, value_info(element_).size, i));
}

bool GgufValue::bool_at(size_t i) const {
  expect_array("BOOL");
  PRISM_CHECK(i < count_, "index {} past the array's {} elements", i, count_);
  return raw_[i] != std::byte{0};
}

std::string_view GgufValue::string_at(size_t i) const {
  expect_array("STRING");
  PRISM_CHECK(i < count_, "index {} past the array's {} elements", i, count_);
  uint64_t begin = i ? ends_[i - 1] : 0;
  return std::string_view(chars_).substr(begin, ends_[i] - begin);
}

std::vector<int64_t> GgufValue::ints() const {
  expect_array("integer");
  std::vector<int64_t> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = int_at(i);
  return out;
}

std::vector<double> GgufValue::floats() const {
  expect_array("float");
  std::vector<double> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = float_at(i);
  return out;
}

std::vector<std::string_view> GgufValue::strings() const {
  expect_array("STRING");
  std::vector<std::string_view> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = string_at(i);
  return out;
}

std::string GgufValue::to_string(size_t max_items) const {
  if (type_ == GgufValueType::STRING) return fmt::format("STRING {}", quoted(chars_));
  if (!is_array()) return fmt::format("{} {}", name(type_), scalar_text(type_, bits_));
  std::string out = fmt::format("ARRAY[{}] of {}", name(element_), count_);
  for (size_t i = 0; i < count_ && i < max_items; ++i) {
    out += i ? ", " : ": ";
    if (element_ == GgufValueType::STRING) {
      out += quoted(string_at(i), 30);
    } else {
      out += scalar_text(element_, element_bits_of(raw_, value_info(element_).size, i));
    }
  }
  if (count_ > max_items) out += ", ...";
  return out;
}

// ---------------------------------------------------------------------------------------------
// GgufTensor

int64_t GgufTensor::numel() const {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

std::string GgufTensor::shape_str() const { return fmt::format("[{}]", fmt::join(shape(), ", ")); }

int64_t GgufTensor::blocks() const { return numel() / quant::info(type).block_elements; }

// ---------------------------------------------------------------------------------------------
// The reader: a cursor over the header's bytes, from memory or through ranged reads.

class GgufReader {
 public:
  GgufReader(const File* file, std::span<const std::byte> memory, uint64_t size,
             std::string_view uri)
      : file_(file), memory_(memory), size_(size), uri_(uri) {}

  GgufHeader parse();

 private:
  uint64_t left() const { return std::min(size_, kMaxHeaderBytes) - pos_; }

  // The next n bytes, valid until the next call.
  const std::byte* take(uint64_t n) {
    if (n > size_ - pos_) {
      fail("{}: truncated: {} needs {} bytes at offset {}, but the file ends at {}", uri_, where_,
           n, pos_, size_);
    }
    if (pos_ + n > kMaxHeaderBytes) {
      fail("{}: {} at offset {} runs past {} MiB of header; the file is corrupt", uri_, where_,
           pos_, kMaxHeaderBytes >> 20);
    }
    const std::byte* p;
    if (!memory_.empty()) {
      p = memory_.data() + pos_;
    } else {
      if (pos_ < window_start_ || pos_ + n > window_start_ + window_.size()) {
        uint64_t want = std::min(std::max(n, next_read_), size_ - pos_);
        window_.resize(want);
        file_->read_at(pos_, window_);
        window_start_ = pos_;
        next_read_ = std::min(next_read_ * 2, kMaxRead);
      }
      p = window_.data() + (pos_ - window_start_);
    }
    pos_ += n;
    return p;
  }

  template <typename T>
  T read() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }

  // A string's length, checked against the bytes that are left before anything is read.
  uint64_t string_length() {
    uint64_t length = read<uint64_t>();
    if (length > left()) {
      fail(
          "{}: {}: a string of {} bytes at offset {} runs past the end of the {}; the file is "
          "truncated or corrupt",
          uri_, where_, length, pos_,
          size_ <= kMaxHeaderBytes
              ? fmt::format("file ({} bytes)", size_)
              : fmt::format("{} MiB a header may take", kMaxHeaderBytes >> 20));
    }
    return length;
  }

  std::string read_string() {
    uint64_t length = string_length();
    const std::byte* p = take(length);
    return std::string(reinterpret_cast<const char*>(p), length);
  }

  GgufValueType value_type(uint32_t id, const char* what) {
    if (id >= std::size(kValueTypes)) fail("{}: {}: unknown {} {}", uri_, where_, what, id);
    return static_cast<GgufValueType>(id);
  }

  uint64_t read_bool_bits() {
    auto b = read<uint8_t>();
    if (b > 1)
      fail("{}: {}: BOOL byte {} at offset {} is neither 0 nor 1", uri_, where_, b, pos_ - 1);
    return b;
  }

  GgufValue read_value(GgufValueType type) {
    GgufValue v;
    v.type_ = type;
    if (type == GgufValueType::STRING) {
      v.chars_ = read_string();
    } else if (type == GgufValueType::BOOL) {
      v.bits_ = read_bool_bits();
    } else if (type != GgufValueType::ARRAY) {
      const uint64_t size = value_info(type).size;
      std::memcpy(&v.bits_, take(size), size);
    } else {
      read_array(v);
    }
    return v;
  }

  void read_array(GgufValue& v) {
    v.element_ = value_type(read<uint32_t>(), "array element type");
    if (v.element_ == GgufValueType::ARRAY) {
      fail("{}: {}: arrays of arrays are not supported", uri_, where_);
    }
    const uint64_t count = read<uint64_t>();
    const bool strings = v.element_ == GgufValueType::STRING;
    const uint64_t min_bytes = strings ? 8 : value_info(v.element_).size;
    if (count > left() / min_bytes) {
      fail(
          "{}: {}: an array of {} {} at offset {} cannot fit in the {} bytes left; the file is "
          "truncated or corrupt",
          uri_, where_, count, name(v.element_), pos_, left());
    }
    v.count_ = count;
    if (strings) {
      v.ends_.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t length = string_length();
        v.chars_.append(reinterpret_cast<const char*>(take(length)), length);
        v.ends_.push_back(v.chars_.size());
      }
    } else if (v.element_ == GgufValueType::BOOL) {
      v.raw_.resize(count);
      for (uint64_t i = 0; i < count; ++i) v.raw_[i] = static_cast<std::byte>(read_bool_bits());
    } else {
      // Taken in pieces, so that a ranged reader's window never has to hold a whole large
      // array at once.
      const uint64_t bytes = count * min_bytes;
      v.raw_.resize(bytes);
      for (uint64_t done = 0; done < bytes;) {
        uint64_t piece = std::min<uint64_t>(bytes - done, 1u << 20);
        std::memcpy(v.raw_.data() + done, take(piece), piece);
        done += piece;
      }
    }
  }

  void read_metadata(GgufHeader& h, uint64_t n_kv) {
    h.metadata.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      where_ = fmt::format("metadata key-value {} of {}", i, n_kv);
      std::string key = read_string();
      where_ = fmt::format("metadata '{}'", key);
      GgufValueType type = value_type(read<uint32_t>(), "value type");
      GgufValue value = read_value(type);
      if (!h.key_index_.emplace(key, h.metadata.size()).second) {
        fail("{}: metadata key '{}' appears twice", uri_, key);
      }
      h.metadata.emplace_back(std::move(key), std::move(value));
    }
    if (const GgufValue* a = h.find("general.alignment")) {
      if (a->type() != GgufValueType::UINT32) {
        fail("{}: general.alignment is {}, it must be UINT32", uri_, name(a->type()));
      }
      uint64_t alignment = a->as_uint();
      if (alignment == 0 || !std::has_single_bit(alignment)) {
        fail("{}: general.alignment {} is not a power of two", uri_, alignment);
      }
      h.alignment = alignment;
    }
  }

  GgufTensor read_tensor_info(uint64_t i, uint64_t n_tensors) {
    GgufTensor t;
    where_ = fmt::format("tensor info {} of {}", i, n_tensors);
    t.name = read_string();
    where_ = fmt::format("tensor '{}'", t.name);
    const auto n_dims = read<uint32_t>();
    if (n_dims > kMaxDims)
      fail("{}: {} has {} dims, at most {} are allowed", uri_, where_, n_dims, kMaxDims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = read<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX)) {
        fail("{}: {}: dim {} is {}, which does not fit in int64", uri_, where_, d, dim);
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    for (int64_t dim : t.dims) {
      if (dim != 0 && numel > INT64_MAX / dim) {
        fail("{}: {}: dims {} have more elements than int64 can count", uri_, where_,
             fmt::join(t.dims, " x "));
      }
      numel *= dim;
    }
    const auto type_id = read<uint32_t>();
    auto type = quant::ggml_type_from_id(type_id);
    if (!type) fail("{}: {}: unknown ggml type {}", uri_, where_, type_id);
    t.type = *type;
    t.offset = read<uint64_t>();
    const quant::GgmlTypeInfo& info = quant::info(t.type);
    // Blocks never straddle rows: ggml quantizes each row on its own.
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % info.block_elements != 0) {
      fail("{}: {}: rows of {} elements are not whole {} blocks of {}", uri_, where_, row,
           info.name, info.block_elements);
    }
    const auto blocks = static_cast<uint64_t>(numel / info.block_elements);
    if (blocks > UINT64_MAX / static_cast<uint64_t>(info.block_bytes)) {
      fail("{}: {}: {} x {} needs more bytes than a file can hold", uri_, where_, info.name,
           t.shape_str());
    }
    t.bytes = blocks * static_cast<uint64_t>(info.block_bytes);
    return t;
  }

  // Every tensor inside the file, aligned, and no two sharing a byte.
  void check_placement(GgufHeader& h) {
    for (GgufTensor& t : h.tensors) {
      if (t.offset % h.alignment != 0) {
        fail("{}: tensor '{}': offset {} is not a multiple of the alignment {}", uri_, t.name,
             t.offset, h.alignment);
      }
      if (t.offset > size_ || h.data_offset > size_ - t.offset ||
          t.bytes > size_ - h.data_offset - t.offset) {
        fail(
            "{}: tensor '{}' ({} {}, {} bytes at data offset {}) lies outside the file: the "
            "data section starts at {} and the file has {} bytes; truncated or corrupt",
            uri_, t.name, quant::name(t.type), t.shape_str(), t.bytes, t.offset, h.data_offset,
            size_);
      }
      t.file_offset = h.data_offset + t.offset;
    }
    std::vector<const GgufTensor*> order;
    order.reserve(h.tensors.size());
    for (const GgufTensor& t : h.tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensor& a = *order[i - 1];
      const GgufTensor& b = *order[i];
      if (b.offset < a.offset + a.bytes) {
        fail("{}: tensor '{}' (data bytes [{}, {})) overlaps tensor '{}' ([{}, {}))", uri_, b.name,
             b.offset, b.offset + b.bytes, a.name, a.offset, a.offset + a.bytes);
      }
    }
  }

  const File* file_;
  std::span<const std::byte> memory_;
  uint64_t size_;
  std::string_view uri_;
  uint64_t pos_ = 0;
  std::vector<std::byte> window_;
  uint64_t window_start_ = 0;
  uint64_t next_read_ = kFirstRead;
  std::string where_ = "the header";
};

GgufHeader GgufReader::parse() {
  GgufHeader h;
  h.uri = std::string(uri_);
  h.file_size = size_;
  where_ = "the magic";
  if (size_ < 4)
    fail("{}: not a GGUF file: it has {} bytes, fewer than the 4 of the magic", uri_, size_);
  const std::byte* magic = take(4);
  if (!is_gguf_magic({magic, 4})) {
    std::string shown;
    for (int i = 0; i < 4; ++i) shown += fmt::format("{:02x}", static_cast<uint8_t>(magic[i]));
    fail("{}: not a GGUF file: it starts with bytes {}, not \"GGUF\"", uri_, shown);
  }
  where_ = "the header";
  h.version = read<uint32_t>();
  if (h.version == 1) {
    fail(
        "{}: GGUF version 1 is not supported (it predates 64-bit counts); convert the model "
        "again with a current llama.cpp",
        uri_);
  }
  if (h.version != 2 && h.version != 3) {
    uint32_t swapped = __builtin_bswap32(h.version);
    if (swapped == 2 || swapped == 3) {
      fail("{}: a big-endian GGUF file (version {}); only little-endian files are supported", uri_,
           swapped);
    }
    fail("{}: unsupported GGUF version {} (versions 2 and 3 are read)", uri_, h.version);
  }
  const auto n_tensors = read<uint64_t>();
  const auto n_kv = read<uint64_t>();
  if (n_kv > left() / kMinKeyValueBytes) {
    fail(
        "{}: {} metadata key-values cannot fit in the {} bytes left; the file is truncated or "
        "corrupt",
        uri_, n_kv, left());
  }
  if (n_tensors > (left() - n_kv * kMinKeyValueBytes) / kMinTensorInfoBytes) {
    fail(
        "{}: {} tensor infos (and {} key-values) cannot fit in the {} bytes left; the file is "
        "truncated or corrupt",
        uri_, n_tensors, n_kv, left());
  }
  h.alignment = kDefaultAlignment;
  read_metadata(h, n_kv);
  h.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t = read_tensor_info(i, n_tensors);
    if (!h.tensor_index_.emplace(t.name, h.tensors.size()).second) {
      fail("{}: tensor '{}' appears twice", uri_, t.name);
    }
    h.tensors.push_back(std::move(t));
  }
  // pos_ is at most kMaxHeaderBytes and the alignment a power of two below 2^32: no overflow.
  h.data_offset = (pos_ + h.alignment - 1) / h.alignment * h.alignment;
  check_placement(h);
  return h;
}

// ---------------------------------------------------------------------------------------------
// GgufHeader

GgufHeader GgufHeader::read(const File& file) {
  std::span<const std::byte> mapped = file.mapped();
  return GgufReader(&file, mapped, file.size(), file.uri()).parse();
}

GgufHeader GgufHeader::parse(std::span<const std::byte> bytes, std::string_view uri) {
  // An empty span would read as "no memory": nothing to read either way, so the magic check
  // reports it.
  return GgufReader(nullptr, bytes, bytes.size(), uri).parse();
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata[it->second].second;
}

const GgufValue& GgufHeader::at(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: no metadata key '{}'", uri, key);
  return *v;
}

namespace {
// Runs a GgufValue accessor, adding the file and key to its error.
template <typename Fn>
auto with_context(const std::string& uri, std::string_view key, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    fail("{}: metadata '{}': {}", uri, key, e.what());
  }
}
}  // namespace

std::string_view GgufHeader::get_string(std::string_view key) const {
  const GgufValue& v = at(key);
  return with_context(uri, key, [&] { return v.as_string(); });
}

int64_t GgufHeader::get_int(std::string_view key) const {
  const GgufValue& v = at(key);
  return with_context(uri, key, [&] { return v.as_int(); });
}

double GgufHeader::get_float(std::string_view key) const {
  const GgufValue& v = at(key);
  return with_context(uri, key, [&] { return v.as_float(); });
}

bool GgufHeader::get_bool(std::string_view key) const {
  const GgufValue& v = at(key);
  return with_context(uri, key, [&] { return v.as_bool(); });
}

const GgufValue& GgufHeader::get_array(std::string_view key) const {
  const GgufValue& v = at(key);
  if (!v.is_array()) fail("{}: metadata '{}': value is {}, not an array", uri, key, name(v.type()));
  return v;
}

const GgufTensor* GgufHeader::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

const GgufTensor& GgufHeader::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) fail("{}: no tensor '{}'", uri, name);
  return *t;
}

uint64_t GgufHeader::data_bytes() const {
  uint64_t total = 0;
  for (const GgufTensor& t : tensors) total += t.bytes;
  return total;
}

void GgufHeader::read_tensor_bytes(const File& file, const GgufTensor& t,
                                   std::span<std::byte> out) const {
  PRISM_CHECK(out.size() == t.bytes, "{}: tensor '{}' has {} bytes, the buffer {}", uri, t.name,
              t.bytes, out.size());
  file.read_at(t.file_offset, out);
}

std::vector<float> GgufHeader::read_f32(const File& file, const GgufTensor& t) const {
  if (!quant::can_dequantize(t.type)) {
    fail("{}: tensor '{}' is {}, which cannot be dequantized yet", uri, t.name,
         quant::name(t.type));
  }
  std::vector<std::byte> bytes(t.bytes);
  read_tensor_bytes(file, t, bytes);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  quant::dequantize(t.type, bytes, out);
  return out;
}

bool is_gguf_magic(std::span<const std::byte> first_bytes) {
  return first_bytes.size() >= 4 && std::memcmp(first_bytes.data(), "GGUF", 4) == 0;
}

bool is_gguf(const File& file) {
  std::string_view uri = file.uri();
  if (uri.size() >= 5 && uri.substr(uri.size() - 5) == ".gguf") return true;
  if (file.size() < 4) return false;
  std::byte magic[4];
  file.read_at(0, magic);
  return is_gguf_magic(magic);
}

}  // namespace prism::io
