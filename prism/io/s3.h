// s3://bucket/key over the S3 REST API, SigV4-signed (prism/io/sigv4.h).
//
// Environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (requests are sent
// unsigned without them, which public buckets accept); AWS_REGION or AWS_DEFAULT_REGION
// (default us-east-1); AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for S3-compatible stores
// (addressed path-style: <endpoint>/<bucket>/<key>); PRISM_S3_LIST_PAGE (keys per
// ListObjectsV2 page, default 1000).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::io::s3 {

struct ObjectUri {
  std::string bucket;
  std::string key;  // "" for the bucket itself

  static ObjectUri parse(std::string_view uri);
};

// One page of a ListObjectsV2 answer: the objects (key, size), the common prefixes ("dir/",
// with a delimiter), and the continuation token when the listing is truncated ("" otherwise).
struct ListPage {
  std::vector<std::pair<std::string, uint64_t>> objects;
  std::vector<std::string> prefixes;
  std::string next_token;
};
// The page in an S3 server's XML answer. A server is a stranger: an object whose Size is not a
// number is a prism::Error naming `what`, never a crash (fuzz/fuzz_s3_listing).
ListPage parse_list_page(std::string_view xml, std::string_view what);

// Uploads a (small) object in one signed PUT: fixtures, tools, `prism io cp` to S3 later.
void put_object(std::string_view uri, std::string_view bytes);

}  // namespace prism::io::s3
