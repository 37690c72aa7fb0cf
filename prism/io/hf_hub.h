// Pieces shared by hf.cpp and vfs_hf.cpp: talking to the Hub with a token, and errors that
// say what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prism/io/hf.h"
#include "prism/io/http.h"

namespace prism::io::hf {

// "Authorization: Bearer <token>", or nothing without a token.
std::vector<std::string> auth_headers(const std::string& token);

// Throws the error a failed Hub answer deserves: 401/403 say how to log in (or that the repo
// is gated), 404 is a NotFoundError.
[[noreturn]] void throw_hub_error(const std::string& what, const HttpResponse& response,
                                  bool had_token);

// The files of a repository from the Hub's answer to /api/models/<id>/revision/<rev>
// ({"siblings": [{"rfilename", "size"}, ...]}), as (path, size). A name that would leave the
// repository, a size that is not a non-negative integer, or another shape is one error naming
// `what` (the repo's URI).
std::vector<std::pair<std::string, uint64_t>> parse_repo_listing(std::string_view body,
                                                                 const std::string& what);

}  // namespace prism::io::hf
