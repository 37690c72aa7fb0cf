// vendor.h: dlopen and /proc for the vendor sources.
#include "prism/smi/vendor.h"

#include <dlfcn.h>

#include <fstream>

namespace prism::smi::vendor {

std::string process_name(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

Library::Library(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}

Library::~Library() {
  if (handle_) dlclose(handle_);
}

void* Library::release() {
  void* h = handle_;
  handle_ = nullptr;
  return h;
}

void* Library::find(const char* symbol) const { return handle_ ? dlsym(handle_, symbol) : nullptr; }

}  // namespace prism::smi::vendor
