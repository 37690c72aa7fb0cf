#include "prism/llm/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "prism/core/error.h"

namespace prism::llm {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("{}: read failed", path);
  return std::move(buffer).str();
}

TextPosition position_of(std::string_view text, size_t byte_offset) {
  TextPosition position;
  byte_offset = std::min(byte_offset, text.size());
  for (size_t i = 0; i < byte_offset; ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++position.column;
    }
  }
  return position;
}

nlohmann::json parse_json(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is one past the character where parsing stopped.
    size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    TextPosition at = position_of(text, offset);
    std::string message = e.what();
    // Keep nlohmann's explanation, drop its "[json.exception...] parse error at line..." prefix.
    if (auto colon = message.find(": "); colon != std::string::npos) {
      message = message.substr(colon + 2);
    }
    fail("{}:{}:{}: malformed JSON: {}", source, at.line, at.column, message);
  }
}

}  // namespace prism::llm
