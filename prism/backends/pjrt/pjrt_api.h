// A PJRT plugin, loaded with dlopen: the C API table it exports (GetPjrtApi), its version
// checked against the header prism was built with, and every PJRT_Error turned into one
// prism::Error line naming the platform and the call that failed.
#pragma once

#include <string>

#include "pjrt_c_api.h"

namespace prism::pjrt {

// Fills a PJRT argument struct: zeroed, with its struct_size set.
template <typename T>
T args(size_t struct_size) {
  T a{};
  a.struct_size = struct_size;
  return a;
}
#define PRISM_PJRT_ARGS(T) ::prism::pjrt::args<T>(T##_STRUCT_SIZE)

class Plugin {
 public:
  // Loads the plugin at `path`; `name` is the platform's name in errors. Throws prism::Error
  // for a file that is not a PJRT plugin or whose API major version differs from the header's.
  Plugin(std::string path, std::string name);
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const PJRT_Api& api() const { return *api_; }
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  int major() const { return api_->pjrt_api_version.major_version; }
  int minor() const { return api_->pjrt_api_version.minor_version; }

  // Throws prism::Error "<name>: <what>: <the plugin's message>" when `error` is set (and
  // frees it).
  void check(PJRT_Error* error, const std::string& what) const;
  // Whether a call whose failure is not an error (an optional query) succeeded; frees `error`.
  bool succeeded(PJRT_Error* error) const;
  // Waits for `event` (when set), frees it, and checks its outcome.
  void await(PJRT_Event* event, const std::string& what) const;

 private:
  std::string path_, name_;
  void* handle_ = nullptr;  // never closed: plugins keep threads that outlive the platform
  const PJRT_Api* api_ = nullptr;
};

}  // namespace prism::pjrt
