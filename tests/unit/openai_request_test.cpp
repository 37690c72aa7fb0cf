// `prism serve`'s request bodies (serve::parse_request): fields of the wrong type anywhere in
// a request are one ApiError (the client's 400) naming the field, never another exception.
// The content part's case is the input fuzz_serve_request once crashed on.
#include <gtest/gtest.h>

#include <string>

#include "prism/serve/openai.h"

namespace prism {
namespace {

// The ApiError parse_request throws for `body` (a chat request), or a failure.
serve::ApiError error_of(const std::string& body) {
  try {
    serve::parse_request(body, true, "m");
  } catch (const serve::ApiError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << body << ": " << e.what();
    return serve::ApiError(500, e.what());
  }
  ADD_FAILURE() << body << ": accepted";
  return serve::ApiError(500, "accepted");
}

TEST(OpenAiRequest, TypesThatAreNotStringsAreTheClientsError) {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  const struct {
    std::string body, param;
  } cases[] = {
      {R"({"messages": [{"role": "user", "content": [{"type": ["text"], "text": "a"}]}]})",
       "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "a"}]}]})", "messages"},
      {"{" + user + R"(, "tools": [{"type": {"a": 1}, "function": {"name": "f"}}]})", "tools"},
      {"{" + user +
           R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": )"
           R"({"type": [], "function": {"name": "f"}}})",
       "tool_choice"},
  };
  for (const auto& c : cases) {
    const serve::ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

}  // namespace
}  // namespace prism
