// The scheme implementations behind vfs.h, for vfs.cpp's dispatch and for schemes that build
// on each other (hf serves files out of its local cache through the local file system).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prism/io/http.h"
#include "prism/io/vfs.h"

namespace prism::io {

FileSystem& local_filesystem();
FileSystem& http_filesystem();
FileSystem& hf_filesystem();
FileSystem& s3_filesystem();

// Opens a local file, reporting errors and uri() as `display_uri` (e.g. the hf:// URI the
// cached file stands for).
std::shared_ptr<File> open_local_file(const std::string& path, std::string display_uri);

// A file over http(s): HEAD for the size, range requests for the bytes. `sign` adds headers
// to each request (authentication); errors and uri() name `display_uri`.
std::shared_ptr<File> open_http_file(const std::string& url, HeaderProvider sign,
                                     const std::string& display_uri);
// The same when the size is known already (no HEAD request). With an `etag`, every range
// request carries If-Match, so that a file replaced mid-read fails instead of mixing versions.
std::shared_ptr<File> open_http_file_with_size(const std::string& url, HeaderProvider sign,
                                               const std::string& display_uri, uint64_t size,
                                               const std::string& etag = "");
struct HttpHead {
  uint64_t size = 0;
  std::string etag;  // as sent, quotes included; "" when absent
};
HttpHead http_head(const std::string& url, const HeaderProvider& sign,
                   const std::string& display_uri);
FileEntry http_stat(const std::string& url, const HeaderProvider& sign,
                    const std::string& display_uri);

// "file:///a/b" -> "/a/b"; a plain path is returned as is.
std::string local_path_of(std::string_view uri);

}  // namespace prism::io
