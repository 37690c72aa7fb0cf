// prism::Error: the one exception type. Messages carry their context (op, tags, sizes,
// file names) so that the CLI can print them as one line and exit non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace prism {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws prism::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks an invariant of the caller's input; throws prism::Error when it does not hold.
#define PRISM_CHECK(cond, ...)    \
  do {                            \
    if (!(cond)) {                \
      ::prism::fail(__VA_ARGS__); \
    }                             \
  } while (0)

}  // namespace prism
