// The chat page `prism serve` gives at `/`: plain HTML and JavaScript, no build step. It keeps
// the conversation in the page and streams each answer from /v1/chat/completions.
#pragma once

#include <string_view>

namespace prism::serve {

std::string_view chat_page();

}  // namespace prism::serve
