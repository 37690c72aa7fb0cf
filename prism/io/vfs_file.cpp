// Local files: mapped once, read with memcpy out of the mapping (or used in place through
// mapped()). A mapping costs nothing until touched and shares the page cache with `cat`.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "prism/core/error.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
namespace {

namespace fs = std::filesystem;

class LocalFile final : public File {
 public:
  LocalFile(const std::string& path, std::string display_uri) : File(std::move(display_uri)) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) throw NotFoundError(fmt::format("{}: not found", uri()));
      fail("{}: cannot open: {}", uri(), std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail("{}: not a regular file", uri());
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        fail("{}: mmap failed: {}", uri(), std::strerror(err));
      }
      data_ = static_cast<const std::byte*>(data);
    }
    ::close(fd);  // the mapping keeps the file alive
  }
  ~LocalFile() override {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  }

  uint64_t size() const override { return size_; }

  void read_at(uint64_t offset, std::span<std::byte> out) const override {
    if (offset > size_ || out.size() > size_ - offset) {
      fail("{}: read of {} bytes at offset {} is past the end of the file ({} bytes)", uri(),
           out.size(), offset, size_);
    }
    if (!out.empty()) std::memcpy(out.data(), data_ + offset, out.size());
  }

  std::span<const std::byte> mapped() const override { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

class LocalFileSystem final : public FileSystem {
 public:
  std::shared_ptr<File> open(std::string_view uri) override {
    return open_local_file(local_path_of(uri), std::string(uri));
  }

  FileEntry stat(std::string_view uri) override {
    fs::path path = local_path_of(uri);
    std::error_code ec;
    fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw NotFoundError(fmt::format("{}: not found", uri));
    FileEntry entry{std::string(uri), "", 0, fs::is_directory(status)};
    if (!entry.is_dir) entry.size = fs::file_size(path, ec);
    return entry;
  }

  std::vector<FileEntry> list(std::string_view uri, bool recursive) override {
    fs::path root = local_path_of(uri);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      if (!fs::exists(root, ec)) throw NotFoundError(fmt::format("{}: not found", uri));
      fail("{}: not a directory", uri);
    }
    std::vector<FileEntry> entries;
    auto add = [&](const fs::directory_entry& e) {
      std::string rel = e.path().lexically_relative(root).generic_string();
      bool is_dir = e.is_directory();
      if (recursive && is_dir) return;
      entries.push_back({join(uri, rel), rel, is_dir ? 0 : e.file_size(), is_dir});
    };
    if (recursive) {
      for (const auto& e : fs::recursive_directory_iterator(root)) add(e);
    } else {
      for (const auto& e : fs::directory_iterator(root)) add(e);
    }
    std::sort(entries.begin(), entries.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    return entries;
  }
};

}  // namespace

std::string local_path_of(std::string_view uri) {
  if (uri.starts_with("file://")) uri.remove_prefix(7);
  return std::string(uri);
}

std::shared_ptr<File> open_local_file(const std::string& path, std::string display_uri) {
  return std::make_shared<LocalFile>(path, std::move(display_uri));
}

FileSystem& local_filesystem() {
  static LocalFileSystem instance;
  return instance;
}

}  // namespace prism::io
