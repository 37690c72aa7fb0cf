// libFuzzer target: the Hub's listing of a repository (io::hf::parse_repo_listing: the JSON of
// siblings, names and sizes), then each listed name as the path of an hf:// URI and as a local
// path under a directory, as the cache and `prism io cp` use them. Whatever the Hub answers
// must end in prism::Error, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "prism/core/error.h"
#include "prism/io/hf.h"
#include "prism/io/hf_hub.h"
#include "prism/io/vfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto files = prism::io::hf::parse_repo_listing(
        std::string_view(reinterpret_cast<const char*>(data), size), "hf://org/repo");
    for (const auto& [name, bytes] : files) {
      const auto path = prism::io::hf::RepoPath::parse("hf://org/repo/" + name);
      if (path.path != name || !prism::io::stays_inside(name)) __builtin_trap();
    }
  } catch (const prism::Error&) {
  }
  return 0;
}
