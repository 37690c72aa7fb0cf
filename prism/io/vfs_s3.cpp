// s3:// files: HEAD for the size, signed range GETs for the bytes (through the https
// implementation, so retries and resumed transfers come with it), ListObjectsV2 for prefixes.
#include <charconv>
#include <cstdlib>
#include <map>

#include "prism/core/error.h"
#include "prism/io/digest.h"
#include "prism/io/http.h"
#include "prism/io/s3.h"
#include "prism/io/sigv4.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
namespace s3 {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct S3Settings {
  std::optional<AwsCredentials> credentials;
  std::string region;
  std::string endpoint;  // path-style base URL, or "" for AWS's virtual-hosted URLs
  int list_page = 1000;

  static S3Settings from_env() {
    S3Settings s;
    s.credentials = AwsCredentials::from_env();
    s.region = env("AWS_REGION");
    if (s.region.empty()) s.region = env("AWS_DEFAULT_REGION");
    if (s.region.empty()) s.region = "us-east-1";
    s.endpoint = env("AWS_ENDPOINT_URL_S3");
    if (s.endpoint.empty()) s.endpoint = env("AWS_ENDPOINT_URL");
    while (s.endpoint.ends_with('/')) s.endpoint.pop_back();
    if (int page = std::atoi(env("PRISM_S3_LIST_PAGE").c_str()); page > 0) s.list_page = page;
    return s;
  }
};

// Where a request goes and what SigV4 signs: the URL is built from the same encoded path
// and canonical query, so that the two always agree.
struct S3Target {
  std::string url;
  std::string host;  // sent as the Host header and signed
  std::string path;  // encoded
  std::vector<std::pair<std::string, std::string>> query;
};

S3Target target(const S3Settings& s, const ObjectUri& object,
                std::vector<std::pair<std::string, std::string>> query = {}) {
  S3Target t;
  std::string base;
  // Path-style for custom endpoints, and for bucket names with dots, which do not match AWS's
  // wildcard certificate as virtual-hosted names.
  bool path_style = !s.endpoint.empty() || object.bucket.find('.') != std::string::npos;
  if (path_style) {
    base = s.endpoint.empty() ? "https://s3." + s.region + ".amazonaws.com" : s.endpoint;
    t.path = "/" + url_encode(object.bucket, false) + "/" + url_encode(object.key, true);
    if (object.key.empty()) t.path.pop_back();  // "/bucket"
  } else {
    base = "https://" + object.bucket + ".s3." + s.region + ".amazonaws.com";
    t.path = "/" + url_encode(object.key, true);
  }
  size_t scheme_end = base.find("://");
  t.host = base.substr(scheme_end + 3);
  t.query = std::move(query);
  t.url = base + t.path;
  if (!t.query.empty()) t.url += "?" + canonical_query(t.query);
  return t;
}

// Signs every attempt with its own date: a retried request minutes later is still valid.
HeaderProvider signer(const S3Settings& s, const S3Target& t, std::string payload_sha256 = {}) {
  std::vector<std::string> host_header = {"Host: " + t.host};
  if (!s.credentials) {
    return [host_header](std::string_view, const std::string&) { return host_header; };
  }
  return [credentials = *s.credentials, region = s.region, t, payload_sha256](
             std::string_view method, const std::string&) {
    SigV4Request request{.method = std::string(method),
                         .host = t.host,
                         .path = t.path,
                         .query = t.query,
                         .payload_sha256 = payload_sha256};
    auto headers = sign_v4(request, credentials, region, "s3", amz_date_now()).headers;
    headers.push_back("Host: " + t.host);
    return headers;
  };
}

[[noreturn]] void throw_s3_error(const std::string& what, const HttpResponse& response,
                                 const S3Settings& s) {
  // A request to the wrong region is answered 301/400 with the bucket's region in a header.
  if (std::string region = response.header("x-amz-bucket-region");
      !region.empty() && region != s.region && (response.status == 301 || response.status == 400)) {
    fail("{}: the bucket is in region {}, not {}: set AWS_REGION={}", what, region, s.region,
         region);
  }
  if (response.status == 401 || response.status == 403) {
    std::string code;
    if (size_t at = response.body.find("<Code>"); at != std::string::npos) {
      code = without_secrets(
          response.body.substr(at + 6, response.body.find("</Code>", at) - at - 6), response);
    }
    fail(
        "{}: access denied (HTTP {}{}); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY{} and "
        "AWS_REGION ({}){}",
        what, response.status, code.empty() ? "" : ", " + code,
        s.credentials ? ", AWS_SESSION_TOKEN" : " (unset: the request was not signed)", s.region,
        s.endpoint.empty() ? "" : ", endpoint " + s.endpoint);
  }
  throw_http_error(what, response);
}

std::string xml_unescape(std::string_view s) {
  static const std::map<std::string, std::string, std::less<>> kEntities = {
      {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    size_t end = s[i] == '&' ? s.find(';', i) : std::string_view::npos;
    if (end == std::string_view::npos) {
      out += s[i];
      continue;
    }
    std::string_view entity = s.substr(i + 1, end - i - 1);
    if (auto it = kEntities.find(entity); it != kEntities.end()) {
      out += it->second;
    } else if (entity.starts_with('#')) {
      bool hex = entity.size() > 1 && (entity[1] == 'x' || entity[1] == 'X');
      unsigned long code =
          std::strtoul(std::string(entity.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      // UTF-8 encode the code point.
      if (code < 0x80) {
        out += static_cast<char>(code);
      } else if (code < 0x800) {
        out += static_cast<char>(0xc0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3f));
      } else if (code < 0x10000) {
        out += static_cast<char>(0xe0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (code & 0x3f));
      } else {
        out += static_cast<char>(0xf0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (code & 0x3f));
      }
    } else {
      out += s.substr(i, end - i + 1);
    }
    i = end;
  }
  return out;
}

// The text of each <tag>...</tag> inside `xml`, in order. ListObjectsV2 answers are flat
// enough that this is all the XML a listing needs.
std::vector<std::string_view> xml_elements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  for (size_t at = xml.find(open); at != std::string_view::npos; at = xml.find(open, at)) {
    size_t start = at + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    at = end + close.size();
  }
  return out;
}

std::string xml_text(std::string_view xml, std::string_view tag) {
  auto elements = xml_elements(xml, tag);
  return elements.empty() ? "" : xml_unescape(elements.front());
}

}  // namespace

ListPage parse_list_page(std::string_view xml, std::string_view what) {
  ListPage page;
  for (auto contents : xml_elements(xml, "Contents")) {
    const std::string size = xml_text(contents, "Size");
    uint64_t bytes = 0;
    const char* end = size.data() + size.size();
    if (!size.empty() && std::from_chars(size.data(), end, bytes).ptr != end) {
      fail("{}: the S3 listing gives object '{}' the size '{}', not a number", what,
           xml_text(contents, "Key"), size);
    }
    page.objects.emplace_back(xml_text(contents, "Key"), bytes);
  }
  for (auto common : xml_elements(xml, "CommonPrefixes")) {
    page.prefixes.push_back(xml_text(common, "Prefix"));
  }
  page.next_token =
      xml_text(xml, "IsTruncated") == "true" ? xml_text(xml, "NextContinuationToken") : "";
  return page;
}

namespace {

struct Listing {
  std::vector<std::pair<std::string, uint64_t>> objects;  // key, size
  std::vector<std::string> prefixes;                      // "dir/" (with a delimiter)
};

Listing list_objects(const S3Settings& s, const std::string& bucket, const std::string& prefix,
                     bool recursive, int max_keys, bool first_page_only, std::string_view what) {
  Listing listing;
  std::string token;
  do {
    std::vector<std::pair<std::string, std::string>> query = {
        {"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(max_keys)}};
    if (!recursive) query.emplace_back("delimiter", "/");
    if (!token.empty()) query.emplace_back("continuation-token", token);
    S3Target t = target(s, {bucket, ""}, query);
    HttpRequest request{.url = t.url, .sign = signer(s, t)};
    HttpResponse response = http_request(request);
    if (response.status != 200) throw_s3_error(std::string(what), response, s);
    ListPage page = parse_list_page(response.body, what);
    for (auto& object : page.objects) listing.objects.push_back(std::move(object));
    for (auto& prefix : page.prefixes) listing.prefixes.push_back(std::move(prefix));
    token = std::move(page.next_token);
  } while (!token.empty() && !first_page_only);
  return listing;
}

class S3FileSystem final : public FileSystem {
 public:
  std::shared_ptr<File> open(std::string_view uri, const OpenOptions&) override {
    S3Settings s = S3Settings::from_env();
    ObjectUri object = ObjectUri::parse(uri);
    if (object.key.empty()) fail("{}: is a bucket, not an object", uri);
    S3Target t = target(s, object);
    auto [size, etag] = head(s, t, uri);
    return open_http_file_with_size(t.url, signer(s, t), std::string(uri), size, etag);
  }

  FileEntry stat(std::string_view uri) override {
    S3Settings s = S3Settings::from_env();
    ObjectUri object = ObjectUri::parse(uri);
    if (!object.key.empty()) {
      try {
        return {std::string(uri), "", head(s, target(s, object), uri).first, false};
      } catch (const NotFoundError&) {
      }
    }
    // Not an object: a "directory" if any key lies under it.
    std::string prefix = object.key.empty() ? "" : object.key + "/";
    Listing listing = list_objects(s, object.bucket, prefix, false, 1, true, uri);
    if (object.key.empty() || !listing.objects.empty() || !listing.prefixes.empty()) {
      return {std::string(uri), "", 0, true};
    }
    throw NotFoundError(fmt::format("{}: not found", uri));
  }

  std::vector<FileEntry> list(std::string_view uri, bool recursive) override {
    S3Settings s = S3Settings::from_env();
    ObjectUri object = ObjectUri::parse(uri);
    std::string prefix = object.key.empty() ? "" : object.key + "/";
    Listing listing = list_objects(s, object.bucket, prefix, recursive, s.list_page, false, uri);
    std::vector<FileEntry> entries;
    for (const auto& [key, size] : listing.objects) {
      std::string rel = key.substr(prefix.size());
      if (rel.empty()) continue;  // the "directory marker" some tools create
      entries.push_back({join(uri, rel), rel, size, false});
    }
    for (const auto& p : listing.prefixes) {
      std::string rel = p.substr(prefix.size());
      while (rel.ends_with('/')) rel.pop_back();
      entries.push_back({join(uri, rel), rel, 0, true});
    }
    if (entries.empty() && !object.key.empty()) {
      throw NotFoundError(fmt::format("{}: not found", uri));
    }
    std::sort(entries.begin(), entries.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    return entries;
  }

 private:
  // The object's size and ETag.
  static std::pair<uint64_t, std::string> head(const S3Settings& s, const S3Target& t,
                                               std::string_view uri) {
    HttpRequest request{.method = "HEAD", .url = t.url, .sign = signer(s, t)};
    HttpResponse response = http_request(request);
    if (response.status == 401 || response.status == 403) {
      // The answer to a HEAD has no body, so it cannot say why it was refused: ask again with a
      // one-byte GET, whose refusal carries AWS's code (SignatureDoesNotMatch, ...).
      HttpRequest get{.url = t.url, .headers = {"Range: bytes=0-0"}, .sign = signer(s, t)};
      if (HttpResponse refused = http_request(get); refused.status == response.status) {
        response = std::move(refused);
      }
    }
    if (response.status != 200) throw_s3_error(std::string(uri), response, s);
    std::string length = response.header("content-length");
    if (length.empty()) fail("{}: the server sent no Content-Length", uri);
    return {std::stoull(length), response.header("etag")};
  }
};

}  // namespace

ObjectUri ObjectUri::parse(std::string_view uri) {
  if (!uri.starts_with("s3://")) fail("{}: not an s3:// URI", uri);
  std::string_view rest = uri.substr(5);
  size_t slash = rest.find('/');
  ObjectUri o{std::string(rest.substr(0, slash)), ""};
  if (slash != std::string_view::npos) o.key = std::string(rest.substr(slash + 1));
  while (o.key.ends_with('/')) o.key.pop_back();
  if (o.bucket.empty()) fail("{}: expected s3://bucket/key", uri);
  return o;
}

void put_object(std::string_view uri, std::string_view bytes) {
  S3Settings s = S3Settings::from_env();
  ObjectUri object = ObjectUri::parse(uri);
  S3Target t = target(s, object);
  std::string payload = hex(sha256(bytes));
  HttpRequest request{.method = "PUT", .url = t.url, .sign = signer(s, t, payload), .body = bytes};
  HttpResponse response = http_request(request);
  if (response.status != 200) throw_s3_error(std::string(uri), response, s);
}

}  // namespace s3

FileSystem& s3_filesystem() {
  static s3::S3FileSystem instance;
  return instance;
}

}  // namespace prism::io
