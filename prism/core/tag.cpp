#include "prism/core/tag.h"

#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace prism {
namespace {

// Tags are names, not state: one process-wide intern table is enough. Reads (str()) are far
// more frequent than new names, hence the shared lock.
struct TagTable {
  std::shared_mutex mutex;
  std::unordered_map<std::string, uint32_t> ids;
  std::deque<std::string> names{"_"};
};

TagTable& table() {
  static TagTable t;
  return t;
}

}  // namespace

Tag::Tag(std::string_view name) {
  if (name.empty()) return;
  auto& t = table();
  {
    std::shared_lock lock(t.mutex);
    auto it = t.ids.find(std::string(name));
    if (it != t.ids.end()) {
      id_ = it->second;
      return;
    }
  }
  std::unique_lock lock(t.mutex);
  auto [it, inserted] = t.ids.try_emplace(std::string(name), static_cast<uint32_t>(t.names.size()));
  if (inserted) t.names.emplace_back(name);
  id_ = it->second;
}

const std::string& Tag::str() const {
  auto& t = table();
  std::shared_lock lock(t.mutex);
  return t.names[id_];  // std::deque never moves its elements
}

}  // namespace prism
