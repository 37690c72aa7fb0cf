#include "prism/io/vfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "prism/core/error.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
namespace {

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all_at(int fd, std::span<const std::byte> bytes, uint64_t offset,
                  const std::string& path) {
  for (size_t written = 0; written < bytes.size();) {
    ssize_t n = ::pwrite(fd, bytes.data() + written, bytes.size() - written,
                         static_cast<off_t>(offset + written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    written += static_cast<size_t>(n);
  }
}

}  // namespace

void File::read_to(uint64_t offset, uint64_t length, const ByteSink& sink) const {
  constexpr uint64_t kPiece = 4ull << 20;
  std::vector<std::byte> buffer(std::min(length, kPiece));
  for (uint64_t done = 0; done < length; done += buffer.size()) {
    auto piece = std::span(buffer).first(std::min<uint64_t>(buffer.size(), length - done));
    read_at(offset + done, piece);
    sink(done, piece);
  }
}

std::string_view scheme_of(std::string_view uri) {
  size_t colon = uri.find("://");
  if (colon == std::string_view::npos) return "file";
  return uri.substr(0, colon);
}

FileSystem& filesystem_for(std::string_view uri) {
  std::string_view scheme = scheme_of(uri);
  if (scheme == "file") return local_filesystem();
  if (scheme == "http" || scheme == "https") return http_filesystem();
  if (scheme == "hf") return hf_filesystem();
  if (scheme == "s3") return s3_filesystem();
  fail("{}: unsupported scheme '{}' (expected a local path, file://, https://, hf:// or s3://)",
       uri, scheme);
}

std::shared_ptr<File> open(std::string_view uri, const OpenOptions& options) {
  return filesystem_for(uri).open(uri, options);
}
FileEntry stat(std::string_view uri) { return filesystem_for(uri).stat(uri); }
std::vector<FileEntry> list(std::string_view uri, bool recursive) {
  return filesystem_for(uri).list(uri, recursive);
}

bool exists(std::string_view uri) {
  try {
    stat(uri);
    return true;
  } catch (const NotFoundError&) {
    return false;  // anything else (auth, network) must not read as "absent": it propagates
  }
}

std::string read_text(std::string_view uri) {
  auto file = open(uri);
  std::string text(file->size(), '\0');
  file->read_at(0, std::as_writable_bytes(std::span(text)));
  return text;
}

std::string join(std::string_view base, std::string_view relative) {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  if (relative.empty()) return std::string(base);
  if (base.empty()) return std::string(relative);
  std::string out(base);
  if (out.back() != '/') out += '/';
  out += relative;
  return out;
}

std::string_view base_name(std::string_view uri) {
  while (uri.size() > 1 && uri.back() == '/') uri.remove_suffix(1);
  size_t slash = uri.rfind('/');
  return slash == std::string_view::npos ? uri : uri.substr(slash + 1);
}

std::string_view parent_of(std::string_view uri) {
  while (uri.size() > 1 && uri.back() == '/') uri.remove_suffix(1);
  size_t slash = uri.rfind('/');
  if (slash == std::string_view::npos) return ".";
  return slash == 0 ? uri.substr(0, 1) : uri.substr(0, slash);
}

void read_ranges(std::span<const ReadRange> ranges, const ReadOptions& options) {
  PRISM_CHECK(options.chunk_size > 0, "read_ranges: chunk_size must be positive");
  std::vector<ReadRange> chunks;
  for (const ReadRange& range : ranges) {
    for (uint64_t done = 0; done < range.out.size(); done += options.chunk_size) {
      uint64_t len = std::min<uint64_t>(options.chunk_size, range.out.size() - done);
      chunks.push_back({range.file, range.offset + done, range.out.subspan(done, len)});
    }
  }
  parallel_for(chunks.size(), options.parallelism,
               [&](size_t i) { chunks[i].file->read_at(chunks[i].offset, chunks[i].out); });
}

void copy_to_local(std::string_view uri, const std::string& dest, const ReadOptions& options) {
  copy_to_local(*open(uri), dest, options, ".partial");
}

void copy_to_local(const File& source, const std::string& dest, const ReadOptions& options,
                   const std::string& partial_suffix,
                   const std::function<void(const std::string&)>& verify) {
  std::string partial = dest + partial_suffix;
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", partial, std::strerror(errno));
  FdCloser closer{fd};
  try {
    uint64_t size = source.size();
    uint64_t chunk = std::max<uint64_t>(options.chunk_size, 1);
    size_t chunks = (size + chunk - 1) / chunk;
    // Each chunk streams straight into its place in the file: memory stays bounded by what
    // the transport buffers, whatever the chunk size.
    parallel_for(chunks, options.parallelism, [&](size_t i) {
      uint64_t start = i * chunk;
      source.read_to(start, std::min(chunk, size - start),
                     [&](uint64_t offset, std::span<const std::byte> bytes) {
                       write_all_at(fd, bytes, start + offset, partial);
                     });
    });
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", partial, std::strerror(errno));
    if (verify) verify(partial);
    if (::rename(partial.c_str(), dest.c_str()) != 0) {
      fail("{}: cannot rename to {}: {}", partial, dest, std::strerror(errno));
    }
  } catch (...) {
    ::unlink(partial.c_str());
    throw;
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::string partial = path + ".partial";
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", partial, std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  bool ok = written == bytes.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(partial.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(partial.c_str());
    fail("{}: write failed: {}", path, std::strerror(err));
  }
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace prism::io
