#include "prism/io/sigv4.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "prism/core/error.h"
#include "prism/io/digest.h"
#include "prism/io/http.h"

namespace prism::io {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s;
}

// Header values are trimmed and inner runs of spaces collapse to one.
std::string canonical_header_value(std::string_view value) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::span<const uint8_t> bytes_of(const Sha256& digest) { return {digest.data(), digest.size()}; }

}  // namespace

std::optional<AwsCredentials> AwsCredentials::from_env() {
  AwsCredentials c{env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"),
                   env("AWS_SESSION_TOKEN")};
  if (c.access_key_id.empty() || c.secret_access_key.empty()) return std::nullopt;
  return c;
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [name, value] : query) {
    encoded.emplace_back(url_encode(name, false), url_encode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

SigV4Signature sign_v4(const SigV4Request& request, const AwsCredentials& credentials,
                       std::string_view region, std::string_view service,
                       std::string_view amz_date) {
  PRISM_CHECK(amz_date.size() == 16, "sign_v4: amz_date must look like 20150830T123600Z");
  std::string payload = request.payload_sha256.empty() ? hex(bytes_of(sha256(std::string_view())))
                                                       : request.payload_sha256;
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, value
  headers.emplace_back("host", request.host);
  headers.emplace_back("x-amz-date", std::string(amz_date));
  if (service == "s3") headers.emplace_back("x-amz-content-sha256", payload);
  if (!credentials.session_token.empty()) {
    headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(lower(name), canonical_header_value(value));
  }
  std::sort(headers.begin(), headers.end());

  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }
  SigV4Signature out;
  out.canonical_request = request.method + "\n" + request.path + "\n" +
                          canonical_query(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + payload;

  std::string date(amz_date.substr(0, 8));
  std::string scope = fmt::format("{}/{}/{}/aws4_request", date, region, service);
  out.string_to_sign = fmt::format("AWS4-HMAC-SHA256\n{}\n{}\n{}", amz_date, scope,
                                   hex(bytes_of(sha256(out.canonical_request))));

  std::string secret = "AWS4" + credentials.secret_access_key;
  Sha256 key =
      hmac_sha256(std::span(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()), date);
  key = hmac_sha256(bytes_of(key), region);
  key = hmac_sha256(bytes_of(key), service);
  key = hmac_sha256(bytes_of(key), "aws4_request");
  out.signature = hex(bytes_of(hmac_sha256(bytes_of(key), out.string_to_sign)));

  out.headers.push_back(fmt::format(
      "Authorization: AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={}",
      credentials.access_key_id, scope, signed_headers, out.signature));
  out.headers.push_back(fmt::format("X-Amz-Date: {}", amz_date));
  if (service == "s3") out.headers.push_back("X-Amz-Content-Sha256: " + payload);
  if (!credentials.session_token.empty()) {
    out.headers.push_back("X-Amz-Security-Token: " + credentials.session_token);
  }
  for (const auto& [name, value] : request.headers) out.headers.push_back(name + ": " + value);
  return out;
}

std::string amz_date_now() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[17];
  std::strftime(buffer, sizeof(buffer), "%Y%m%dT%H%M%SZ", &utc);
  return buffer;
}

}  // namespace prism::io
