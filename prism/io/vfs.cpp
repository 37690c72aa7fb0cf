#include "prism/io/vfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

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

// Where a resumable copy stands: the bytes written of each chunk, kept in "<partial>.progress"
// beside the partial file and updated after each write to it. A process killed at any point
// (kill -9 included) leaves the two consistent, since a write has returned before its progress
// is recorded; the next copy of the same source asks only for what is missing. The record is
// "PRISMPG1", the size, the chunk size, then one count a chunk (host byte order: it never
// leaves the machine).
class CopyProgress {
 public:
  static constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'P', 'G', '1'};
  static constexpr size_t kHeader = sizeof(kMagic) + 2 * sizeof(uint64_t);

  // Reads the record when `resume` and it describes a copy of this size and chunking;
  // otherwise starts a new one (every chunk at 0). resumed() says which.
  CopyProgress(std::string path, uint64_t size, uint64_t chunk, size_t chunks, bool resume)
      : path_(std::move(path)), done_(chunks, 0) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) fail("{}: cannot create: {}", path_, std::strerror(errno));
    std::vector<char> record(kHeader + chunks * sizeof(uint64_t));
    if (resume &&
        ::pread(fd_, record.data(), record.size(), 0) == static_cast<ssize_t>(record.size())) {
      uint64_t header[2];
      std::memcpy(header, record.data() + sizeof(kMagic), sizeof(header));
      if (std::memcmp(record.data(), kMagic, sizeof(kMagic)) == 0 && header[0] == size &&
          header[1] == chunk) {
        std::memcpy(done_.data(), record.data() + kHeader, chunks * sizeof(uint64_t));
        resumed_ = true;
      }
    }
    if (!resumed_) {
      std::fill(record.begin(), record.end(), 0);
      std::memcpy(record.data(), kMagic, sizeof(kMagic));
      uint64_t header[2] = {size, chunk};
      std::memcpy(record.data() + sizeof(kMagic), header, sizeof(header));
      if (::ftruncate(fd_, 0) != 0) fail("{}: cannot truncate: {}", path_, std::strerror(errno));
      write_all_at(fd_, std::as_bytes(std::span(record)), 0, path_);
    }
  }
  ~CopyProgress() { ::close(fd_); }
  CopyProgress(const CopyProgress&) = delete;
  CopyProgress& operator=(const CopyProgress&) = delete;

  bool resumed() const { return resumed_; }
  uint64_t done(size_t chunk) const { return done_[chunk]; }
  // Chunks are each written by one thread at a time, so entries need no lock.
  void record(size_t chunk, uint64_t done) {
    done_[chunk] = done;
    write_all_at(fd_, std::as_bytes(std::span(&done_[chunk], 1)),
                 kHeader + chunk * sizeof(uint64_t), path_);
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<uint64_t> done_;
  bool resumed_ = false;
};

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

bool stays_inside(std::string_view relative) {
  if (relative.empty()) return false;
  for (size_t begin = 0; begin <= relative.size();) {
    const size_t end = std::min(relative.find('/', begin), relative.size());
    const std::string_view part = relative.substr(begin, end - begin);
    if (part.empty() || part == "." || part == ".." ||
        part.find_first_of(std::string_view("\\\0", 2)) != std::string_view::npos) {
      return false;
    }
    begin = end + 1;
  }
  return true;
}

std::string local_path_under(const std::string& base, std::string_view relative,
                             std::string_view what) {
  namespace fs = std::filesystem;
  if (!stays_inside(relative)) fail("{}: the name '{}' leaves {}", what, relative, base);
  fs::path target = fs::path(base) / fs::path(relative);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) fail("{}: cannot create {}: {}", what, target.parent_path().string(), ec.message());
  // A directory on the way may be a link to elsewhere: where the parent really is must be
  // inside where the base really is.
  fs::path real_base = fs::canonical(base, ec);
  fs::path real_parent = ec ? fs::path() : fs::canonical(target.parent_path(), ec);
  auto [mismatch, unused] =
      std::mismatch(real_base.begin(), real_base.end(), real_parent.begin(), real_parent.end());
  if (ec || mismatch != real_base.end()) {
    fail("{}: '{}' would be written outside {} (through a symbolic link)", what, relative, base);
  }
  return target.string();
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
                   const std::function<void(const std::string&)>& verify, bool resumable) {
  const std::string partial = dest + partial_suffix;
  const std::string progress_path = partial + ".progress";
  auto remove_partial = [&] {
    ::unlink(partial.c_str());
    if (resumable) ::unlink(progress_path.c_str());
  };
  const uint64_t size = source.size();
  const uint64_t chunk = std::max<uint64_t>(options.chunk_size, 1);
  const size_t chunks = (size + chunk - 1) / chunk;
  std::optional<CopyProgress> progress;
  if (resumable) {
    progress.emplace(progress_path, size, chunk, chunks, ::access(partial.c_str(), F_OK) == 0);
  }
  const bool resumed = progress && progress->resumed();
  int fd = ::open(partial.c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (resumed ? 0 : O_TRUNC), 0644);
  if (fd < 0) fail("{}: cannot create: {}", partial, std::strerror(errno));
  FdCloser closer{fd};
  try {
    // Each chunk streams straight into its place in the file: memory stays bounded by what
    // the transport buffers, whatever the chunk size.
    parallel_for(chunks, options.parallelism, [&](size_t i) {
      uint64_t start = i * chunk;
      uint64_t length = std::min(chunk, size - start);
      uint64_t skip = progress ? std::min(progress->done(i), length) : 0;
      if (skip == length) return;
      source.read_to(start + skip, length - skip,
                     [&](uint64_t offset, std::span<const std::byte> bytes) {
                       write_all_at(fd, bytes, start + skip + offset, partial);
                       if (progress) progress->record(i, skip + offset + bytes.size());
                     });
    });
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", partial, std::strerror(errno));
  } catch (...) {
    // What was written stays for the next copy to resume from, when it can.
    if (!resumable) remove_partial();
    throw;
  }
  try {
    if (verify) verify(partial);
    if (::rename(partial.c_str(), dest.c_str()) != 0) {
      fail("{}: cannot rename to {}: {}", partial, dest, std::strerror(errno));
    }
    if (resumable) ::unlink(progress_path.c_str());
  } catch (...) {
    remove_partial();  // a file that fails its check is no base to resume from
    throw;
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::string partial = path + ".partial";
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
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
