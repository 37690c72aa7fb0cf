// The virtual file system: one interface for reading model files wherever they live.
//
//   /path/or/file://path       local files (mmap; reads are copies out of the page cache)
//   https://host/path          libcurl range requests, retries with backoff, resumed transfers
//   hf://org/repo[@rev]/path   Hugging Face Hub, through the standard local cache
//   s3://bucket/key            SigV4-signed requests (AWS or any S3-compatible endpoint)
//
// A File is opened once and then read with read_at from any number of threads at once: that
// is what lets a loader keep many range requests in flight over one connection pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "prism/core/error.h"

namespace prism::io {

// A file, object or repo path that does not exist, as opposed to one that cannot be read
// (auth, network): exists() and the checkpoint probing of Store rely on the difference.
class NotFoundError : public Error {
 public:
  using Error::Error;
};

// One entry of a listing, or what stat() says about a URI.
struct FileEntry {
  std::string uri;   // full URI, usable with open()
  std::string path;  // relative to the listed directory or prefix ("" for stat)
  uint64_t size = 0;
  bool is_dir = false;
};

// Receives bytes in order; `offset` is relative to the start of the range asked for.
using ByteSink = std::function<void(uint64_t offset, std::span<const std::byte> bytes)>;

// A readable file. read_at is safe to call concurrently.
class File {
 public:
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& uri() const { return uri_; }
  virtual uint64_t size() const = 0;
  // Fills `out` with the bytes at [offset, offset + out.size()). Throws prism::Error (naming
  // the URI) when the range is past the end or the source fails after its retries.
  virtual void read_at(uint64_t offset, std::span<std::byte> out) const = 0;
  // Streams [offset, offset + length) to `sink` as it arrives, without holding it all in
  // memory. The default reads through read_at in pieces.
  virtual void read_to(uint64_t offset, uint64_t length, const ByteSink& sink) const;
  // The whole file as memory when the source maps it (local files); empty otherwise. Lets a
  // reader on the CPU use the bytes in place instead of copying them.
  virtual std::span<const std::byte> mapped() const { return {}; }

 protected:
  explicit File(std::string uri) : uri_(std::move(uri)) {}

 private:
  std::string uri_;
};

// How a file will be read. Schemes that fetch whole files into a local cache before reading
// them (hf) serve a metadata-only file remotely instead: reading the header of a 5 GB shard
// must not download it.
struct OpenOptions {
  bool metadata_only = false;
};

// One implementation per scheme.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual std::shared_ptr<File> open(std::string_view uri, const OpenOptions& options) = 0;
  virtual FileEntry stat(std::string_view uri) = 0;
  // Entries under a directory or prefix, sorted by path. Non-recursive listings include
  // subdirectories (is_dir); recursive ones list files only.
  virtual std::vector<FileEntry> list(std::string_view uri, bool recursive) = 0;
};

// "file", "http", "https", "hf" or "s3"; a URI without a scheme is a local path.
std::string_view scheme_of(std::string_view uri);
FileSystem& filesystem_for(std::string_view uri);

std::shared_ptr<File> open(std::string_view uri, const OpenOptions& options = {});
FileEntry stat(std::string_view uri);
std::vector<FileEntry> list(std::string_view uri, bool recursive = false);
// True when stat() finds the URI; other errors (auth, network) still throw.
bool exists(std::string_view uri);
// Reads a whole (small) file: configs, indexes, headers.
std::string read_text(std::string_view uri);

// "dir" + "a/b" -> "dir/a/b", for every scheme.
std::string join(std::string_view base, std::string_view relative);

// Whether `relative` (a file name a listing gave: an S3 key's tail, a repository's file) names
// something under its directory: not absolute, no "", "." or ".." parts, no backslash or NUL.
bool stays_inside(std::string_view relative);
// The local path `base`/`relative` for a name from a listing, its parent directories created:
// refuses (naming `what`) a `relative` that does not stay inside, and one whose directories
// lead out of `base` through a symbolic link. Nothing is written outside `base`.
std::string local_path_under(const std::string& base, std::string_view relative,
                             std::string_view what);
// The last path component: "hf://org/repo/model.safetensors" -> "model.safetensors".
std::string_view base_name(std::string_view uri);
// Everything before the last path component.
std::string_view parent_of(std::string_view uri);

// Reading many ranges (of one or many files) with a bounded number of reads in flight: ranges
// are cut into chunks of at most chunk_size bytes and `parallelism` workers take chunks in
// order, so the first bytes asked for arrive first and memory in flight stays bounded.
struct ReadOptions {
  int parallelism = 8;
  uint64_t chunk_size = 16ull << 20;
};

struct ReadRange {
  const File* file = nullptr;
  uint64_t offset = 0;
  std::span<std::byte> out;
};

void read_ranges(std::span<const ReadRange> ranges, const ReadOptions& options = {});

// Copies any URI to a local path: written to "<dest>.partial" and renamed when complete, so a
// failed copy never leaves a file that looks whole.
void copy_to_local(std::string_view uri, const std::string& dest, const ReadOptions& options = {});
// The same from an opened file, with the temporary name's suffix and a check of the complete
// temporary file (size, digest) that runs before the rename and throws to reject it.
// `resumable` is for sources that cannot change under the same name (a blob named by its
// digest): the partial file and "<partial>.progress" survive a failure or a killed process,
// and the next copy fetches only the bytes they lack. A partial that fails `verify` is removed.
void copy_to_local(const File& file, const std::string& dest, const ReadOptions& options,
                   const std::string& partial_suffix,
                   const std::function<void(const std::string& partial_path)>& verify = {},
                   bool resumable = false);

// Runs fn(0), ..., fn(n-1) on up to `parallelism` threads (the caller's among them), indices
// taken in order. The first exception stops the remaining work and is rethrown here.
template <typename Fn>
void parallel_for(size_t n, int parallelism, Fn&& fn) {
  size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(parallelism, 1)));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

// Writes bytes to a local path atomically: a temporary name, fsync, then rename.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Human-readable sizes: "812 B", "1.50 KiB", "3.20 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace prism::io
