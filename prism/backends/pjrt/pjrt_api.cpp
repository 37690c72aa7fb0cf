#include "prism/backends/pjrt/pjrt_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string_view>

#include "prism/core/error.h"

namespace prism::pjrt {

Plugin::Plugin(std::string path, std::string name)
    : path_(std::move(path)), name_(std::move(name)) {
  // XLA's plugins log to stderr from their first call; errors only, unless the
  // user asks for more.
  setenv("TF_CPP_MIN_LOG_LEVEL", "2", 0);
  handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  PRISM_CHECK(handle_ != nullptr, "{}: cannot load plugin {}: {}", name_, path_, dlerror());
  using GetApi = const PJRT_Api* (*)();
  auto get = reinterpret_cast<GetApi>(dlsym(handle_, "GetPjrtApi"));
  PRISM_CHECK(get != nullptr, "{}: {} is not a PJRT plugin (it exports no GetPjrtApi)", name_,
              path_);
  api_ = get();
  PRISM_CHECK(api_ != nullptr, "{}: {} returned no PJRT API", name_, path_);
  PRISM_CHECK(major() == PJRT_API_MAJOR,
              "{}: {} speaks PJRT C API {}.{}, prism was built for {}.{} (the major versions must "
              "agree)",
              name_, path_, major(), minor(), PJRT_API_MAJOR, PJRT_API_MINOR);
  if (api_->PJRT_Plugin_Initialize) {
    auto a = PRISM_PJRT_ARGS(PJRT_Plugin_Initialize_Args);
    check(api_->PJRT_Plugin_Initialize(&a), "initializing the plugin");
  }
}

void Plugin::check(PJRT_Error* error, const std::string& what) const {
  if (!error) return;
  auto m = PRISM_PJRT_ARGS(PJRT_Error_Message_Args);
  m.error = error;
  api_->PJRT_Error_Message(&m);
  std::string message(m.message, m.message_size);
  auto d = PRISM_PJRT_ARGS(PJRT_Error_Destroy_Args);
  d.error = error;
  api_->PJRT_Error_Destroy(&d);
  // One line: the plugin's messages may run over several.
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  fail("{}: {}: {}", name_, what, message);
}

bool Plugin::succeeded(PJRT_Error* error) const {
  if (!error) return true;
  auto d = PRISM_PJRT_ARGS(PJRT_Error_Destroy_Args);
  d.error = error;
  api_->PJRT_Error_Destroy(&d);
  return false;
}

void Plugin::await(PJRT_Event* event, const std::string& what) const {
  if (!event) return;
  auto a = PRISM_PJRT_ARGS(PJRT_Event_Await_Args);
  a.event = event;
  PJRT_Error* error = api_->PJRT_Event_Await(&a);
  auto d = PRISM_PJRT_ARGS(PJRT_Event_Destroy_Args);
  d.event = event;
  api_->PJRT_Event_Destroy(&d);
  check(error, what);
}

}  // namespace prism::pjrt
