// hf:// files: served from the Hugging Face cache, downloaded into it on a miss. A file that
// is in the cache (fetched by prism or by Python tools) costs no request at all.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "prism/core/error.h"
#include "prism/io/digest.h"
#include "prism/io/hf.h"
#include "prism/io/hf_hub.h"
#include "prism/io/http.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
namespace hf {
namespace {

namespace fs = std::filesystem;

bool is_hex(std::string_view s, size_t length) {
  return s.size() == length && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

fs::path repo_dir(const HubSettings& settings, const RepoPath& repo) {
  return fs::path(settings.cache_dir) / repo.cache_folder();
}

std::string read_trimmed(const fs::path& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The commit the revision points at according to the cache, if the cache knows.
std::optional<std::string> cached_commit(const HubSettings& settings, const RepoPath& repo) {
  if (is_hex(repo.revision, 40)) return repo.revision;
  std::string commit = read_trimmed(repo_dir(settings, repo) / "refs" / repo.revision);
  if (commit.empty()) return std::nullopt;
  return commit;
}

fs::path no_exist_marker(const HubSettings& settings, const RepoPath& repo,
                         const std::string& commit) {
  return repo_dir(settings, repo) / ".no_exist" / commit / repo.path;
}

// Records, as huggingface_hub does, that the file is absent at `commit`: the next lookup
// answers "not found" from the cache instead of asking again.
void record_missing(const HubSettings& settings, const RepoPath& repo, const std::string& commit) {
  if (commit.empty() || repo.path.empty()) return;
  fs::path marker = no_exist_marker(settings, repo, commit);
  std::error_code ec;
  fs::create_directories(marker.parent_path(), ec);
  std::ofstream touch(marker);
}

// The cached file, if the cache has it; throws NotFoundError when the cache records that it
// does not exist at that commit.
std::optional<fs::path> cached_path(const HubSettings& settings, const RepoPath& repo) {
  auto commit = cached_commit(settings, repo);
  if (!commit) return std::nullopt;
  std::error_code ec;
  if (!repo.path.empty() && fs::exists(no_exist_marker(settings, repo, *commit), ec)) {
    throw NotFoundError(
        fmt::format("{}: not found (the cache records that commit {} has no "
                    "such file)",
                    repo.uri(), *commit));
  }
  fs::path path = repo_dir(settings, repo) / "snapshots" / *commit / repo.path;
  if (fs::exists(path, ec)) return path;  // follows the symlink: a dangling one is a miss
  return std::nullopt;
}

[[noreturn]] void fail_offline(const HubSettings& settings, const RepoPath& repo) {
  throw NotFoundError(fmt::format(
      "{}: not found in the Hugging Face cache {} (HF_HUB_OFFLINE is set, so nothing is "
      "downloaded)",
      repo.uri(), settings.cache_dir));
}

std::string origin_of(const std::string& url) {
  size_t scheme = url.find("://");
  size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return url.substr(0, slash);
}

std::string resolve_location(const std::string& base, const std::string& location) {
  if (location.starts_with("http://") || location.starts_with("https://")) return location;
  if (location.starts_with("/")) return origin_of(base) + location;
  return base.substr(0, base.rfind('/') + 1) + location;
}

std::string normalize_etag(std::string etag) {
  if (etag.starts_with("W/")) etag.erase(0, 2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

// What the Hub says about a file: the commit the revision resolves to, the etag that names
// its blob, its size, and where its bytes are (the Hub itself or, for large files, a CDN).
struct RemoteFile {
  std::string commit;
  std::string etag;
  uint64_t size = 0;
  std::string download_url;
};

// `missing_commit` receives the commit a 404 answer names (to record the absence).
RemoteFile head_remote(const HubSettings& settings, const RepoPath& repo, const std::string& token,
                       std::string* missing_commit = nullptr) {
  std::string url = settings.endpoint + "/" + repo.url_prefix() + "/resolve/" +
                    url_encode(repo.revision, false) + "/" + url_encode(repo.path, true);
  // Redirects are read, not followed: the Hub's own headers (X-Repo-Commit, X-Linked-Etag)
  // are on the redirect, and the CDN's answer would replace them.
  for (int hop = 0; hop < 5; ++hop) {
    HttpRequest head;
    head.method = "HEAD";
    head.url = url;
    head.headers = auth_headers(token);
    head.follow_redirects = false;
    HttpResponse response = http_request(head);
    if (response.status == 404 && missing_commit) {
      *missing_commit = response.header("x-repo-commit");
    }
    if (response.status >= 400) throw_hub_error(repo.uri(), response, !token.empty());
    RemoteFile remote;
    remote.commit = response.header("x-repo-commit");
    if (remote.commit.empty() && is_hex(repo.revision, 40)) remote.commit = repo.revision;
    remote.etag = normalize_etag(response.header("x-linked-etag"));
    if (remote.etag.empty()) remote.etag = normalize_etag(response.header("etag"));
    std::string size = response.header("x-linked-size");
    if (size.empty()) size = response.header("content-length");
    remote.download_url = url;
    if (response.status >= 300) {
      std::string location = response.header("location");
      if (location.empty()) fail("{}: redirect without a Location", repo.uri());
      if (remote.etag.empty()) {  // a renamed repo: ask again where it lives now
        url = resolve_location(url, location);
        continue;
      }
      remote.download_url = resolve_location(url, location);
    }
    if (remote.commit.empty() || remote.etag.empty() || size.empty()) {
      fail("{}: the Hub's answer lacks X-Repo-Commit, ETag or the file size ({})", repo.uri(), url);
    }
    if (remote.etag.find('/') != std::string::npos || remote.etag.starts_with(".")) {
      fail("{}: unusable etag '{}'", repo.uri(), remote.etag);
    }
    // The commit names a folder of the cache (snapshots/<commit>): only a commit hash may.
    if (!is_hex(remote.commit, 40)) {
      fail("{}: the Hub's X-Repo-Commit '{}' is not a commit hash", repo.uri(), remote.commit);
    }
    const char* end = size.data() + size.size();
    if (std::from_chars(size.data(), end, remote.size).ptr != end) {
      fail("{}: the Hub gives the file's size as '{}', not a number", repo.uri(), size);
    }
    return remote;
  }
  fail("{}: too many redirects", repo.uri());
}

// The token goes to the Hub only, never to the CDN a large file redirects to.
HeaderProvider hub_signer(const HubSettings& settings, const std::string& url,
                          const std::string& token) {
  if (token.empty() || origin_of(url) != origin_of(settings.endpoint)) return nullptr;
  return [token](std::string_view, const std::string&) { return auth_headers(token); };
}

// An exclusive lock on a file, held while one process downloads a blob: two processes
// loading the same model fetch it once.
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create lock: {}", path.string(), std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

void download_blob(const RemoteFile& remote, const fs::path& blob, const std::string& token,
                   const HubSettings& settings, const RepoPath& repo, const ReadOptions& options) {
  auto file = open_http_file_with_size(remote.download_url,
                                       hub_signer(settings, remote.download_url, token), repo.uri(),
                                       remote.size);
  auto verify = [&](const std::string& partial) {
    uint64_t size = fs::file_size(partial);
    if (size != remote.size) {
      fail("{}: downloaded {} bytes, expected {}", repo.uri(), size, remote.size);
    }
    // Large (LFS) files are named by their SHA-256: check it, so that a corrupted transfer
    // never enters the cache.
    if (is_hex(remote.etag, 64)) {
      std::string digest = hex(sha256_of_file(partial));
      if (digest != remote.etag) {
        fail("{}: downloaded file has SHA-256 {}, expected {}", repo.uri(), digest, remote.etag);
      }
    }
  };
  // The blob is named by its ETag (the SHA-256 of a large file): a partial one resumes.
  copy_to_local(*file, blob.string(), options, ".incomplete", verify, /*resumable=*/true);
}

}  // namespace

std::string cached_file(const RepoPath& repo, const HubSettings& settings,
                        const ReadOptions& options) {
  if (repo.path.empty()) fail("{}: is a repo, not a file", repo.uri());
  if (auto path = cached_path(settings, repo)) return path->string();
  if (settings.offline) fail_offline(settings, repo);
  std::string token = read_token(settings);
  std::string missing_commit;
  RemoteFile remote;
  try {
    remote = head_remote(settings, repo, token, &missing_commit);
  } catch (const NotFoundError&) {
    record_missing(settings, repo, missing_commit);
    throw;
  }
  fs::path dir = repo_dir(settings, repo);
  fs::path blob = dir / "blobs" / remote.etag;
  fs::create_directories(blob.parent_path());
  // The link goes where the path says, and nowhere else: not through a linked directory.
  fs::path snapshots = dir / "snapshots" / remote.commit;
  fs::create_directories(snapshots);
  fs::path snapshot = local_path_under(snapshots.string(), repo.path, repo.uri());
  {
    FileLock lock(fs::path(settings.cache_dir) / ".locks" / repo.cache_folder() /
                  (remote.etag + ".lock"));
    std::error_code ec;
    // The blob may be there already: same content under another path or revision.
    if (!fs::exists(blob, ec) || fs::file_size(blob, ec) != remote.size) {
      download_blob(remote, blob, token, settings, repo, options);
    }
    if (!fs::exists(snapshot, ec)) {
      fs::remove(snapshot, ec);  // a dangling link
      std::string target;
      for (size_t depth = 2 + std::count(repo.path.begin(), repo.path.end(), '/'); depth > 0;
           --depth) {
        target += "../";
      }
      fs::create_symlink(target + "blobs/" + remote.etag, snapshot);
    }
  }
  if (repo.revision != remote.commit) {
    fs::create_directories(dir / "refs");
    write_file_atomic(local_path_under((dir / "refs").string(), repo.revision, repo.uri()),
                      remote.commit);
  }
  return snapshot.string();
}

namespace {

// Files of the repo at its revision, relative to the repo root, with sizes.
std::vector<std::pair<std::string, uint64_t>> repo_files(const HubSettings& settings,
                                                         const RepoPath& repo) {
  std::vector<std::pair<std::string, uint64_t>> files;
  if (settings.offline) {
    auto commit = cached_commit(settings, repo);
    fs::path root = repo_dir(settings, repo) / "snapshots" / (commit ? *commit : "");
    std::error_code ec;
    if (!commit || !fs::is_directory(root, ec)) fail_offline(settings, repo);
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) {  // follows the blob symlinks
        files.emplace_back(e.path().lexically_relative(root).generic_string(), e.file_size());
      }
    }
    return files;
  }
  std::string token = read_token(settings);
  HttpRequest request;
  request.url = settings.endpoint + "/" + repo.api_prefix() + "/revision/" +
                url_encode(repo.revision, false) + "?blobs=true";
  request.headers = auth_headers(token);
  HttpResponse response = http_request(request);
  RepoPath root = repo;
  root.path.clear();
  if (response.status != 200) throw_hub_error(root.uri(), response, !token.empty());
  return parse_repo_listing(response.body, root.uri());
}

}  // namespace

std::vector<std::pair<std::string, uint64_t>> parse_repo_listing(std::string_view body,
                                                                 const std::string& what) {
  std::vector<std::pair<std::string, uint64_t>> files;
  try {
    const auto json = nlohmann::json::parse(body);
    for (const auto& sibling : json.at("siblings")) {
      uint64_t size = 0;
      if (sibling.contains("size")) {
        const auto& value = sibling.at("size");
        if (!value.is_number_unsigned()) {
          fail("{}: the Hub lists a size '{}', not a byte count", what, value.dump());
        }
        size = value.get<uint64_t>();
      }
      std::string name = sibling.at("rfilename").get<std::string>();
      // Each name becomes a path in the cache's snapshot, and in io cp's destination.
      if (!stays_inside(name))
        fail("{}: the Hub lists a file '{}' outside the repository", what, name);
      files.emplace_back(std::move(name), size);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected answer from the Hub: {}", what, e.what());
  }
  return files;
}

namespace {

class HfFileSystem final : public FileSystem {
 public:
  std::shared_ptr<File> open(std::string_view uri, const OpenOptions& options) override {
    RepoPath repo = RepoPath::parse(uri);
    HubSettings settings = HubSettings::from_env();
    if (options.metadata_only && !settings.offline && !cached_path(settings, repo)) {
      // Headers only: read remotely, without filling the cache with the whole file.
      std::string token = read_token(settings);
      RemoteFile remote = head_remote(settings, repo, token);
      return open_http_file_with_size(remote.download_url,
                                      hub_signer(settings, remote.download_url, token),
                                      std::string(uri), remote.size);
    }
    return open_local_file(cached_file(repo, settings), std::string(uri));
  }

  FileEntry stat(std::string_view uri) override {
    RepoPath repo = RepoPath::parse(uri);
    HubSettings settings = HubSettings::from_env();
    if (repo.path.empty()) {
      repo_files(settings, repo);  // throws when the repo is not there (or not accessible)
      return {std::string(uri), "", 0, true};
    }
    std::error_code ec;
    if (auto path = cached_path(settings, repo)) {
      bool is_dir = fs::is_directory(*path, ec);
      return {std::string(uri), "", is_dir ? 0 : fs::file_size(*path, ec), is_dir};
    }
    if (settings.offline) fail_offline(settings, repo);
    std::string missing_commit;
    try {
      RemoteFile remote = head_remote(settings, repo, read_token(settings), &missing_commit);
      return {std::string(uri), "", remote.size, false};
    } catch (const NotFoundError&) {
      // Not a file; it may be a directory of the repo.
      for (const auto& [name, size] : repo_files(settings, repo)) {
        if (name.starts_with(repo.path + "/")) return {std::string(uri), "", 0, true};
      }
      record_missing(settings, repo, missing_commit);
      throw;
    }
  }

  std::vector<FileEntry> list(std::string_view uri, bool recursive) override {
    RepoPath repo = RepoPath::parse(uri);
    std::string prefix = repo.path.empty() ? "" : repo.path + "/";
    std::map<std::string, FileEntry> entries;
    for (const auto& [name, size] : repo_files(HubSettings::from_env(), repo)) {
      if (!name.starts_with(prefix)) continue;
      std::string rel = name.substr(prefix.size());
      size_t slash = rel.find('/');
      if (!recursive && slash != std::string::npos) {
        std::string dir = rel.substr(0, slash);
        entries.try_emplace(dir, FileEntry{join(uri, dir), dir, 0, true});
      } else {
        entries[rel] = FileEntry{join(uri, rel), rel, size, false};
      }
    }
    if (entries.empty() && !repo.path.empty()) {
      throw NotFoundError(fmt::format("{}: not found", uri));
    }
    std::vector<FileEntry> out;
    for (auto& [name, entry] : entries) out.push_back(std::move(entry));
    return out;
  }
};

}  // namespace
}  // namespace hf

FileSystem& hf_filesystem() {
  static hf::HfFileSystem instance;
  return instance;
}

}  // namespace prism::io
