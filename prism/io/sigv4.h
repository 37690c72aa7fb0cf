// AWS Signature Version 4: the canonical request, the string to sign and the signature, as
// the AWS documentation specifies them. Checked against AWS's published examples and against
// botocore (tests/data/io/sigv4_vectors.json, made by tools/gen_sigv4_vectors.py).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::io {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials only

  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN; none when unset.
  static std::optional<AwsCredentials> from_env();
};

struct SigV4Request {
  std::string method = "GET";
  std::string
      host;  // the Host header as sent: "bucket.s3.us-east-1.amazonaws.com", "127.0.0.1:9000"
  std::string path = "/";  // already URI-encoded, exactly as in the URL
  std::vector<std::pair<std::string, std::string>> query = {};    // decoded names and values
  std::vector<std::pair<std::string, std::string>> headers = {};  // more headers to sign
  std::string payload_sha256 = {};  // hex; the SHA-256 of the empty body when left empty
};

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;  // hex
  // "Name: value" lines to send: Authorization, X-Amz-Date, X-Amz-Content-Sha256 (for s3),
  // X-Amz-Security-Token (with a session token), and request.headers.
  std::vector<std::string> headers;
};

// `amz_date` is the request time as "20150830T123600Z".
SigV4Signature sign_v4(const SigV4Request& request, const AwsCredentials& credentials,
                       std::string_view region, std::string_view service,
                       std::string_view amz_date);

// The current UTC time as "20150830T123600Z".
std::string amz_date_now();

// The query string as SigV4 canonicalizes it (and as it must then be sent): names and values
// RFC 3986-encoded, sorted.
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace prism::io
