// The Hugging Face Hub, the way its own tools see it, so that prism and Python share one
// cache and one login:
//
//   hf://org/repo[@revision]/path       a model repo (revision: branch, tag or commit)
//   hf://datasets/org/repo[@rev]/path   a dataset repo
//
// Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN, HF_HOME (default
// ~/.cache/huggingface; the token file is HF_HOME/token unless HF_TOKEN_PATH says otherwise),
// HF_HUB_CACHE (default HF_HOME/hub), HF_HUB_OFFLINE=1 (answer from the cache alone).
//
// Cache layout (shared with huggingface_hub):
//   HF_HUB_CACHE/models--org--repo/blobs/<etag>                 file contents, by etag
//   HF_HUB_CACHE/models--org--repo/snapshots/<commit>/<path>    symlink to ../../blobs/<etag>
//   HF_HUB_CACHE/models--org--repo/refs/<revision>              the commit a branch/tag was at
//   HF_HUB_CACHE/models--org--repo/.no_exist/<commit>/<path>    marks a file the Hub lacks
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "prism/io/vfs.h"

namespace prism::io::hf {

struct HubSettings {
  std::string endpoint;    // no trailing slash
  std::string home;        // HF_HOME
  std::string cache_dir;   // HF_HUB_CACHE
  std::string token_path;  // where `prism hf auth login` writes the token
  bool offline = false;

  static HubSettings from_env();
};

struct RepoPath {
  std::string type = "model";  // "model" or "dataset"
  std::string repo_id;         // "org/repo"
  std::string revision = "main";
  bool revision_given = false;  // written as @revision in the URI
  std::string path;             // inside the repo, "" for the repo itself

  static RepoPath parse(std::string_view uri);
  std::string uri() const;           // canonical hf:// form
  std::string cache_folder() const;  // "models--org--repo"
  std::string url_prefix() const;    // "org/repo" or "datasets/org/repo"
  std::string api_prefix() const;    // "api/models/org/repo"
};

// The token from HF_TOKEN or the token file; empty when there is none.
std::string read_token(const HubSettings& settings);
// Writes the token file with mode 0600 (creating HF_HOME), atomically.
void save_token(const HubSettings& settings, std::string_view token);
// Removes the token file; false when there was none.
bool delete_token(const HubSettings& settings);
// The account name the hub associates with `token`. Throws a clear error when the hub
// refuses the token.
std::string whoami(const HubSettings& settings, const std::string& token);

// The local path of a file of the repo, downloaded into the cache unless it is there already.
// Used by the hf:// file system; exposed for tools that want the path itself.
std::string cached_file(const RepoPath& file, const HubSettings& settings,
                        const ReadOptions& options = {});

}  // namespace prism::io::hf
