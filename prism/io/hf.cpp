// Hub settings, hf:// URIs, the token and whoami. The cache and downloads are in vfs_hf.cpp.
#include "prism/io/hf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/io/hf_hub.h"
#include "prism/io/http.h"
#include "prism/io/vfs.h"

namespace prism::io::hf {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  std::string v = env(name);
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  return v == "1" || v == "on" || v == "yes" || v == "true";
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(s[i + 1]) && std::isxdigit(s[i + 2])) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

HubSettings HubSettings::from_env() {
  HubSettings s;
  s.endpoint = env("HF_ENDPOINT");
  if (s.endpoint.empty()) s.endpoint = "https://huggingface.co";
  while (s.endpoint.ends_with('/')) s.endpoint.pop_back();
  s.home = env("HF_HOME");
  if (s.home.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    std::string home = env("HOME");
    s.home = !xdg.empty() ? xdg + "/huggingface" : home + "/.cache/huggingface";
  }
  s.cache_dir = env("HF_HUB_CACHE");
  if (s.cache_dir.empty()) s.cache_dir = env("HUGGINGFACE_HUB_CACHE");
  if (s.cache_dir.empty()) s.cache_dir = s.home + "/hub";
  s.token_path = env("HF_TOKEN_PATH");
  if (s.token_path.empty()) s.token_path = s.home + "/token";
  s.offline = env_true("HF_HUB_OFFLINE");
  return s;
}

RepoPath RepoPath::parse(std::string_view uri) {
  std::string_view rest = uri;
  if (!rest.starts_with("hf://")) fail("{}: not an hf:// URI", uri);
  rest.remove_prefix(5);
  RepoPath r;
  if (rest.starts_with("datasets/")) {
    r.type = "dataset";
    rest.remove_prefix(9);
  } else if (rest.starts_with("models/")) {
    rest.remove_prefix(7);
  }
  // org/repo[@revision][/path]
  size_t org_end = rest.find('/');
  if (org_end == std::string_view::npos || org_end == 0) {
    fail("{}: expected hf://org/repo[@revision][/path]", uri);
  }
  size_t repo_end = rest.find('/', org_end + 1);
  std::string_view repo = rest.substr(0, repo_end);
  if (repo_end != std::string_view::npos) r.path = std::string(rest.substr(repo_end + 1));
  while (r.path.ends_with('/')) r.path.pop_back();
  // The path names a file of the cache's snapshot (snapshots/<commit>/<path>): it must stay
  // inside it, whatever a URI or a repository's listing says.
  if (!r.path.empty() && !stays_inside(r.path)) {
    fail("{}: the path '{}' leaves the repository", uri, r.path);
  }
  if (size_t at = repo.find('@'); at != std::string_view::npos) {
    r.revision = percent_decode(repo.substr(at + 1));
    r.revision_given = true;
    repo = repo.substr(0, at);
    if (r.revision.empty()) fail("{}: empty revision after '@'", uri);
    // The revision names a file under refs/ in the cache: it must stay inside it.
    if (r.revision.front() == '/' || r.revision.find("..") != std::string::npos) {
      fail("{}: invalid revision '{}'", uri, r.revision);
    }
  }
  r.repo_id = std::string(repo);
  if (r.repo_id.size() <= org_end + 1) fail("{}: expected hf://org/repo[@revision][/path]", uri);
  if (r.path.find("..") != std::string::npos) fail("{}: '..' is not allowed in a repo path", uri);
  return r;
}

std::string RepoPath::uri() const {
  std::string s = "hf://";
  if (type == "dataset") s += "datasets/";
  s += repo_id;
  if (revision_given) s += "@" + url_encode(revision, false);
  if (!path.empty()) s += "/" + path;
  return s;
}

std::string RepoPath::cache_folder() const {
  std::string folder = (type == "dataset" ? "datasets--" : "models--") + repo_id;
  for (size_t at; (at = folder.find('/')) != std::string::npos;) folder.replace(at, 1, "--");
  return folder;
}

std::string RepoPath::url_prefix() const {
  return (type == "dataset" ? "datasets/" : "") + repo_id;
}

std::string RepoPath::api_prefix() const {
  return (type == "dataset" ? "api/datasets/" : "api/models/") + repo_id;
}

std::string read_token(const HubSettings& settings) {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (std::string token = trim(env(name)); !token.empty()) return token;
  }
  std::ifstream in(settings.token_path);
  if (!in) return "";
  std::string token((std::istreambuf_iterator<char>(in)), {});
  return trim(token);
}

void save_token(const HubSettings& settings, std::string_view token) {
  fs::path path = settings.token_path;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::string partial = path.string() + ".partial";
  // Created 0600 from the start: the token is never readable by others, not even briefly.
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("{}: cannot write the token: {}", partial, std::strerror(errno));
  ::fchmod(fd, 0600);
  std::string text(token);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok || ::rename(partial.c_str(), path.c_str()) != 0) {
    ::unlink(partial.c_str());
    fail("{}: cannot write the token: {}", path.string(), std::strerror(errno));
  }
}

bool delete_token(const HubSettings& settings) {
  std::error_code ec;
  return fs::remove(settings.token_path, ec);
}

std::vector<std::string> auth_headers(const std::string& token) {
  if (token.empty()) return {};
  return {"Authorization: Bearer " + token};
}

void throw_hub_error(const std::string& what, const HttpResponse& response, bool had_token) {
  std::string hub_says;
  if (auto message = response.header("x-error-message"); !message.empty()) {
    hub_says = ": " + without_secrets(message, response);
  }
  long status = response.status;
  if (status == 401 || status == 403) {
    bool gated = response.header("x-error-code") == "GatedRepo";
    std::string advice;
    if (gated) {
      advice =
          "the repo is gated: accept its conditions on its page on the Hub, with the account "
          "of your token";
    } else if (had_token) {
      advice =
          "the token was refused or has no access to this repo: check it with `prism hf "
          "auth whoami`, or log in again with `prism hf auth login`";
    } else {
      advice =
          "the repo may be private or gated: log in with `prism hf auth login` or set "
          "HF_TOKEN";
    }
    throw HttpError(
        fmt::format("{}: {} (HTTP {}){}; {}", what,
                    status == 401 ? "unauthorized" : "access denied", status, hub_says, advice),
        status);
  }
  if (status == 404) {
    throw NotFoundError(fmt::format("{}: not found (HTTP 404){}", what, hub_says));
  }
  throw_http_error(what, response);
}

std::string whoami(const HubSettings& settings, const std::string& token) {
  if (token.empty()) {
    fail("not logged in: run `prism hf auth login` or set HF_TOKEN");
  }
  HttpRequest request;
  request.url = settings.endpoint + "/api/whoami-v2";
  request.headers = auth_headers(token);
  HttpResponse response = http_request(request);
  if (response.status == 401) {
    fail(
        "{}: the token was refused (HTTP 401): it is wrong or revoked; log in again with "
        "`prism hf auth login`",
        settings.endpoint);
  }
  if (response.status != 200) throw_http_error(request.url, response);
  try {
    auto json = nlohmann::json::parse(response.body);
    return json.at("name").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected answer: {}", request.url, e.what());
  }
}

}  // namespace prism::io::hf
