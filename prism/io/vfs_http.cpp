// https:// and http:// files: a HEAD for the size, then range requests, many in flight.
#include <cstring>

#include "prism/core/error.h"
#include "prism/io/http.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
namespace {

class HttpFile final : public File {
 public:
  HttpFile(std::string url, HeaderProvider sign, std::string display_uri, uint64_t size,
           std::string etag)
      : File(std::move(display_uri)),
        url_(std::move(url)),
        sign_(std::move(sign)),
        size_(size),
        etag_(std::move(etag)) {}

  uint64_t size() const override { return size_; }

  void read_at(uint64_t offset, std::span<std::byte> out) const override {
    read_to(offset, out.size(), [&](uint64_t at, std::span<const std::byte> bytes) {
      std::memcpy(out.data() + at, bytes.data(), bytes.size());
    });
  }

  void read_to(uint64_t offset, uint64_t length, const ByteSink& sink) const override {
    if (offset > size_ || length > size_ - offset) {
      fail("{}: read of {} bytes at offset {} is past the end of the file ({} bytes)", uri(),
           length, offset, size_);
    }
    if (uri() == url_) return http_read_range(request(), offset, length, sink);
    // Errors name what the caller opened (hf://, s3://) as well as the URL that failed.
    try {
      http_read_range(request(), offset, length, sink);
    } catch (const NotFoundError& e) {
      throw NotFoundError(fmt::format("{}: {}", uri(), e.what()));
    } catch (const HttpError& e) {
      throw HttpError(fmt::format("{}: {}", uri(), e.what()), e.status());
    } catch (const Error& e) {
      fail("{}: {}", uri(), e.what());
    }
  }

 private:
  HttpRequest request() const {
    HttpRequest r;
    r.url = url_;
    r.sign = sign_;
    // Every range must come from the same version of the file: a file replaced while a model
    // loads fails (412) instead of mixing old and new bytes. Weak etags cannot promise that.
    if (!etag_.empty() && !etag_.starts_with("W/")) r.headers.push_back("If-Match: " + etag_);
    return r;
  }

  std::string url_;
  HeaderProvider sign_;
  uint64_t size_;
  std::string etag_;
};

class HttpFileSystem final : public FileSystem {
 public:
  std::shared_ptr<File> open(std::string_view uri, const OpenOptions&) override {
    return open_http_file(std::string(uri), nullptr, std::string(uri));
  }
  FileEntry stat(std::string_view uri) override {
    return http_stat(std::string(uri), nullptr, std::string(uri));
  }
  std::vector<FileEntry> list(std::string_view uri, bool) override {
    fail(
        "{}: listing is not supported over http(s) (there is no standard directory listing); "
        "name the file, or use hf:// or s3://",
        uri);
  }
};

}  // namespace

HttpHead http_head(const std::string& url, const HeaderProvider& sign,
                   const std::string& display_uri) {
  HttpRequest head;
  head.method = "HEAD";
  head.url = url;
  head.sign = sign;
  HttpResponse response = http_request(head);
  if (response.status != 200) throw_http_error(display_uri, response);
  std::string length = response.header("content-length");
  if (length.empty()) fail("{}: the server sent no Content-Length", display_uri);
  return {std::stoull(length), response.header("etag")};
}

FileEntry http_stat(const std::string& url, const HeaderProvider& sign,
                    const std::string& display_uri) {
  return {display_uri, "", http_head(url, sign, display_uri).size, false};
}

std::shared_ptr<File> open_http_file(const std::string& url, HeaderProvider sign,
                                     const std::string& display_uri) {
  HttpHead head = http_head(url, sign, display_uri);
  return std::make_shared<HttpFile>(url, std::move(sign), display_uri, head.size, head.etag);
}

std::shared_ptr<File> open_http_file_with_size(const std::string& url, HeaderProvider sign,
                                               const std::string& display_uri, uint64_t size,
                                               const std::string& etag) {
  return std::make_shared<HttpFile>(url, std::move(sign), display_uri, size, etag);
}

FileSystem& http_filesystem() {
  static HttpFileSystem instance;
  return instance;
}

}  // namespace prism::io
