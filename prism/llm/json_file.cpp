#include "prism/llm/json_file.h"

#include <cctype>
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
  } catch (const nlohmann::json::exception& e) {
    // A number past double's range ("9e999"): no position comes with it.
    std::string message = e.what();
    if (auto end = message.find("] "); end != std::string::npos) message = message.substr(end + 2);
    fail("{}: malformed JSON: {}", source, message);
  }
}

namespace {

// A forward-only walk over JSON text that is already known to parse.
class JsonWalker {
 public:
  explicit JsonWalker(std::string_view text) : text_(text) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // The raw text of a string (escapes left as they are), positioned after its closing quote.
  std::string_view string() {
    skip_space();
    size_t begin = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != '"') pos_ += text_[pos_] == '\\' ? 2 : 1;
    return text_.substr(begin, (pos_++) - begin);
  }
  void skip_value() {
    skip_space();
    if (pos_ >= text_.size()) return;
    char c = text_[pos_];
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      int depth = 0;
      do {
        char d = text_[pos_];
        if (d == '"') {
          string();
          continue;
        }
        if (d == '{' || d == '[') ++depth;
        if (d == '}' || d == ']') --depth;
        ++pos_;
      } while (depth > 0 && pos_ < text_.size());
    } else {
      while (pos_ < text_.size() &&
             std::string_view(",}] \t\r\n").find(text_[pos_]) == std::string_view::npos)
        ++pos_;
    }
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<TextPosition> locate_json_path(std::string_view text, std::string_view path) {
  JsonWalker walker(text);
  size_t at = 0;
  while (at < path.size()) {
    if (path[at] == '.') ++at;
    if (path[at] == '[') {
      size_t close = path.find(']', at);
      if (close == std::string_view::npos) return std::nullopt;
      size_t index = std::stoul(std::string(path.substr(at + 1, close - at - 1)));
      at = close + 1;
      if (!walker.consume('[')) return std::nullopt;
      for (size_t i = 0; i < index; ++i) {
        walker.skip_value();
        if (!walker.consume(',')) return std::nullopt;
      }
    } else {
      size_t end = path.find_first_of(".[", at);
      std::string_view key =
          path.substr(at, end == std::string_view::npos ? path.size() - at : end - at);
      at = end == std::string_view::npos ? path.size() : end;
      if (!walker.consume('{')) return std::nullopt;
      while (true) {
        if (walker.consume('}')) return std::nullopt;
        std::string_view name = walker.string();
        if (!walker.consume(':')) return std::nullopt;
        if (name == key) break;
        walker.skip_value();
        walker.consume(',');
      }
    }
  }
  walker.skip_space();
  return position_of(text, walker.pos());
}

}  // namespace prism::llm
