// HTTP(S) requests over libcurl, shared by the https, hf and s3 schemes.
//
// Every request retries transport failures (refused or dropped connections, timeouts) and
// 5xx/429 answers with exponential backoff; a ranged transfer that breaks part way resumes
// from the first byte it did not get. Easy handles are pooled, so connections (and TLS
// sessions) are reused across requests and threads.
//
// Environment: CURL_CA_BUNDLE or SSL_CERT_FILE (a CA file to trust), PRISM_HTTP_RETRIES
// (attempts, default 5), PRISM_HTTP_BACKOFF_MS (first backoff, default 200),
// PRISM_HTTP_TIMEOUT_S (a transfer slower than 1 KiB/s for this long is dropped, default 30).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/error.h"
#include "prism/io/vfs.h"

namespace prism::io {

// A request answered with an error status other than 404 (which is a NotFoundError) (after retries,
// for retryable ones). `what()` says which URL and what the status means; callers add advice (how
// to log in, ...).
class HttpError : public Error {
 public:
  HttpError(const std::string& message, long status) : Error(message), status_(status) {}
  long status() const { return status_; }

 private:
  long status_;
};

// Adds headers to each attempt of a request (S3 signs every attempt with a fresh date).
using HeaderProvider =
    std::function<std::vector<std::string>(std::string_view method, const std::string& url)>;

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT
  std::string url;
  std::vector<std::string> headers = {};  // "Name: value"
  HeaderProvider sign = {};               // optional, called per attempt
  bool follow_redirects = true;
  std::string_view body = {};  // PUT payload
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the final response; names in lower case
  std::string body;
  std::string effective_url;  // after redirects
  // The credentials the request carried (Authorization, X-Amz-Security-Token, Cookie values,
  // and a bearer token alone): throw_http_error keeps them out of its message, even when a
  // server echoes them back in its answer.
  std::vector<std::string> sent_secrets;

  // A header's value, or "" when absent. `name` in lower case.
  std::string header(const std::string& name) const;
};

// A whole request with retries; the body is collected (meant for small answers: APIs, HEAD,
// errors). Any status is returned as is, except that retryable ones are retried first.
HttpResponse http_request(const HttpRequest& request);

// Streams bytes [offset, offset + length) of the resource to `sink`, with retries that resume
// where a broken transfer stopped. Throws HttpError for error statuses, NotFoundError for 404.
void http_read_range(const HttpRequest& request, uint64_t offset, uint64_t length,
                     const ByteSink& sink);

// `text` (a server's words) with every credential the request sent replaced by "<redacted>".
std::string without_secrets(std::string text, const HttpResponse& response);

// Throws the HttpError a failed response deserves; `what` names the resource.
[[noreturn]] void throw_http_error(const std::string& what, const HttpResponse& response);

// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(std::string_view text, bool keep_slash);

}  // namespace prism::io
