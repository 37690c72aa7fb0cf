#include "prism/io/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "prism/core/error.h"

namespace prism::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is written little-endian");

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // GGUF's default: no general.alignment key needed

uint64_t align(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

// A file descriptor that writes everything it is given, naming the path in errors.
class Output {
 public:
  // Writes `file`; errors name `path`, the file it will become.
  Output(const std::string& file, std::string path) : path_(std::move(path)) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot write {}: {}", path_, std::strerror(errno));
  }
  ~Output() {
    if (fd_ >= 0) ::close(fd_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  void write(std::span<const std::byte> bytes) {
    const std::byte* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write {}: {}", path_, std::strerror(errno));
      p += n;
      left -= static_cast<size_t>(n);
    }
    written_ += bytes.size();
  }
  void zeros(uint64_t n) {
    static constexpr std::byte kZeros[kAlignment] = {};
    write(std::span(kZeros, n));
  }
  uint64_t written() const { return written_; }
  // Flushed to the disk before the rename, so that a crash cannot leave the target renamed
  // but empty.
  void close() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      fail("cannot write {}: {}", path_, std::strerror(errno));
    }
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

}  // namespace

void GgufWriter::add_key(std::string key, GgufValueType type, std::string encoded) {
  PRISM_CHECK(std::find(keys_.begin(), keys_.end(), key) == keys_.end(),
              "gguf: metadata key '{}' set twice", key);
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
  kv_ += encoded;
  keys_.push_back(std::move(key));
}

void GgufWriter::set_u32(std::string key, uint32_t v) {
  std::string e;
  put(e, v);
  add_key(std::move(key), GgufValueType::UINT32, std::move(e));
}
void GgufWriter::set_i32(std::string key, int32_t v) {
  std::string e;
  put(e, v);
  add_key(std::move(key), GgufValueType::INT32, std::move(e));
}
void GgufWriter::set_f32(std::string key, float v) {
  std::string e;
  put(e, v);
  add_key(std::move(key), GgufValueType::FLOAT32, std::move(e));
}
void GgufWriter::set_bool(std::string key, bool v) {
  std::string e;
  put<uint8_t>(e, v ? 1 : 0);
  add_key(std::move(key), GgufValueType::BOOL, std::move(e));
}
void GgufWriter::set_string(std::string key, std::string_view v) {
  std::string e;
  put_string(e, v);
  add_key(std::move(key), GgufValueType::STRING, std::move(e));
}
void GgufWriter::set_strings(std::string key, const std::vector<std::string>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufValueType::STRING));
  put<uint64_t>(e, v.size());
  for (const std::string& s : v) put_string(e, s);
  add_key(std::move(key), GgufValueType::ARRAY, std::move(e));
}
void GgufWriter::set_i32s(std::string key, std::span<const int32_t> v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufValueType::INT32));
  put<uint64_t>(e, v.size());
  e.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
  add_key(std::move(key), GgufValueType::ARRAY, std::move(e));
}

void GgufWriter::set_bools(std::string key, const std::vector<bool>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufValueType::BOOL));
  put<uint64_t>(e, v.size());
  for (bool b : v) put<uint8_t>(e, b ? 1 : 0);
  add_key(std::move(key), GgufValueType::ARRAY, std::move(e));
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> shape, quant::GgmlType type) {
  for (const Tensor& t : tensors_) {
    PRISM_CHECK(t.name != name, "gguf: tensor '{}' added twice", name);
  }
  PRISM_CHECK(!shape.empty() && shape.size() <= 4, "gguf: tensor '{}' has {} dims (1 to 4)", name,
              shape.size());
  const quant::GgmlTypeInfo& info = quant::info(type);
  int64_t n = 1;
  for (int64_t d : shape) {
    PRISM_CHECK(d > 0, "gguf: tensor '{}' has a dim of {}", name, d);
    n *= d;
  }
  PRISM_CHECK(shape.back() % info.block_elements == 0,
              "gguf: tensor '{}' has rows of {}, not whole {} blocks of {}", name, shape.back(),
              info.name, info.block_elements);
  Tensor t{std::move(name), std::move(shape), type, align(data_bytes_), 0};
  t.bytes = static_cast<uint64_t>(n / info.block_elements * info.block_bytes);
  data_bytes_ = t.offset + t.bytes;
  tensors_.push_back(std::move(t));
}

void GgufWriter::write(const std::string& path,
                       const std::function<void(size_t tensor, const Sink& sink)>& fill) const {
  std::string header;
  header += "GGUF";
  put<uint32_t>(header, kVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, keys_.size());
  header += kv_;
  for (const Tensor& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(header, *d);
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, t.offset);
  }

  // The temporary file sits beside the target, so the rename stays within one filesystem.
  const std::string temp = fmt::format("{}.tmp{}", path, ::getpid());
  try {
    Output out(temp, path);
    out.write(std::as_bytes(std::span(header)));
    out.zeros(align(header.size()) - header.size());
    const uint64_t data_start = out.written();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      out.zeros(data_start + t.offset - out.written());
      const uint64_t begin = out.written();
      fill(i, [&](std::span<const std::byte> bytes) {
        PRISM_CHECK(out.written() - begin + bytes.size() <= t.bytes,
                    "gguf: tensor '{}' was given more than its {} bytes", t.name, t.bytes);
        out.write(bytes);
      });
      PRISM_CHECK(out.written() - begin == t.bytes,
                  "gguf: tensor '{}' was given {} bytes, it has {}", t.name, out.written() - begin,
                  t.bytes);
    }
    out.close();
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      fail("cannot write {}: {}", path, std::strerror(errno));
    }
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
}

}  // namespace prism::io
