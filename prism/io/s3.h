// s3://bucket/key over the S3 REST API, SigV4-signed (prism/io/sigv4.h).
//
// Environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (requests are sent
// unsigned without them, which public buckets accept); AWS_REGION or AWS_DEFAULT_REGION
// (default us-east-1); AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for S3-compatible stores
// (addressed path-style: <endpoint>/<bucket>/<key>); PRISM_S3_LIST_PAGE (keys per
// ListObjectsV2 page, default 1000).
#pragma once

#include <string>
#include <string_view>

namespace prism::io::s3 {

struct ObjectUri {
  std::string bucket;
  std::string key;  // "" for the bucket itself

  static ObjectUri parse(std::string_view uri);
};

// Uploads a (small) object in one signed PUT: fixtures, tools, `prism io cp` to S3 later.
void put_object(std::string_view uri, std::string_view bytes);

}  // namespace prism::io::s3
