#include "prism/io/http.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace prism::io {
namespace {

struct Settings {
  int attempts = 5;
  int backoff_ms = 200;
  long timeout_s = 30;
  std::string ca_file;
};

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v, &end, 10);
  return (end && *end == '\0' && parsed >= 0) ? parsed : fallback;
}

Settings settings() {
  Settings s;
  s.attempts = static_cast<int>(std::max(1L, env_long("PRISM_HTTP_RETRIES", s.attempts)));
  s.backoff_ms = static_cast<int>(env_long("PRISM_HTTP_BACKOFF_MS", s.backoff_ms));
  s.timeout_s = std::max(1L, env_long("PRISM_HTTP_TIMEOUT_S", s.timeout_s));
  for (const char* name : {"CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
    if (const char* v = std::getenv(name); v && *v) {
      s.ca_file = v;
      break;
    }
  }
  return s;
}

// Idle easy handles keep their connections open: taking one from the pool reuses a warm TLS
// connection to the same host instead of a new handshake per range request.
class HandlePool {
 public:
  HandlePool() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~HandlePool() {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }
  CURL* take() {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    CURL* h = curl_easy_init();
    if (!h) fail("curl_easy_init failed");
    return h;
  }
  void give(CURL* h) {
    curl_easy_reset(h);
    std::lock_guard lock(mutex_);
    if (idle_.size() < kMaxIdle) {
      idle_.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

 private:
  static constexpr size_t kMaxIdle = 64;
  std::mutex mutex_;
  std::vector<CURL*> idle_;
};

HandlePool& pool() {
  static HandlePool instance;
  return instance;
}

struct PooledHandle {
  CURL* handle = pool().take();
  ~PooledHandle() { pool().give(handle); }
};

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

// What one attempt saw. Body bytes go to the sink only for 2xx answers; error bodies are kept
// (bounded) for the message.
struct Transfer {
  CURL* handle = nullptr;
  HttpResponse response;
  const ByteSink* sink = nullptr;
  uint64_t sink_base = 0;      // offset (within the caller's range) of this attempt's first byte
  uint64_t wanted = 0;         // bytes this attempt still needs
  uint64_t received = 0;       // bytes handed to the sink
  uint64_t range_start = 0;    // absolute offset of the first byte asked for
  bool range_ignored = false;  // 200 to a ranged request that does not start at 0
  bool has_all = false;        // stopped on purpose after the last wanted byte
  std::exception_ptr sink_error;
};

// "Name: value" as (name in lower case, value without leading spaces); nullopt without a colon.
std::optional<std::pair<std::string, std::string_view>> split_header(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return std::pair{std::move(name), value};
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {
    t->response.headers.clear();  // a new response (after a redirect or 100-continue)
  } else if (auto header = split_header(line)) {
    t->response.headers[header->first] = std::string(header->second);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * count;
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  if (!t->sink || status < 200 || status >= 300) {
    if (t->response.body.size() < (1 << 20)) t->response.body.append(data, len);
    return len;
  }
  // A full answer (200) to a ranged request is only usable if the range starts at byte 0;
  // then it is cut after the last byte wanted.
  if (status == 200 && t->range_start != 0) {
    t->range_ignored = true;
    return 0;
  }
  uint64_t take = std::min<uint64_t>(len, t->wanted - t->received);
  try {
    if (take) (*t->sink)(t->sink_base + t->received, std::as_bytes(std::span(data, take)));
  } catch (...) {
    t->sink_error = std::current_exception();
    return 0;
  }
  t->received += take;
  if (take < len) {
    t->has_all = true;
    return 0;
  }
  return len;
}

// Keeps a credential header's value (and a bearer token alone) for throw_http_error to redact.
void remember_secret(std::string_view line, HttpResponse& response) {
  auto header = split_header(line);
  if (!header) return;
  const auto& [name, value] = *header;
  if (name != "authorization" && name != "proxy-authorization" && name != "x-amz-security-token" &&
      name != "cookie") {
    return;
  }
  if (value.empty()) return;
  response.sent_secrets.emplace_back(value);
  if (size_t space = value.find(' '); space != std::string_view::npos) {
    std::string_view credential = value.substr(space + 1);  // "Bearer <token>"
    if (!credential.empty()) response.sent_secrets.emplace_back(credential);
  }
}

bool retryable(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long status) { return status == 408 || status == 429 || status >= 500; }

// One attempt. `range` is [first, last] inclusive, or none.
CURLcode perform(const HttpRequest& request, const Settings& s,
                 std::optional<std::pair<uint64_t, uint64_t>> range, Transfer& t,
                 std::string& curl_error) {
  PooledHandle pooled;
  CURL* h = pooled.handle;
  t.handle = h;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& header) {
    curl_slist* next = curl_slist_append(headers.get(), header.c_str());
    if (!next) fail("curl_slist_append failed");
    headers.release();
    headers.reset(next);
  };
  for (const auto& header : request.headers) add_header(header);
  if (request.sign) {
    for (const auto& header : request.sign(request.method, request.url)) add_header(header);
  }
  for (const curl_slist* h = headers.get(); h; h = h->next) remember_secret(h->data, t.response);
  if (range) add_header(fmt::format("Range: bytes={}-{}", range->first, range->second));
  // A body goes through CURLOPT_POSTFIELDS (below), which curl labels as a form
  // (application/x-www-form-urlencoded): servers may parse it away, and S3 would store that as
  // the object's type. It is plain bytes unless the request says otherwise.
  const bool sends_body = request.method != "GET" && request.method != "HEAD";
  if (sends_body &&
      std::none_of(request.headers.begin(), request.headers.end(), [](const std::string& h) {
        return h.size() > 13 && strncasecmp(h.c_str(), "content-type:", 13) == 0;
      })) {
    add_header("Content-Type: application/octet-stream");
  }

  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "prism/" PRISM_VERSION);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  // Larger receive buffers mean fewer callbacks (and sink calls) per megabyte.
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s.timeout_s);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (!s.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, s.ca_file.c_str());
  if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (sends_body) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  CURLcode code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t.response.status);
  char* url = nullptr;
  curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &url);
  if (url) t.response.effective_url = url;
  curl_error = error_buffer[0] ? error_buffer : curl_easy_strerror(code);
  if (t.sink_error) std::rethrow_exception(t.sink_error);
  return code;
}

void backoff(const Settings& s, int attempt) {
  int ms = s.backoff_ms << std::min(attempt, 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10000)));
}

[[noreturn]] void fail_transport(const HttpRequest& request, CURLcode code,
                                 const std::string& curl_error, int attempts) {
  std::string advice;
  if (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE) {
    advice = " (to trust a private CA, set CURL_CA_BUNDLE to its certificate file)";
  }
  fail("{}: {} after {} attempt{}{}", request.url, curl_error, attempts, attempts == 1 ? "" : "s",
       advice);
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

std::string without_secrets(std::string text, const HttpResponse& response) {
  for (const std::string& secret : response.sent_secrets) {
    for (size_t at = text.find(secret); !secret.empty() && at != std::string::npos;
         at = text.find(secret, at)) {
      text.replace(at, secret.size(), "<redacted>");
    }
  }
  return text;
}

void throw_http_error(const std::string& what, const HttpResponse& response) {
  long status = response.status;
  std::string detail;
  // Servers explain themselves in the body (S3's <Code>, the hub's {"error": ...}): keep a
  // short, one-line excerpt, without the credentials the request sent.
  std::string body = without_secrets(response.body, response);
  for (char c : body.substr(0, 300)) detail += (c == '\n' || c == '\r') ? ' ' : c;
  if (!detail.empty()) detail = ": " + detail;
  switch (status) {
    case 404:
      throw NotFoundError(fmt::format("{}: not found (HTTP 404)", what));
    case 401:
      throw HttpError(fmt::format("{}: unauthorized (HTTP 401){}", what, detail), status);
    case 403:
      throw HttpError(fmt::format("{}: access denied (HTTP 403){}", what, detail), status);
    default:
      throw HttpError(fmt::format("{}: HTTP {}{}", what, status, detail), status);
  }
}

HttpResponse http_request(const HttpRequest& request) {
  Settings s = settings();
  for (int attempt = 0;; ++attempt) {
    Transfer t;
    std::string curl_error;
    CURLcode code = perform(request, s, std::nullopt, t, curl_error);
    bool last = attempt + 1 >= s.attempts;
    if (code == CURLE_OK && !(retryable_status(t.response.status) && !last)) {
      return std::move(t.response);
    }
    if (code != CURLE_OK && (!retryable(code) || last)) {
      fail_transport(request, code, curl_error, attempt + 1);
    }
    backoff(s, attempt);
  }
}

void http_read_range(const HttpRequest& request, uint64_t offset, uint64_t length,
                     const ByteSink& sink) {
  if (length == 0) return;
  Settings s = settings();
  uint64_t done = 0;
  int attempt = 0;
  while (true) {
    Transfer t;
    t.sink = &sink;
    t.sink_base = done;
    t.wanted = length - done;
    t.range_start = offset + done;
    std::string curl_error;
    CURLcode code =
        perform(request, s, std::pair{offset + done, offset + length - 1}, t, curl_error);
    done += t.received;
    long status = t.response.status;
    if (t.range_ignored) {
      fail("{}: the server ignored a Range request (HTTP 200 for bytes {}-)", request.url,
           offset + done);
    }
    if (done == length && (code == CURLE_OK || t.has_all)) return;
    if (code == CURLE_OK && status >= 300 && !retryable_status(status)) {
      if (status == 412) {
        fail("{}: the file changed while being read (its ETag no longer matches)", request.url);
      }
      if (status == 416) {
        fail("{}: range {}-{} is past the end of the file", request.url, offset + done,
             offset + length - 1);
      }
      throw_http_error(request.url, t.response);
    }
    if (code != CURLE_OK && !retryable(code)) {
      fail_transport(request, code, curl_error, attempt + 1);
    }
    // A transfer that made progress earns a fresh set of attempts: it is resuming, not failing.
    if (t.received > 0) attempt = 0;
    if (++attempt >= s.attempts) {
      if (code != CURLE_OK) fail_transport(request, code, curl_error, attempt);
      if (status >= 300) throw_http_error(request.url, t.response);
      fail("{}: the server closed the transfer at byte {} of {} after {} attempts", request.url,
           offset + done, offset + length, attempt);
    }
    backoff(s, attempt - 1);
  }
}

std::string url_encode(std::string_view text, bool keep_slash) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace prism::io
