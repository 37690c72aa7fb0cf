#include "prism/llm/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "prism/core/error.h"
#include "prism/llm/unicode.h"

namespace prism::llm::jinja {

const char* token_kind_name(Token::Kind kind) {
  switch (kind) {
    case Token::Kind::Text:
      return "text";
    case Token::Kind::ExprOpen:
      return "'{{'";
    case Token::Kind::ExprClose:
      return "'}}'";
    case Token::Kind::StmtOpen:
      return "'{%'";
    case Token::Kind::StmtClose:
      return "'%}'";
    case Token::Kind::Name:
      return "name";
    case Token::Kind::String:
      return "string";
    case Token::Kind::Integer:
      return "integer";
    case Token::Kind::Float:
      return "number";
    case Token::Kind::Operator:
      return "operator";
    case Token::Kind::End:
      return "end of template";
  }
  return "token";
}

namespace {

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : src_(source), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next_text = false;  // a `-` closed the previous tag
    while (pos < src_.size()) {
      size_t open = find_tag_open(pos);
      std::string text(src_.substr(pos, open - pos));
      if (strip_next_text) text.erase(0, text.find_first_not_of(" \t\n\r\f\v"));
      if (strip_next_text && text.find_first_not_of(" \t\n\r\f\v") == std::string::npos) {
        text.clear();
      }
      strip_next_text = false;
      if (open == src_.size()) {
        emit_text(std::move(text), pos);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (marker != '+' && kind != '{') {
        // lstrip_blocks: a block tag alone on its line takes its indentation with it.
        size_t line_start = text.find_last_of('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool at_line_start =
            line_start > 0 || pos == 0 || src_[pos - 1] == '\n' || previous_was_line_start_;
        if (at_line_start && text.find_first_not_of(" \t", line_start) == std::string::npos) {
          text.erase(line_start);
        }
      }
      previous_was_line_start_ = false;  // only a block tag's trimmed newline sets it again
      emit_text(std::move(text), pos);
      size_t inner = open + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      bool strip_after = false;
      if (kind == '#') {
        size_t close = src_.find("#}", inner);
        if (close == std::string_view::npos) error(open, "unclosed comment");
        strip_after = close > inner && src_[close - 1] == '-';
        pos = close + 2;
        if (!strip_after) pos = trim_block_newline(pos);
      } else {
        tokens_.push_back({kind == '{' ? Token::Kind::ExprOpen : Token::Kind::StmtOpen,
                           kind == '{' ? "{{" : "{%", location(open)});
        size_t first_token = tokens_.size();
        pos = lex_tag(open, inner, kind == '{' ? '}' : '%', strip_after);
        if (kind == '%' && !strip_after) pos = trim_block_newline(pos);
        if (kind == '%' && tokens_.size() == first_token + 2 &&
            tokens_[first_token].kind == Token::Kind::Name && tokens_[first_token].text == "raw") {
          tokens_.resize(first_token - 1);
          pos = lex_raw(pos, open, strip_after, strip_next_text);
          continue;
        }
      }
      strip_next_text = strip_after;
    }
    tokens_.push_back({Token::Kind::End, "", location(src_.size())});
    return std::move(tokens_);
  }

 private:
  Location location(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_start = *(it - 1);
    Location at;
    at.line = static_cast<int>(it - line_starts_.begin());
    at.column = 1;
    for (size_t i = line_start; i < offset && i < src_.size(); ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++at.column;
    }
    return at;
  }

  [[noreturn]] void error(size_t offset, const std::string& message) const {
    Location at = location(offset);
    fail("{}:{}:{}: template syntax error: {}", name_, at.line, at.column, message);
  }

  size_t find_tag_open(size_t pos) const {
    while (true) {
      size_t brace = src_.find('{', pos);
      if (brace == std::string_view::npos || brace + 1 >= src_.size()) return src_.size();
      char next = src_[brace + 1];
      if (next == '{' || next == '%' || next == '#') return brace;
      pos = brace + 1;
    }
  }

  // trim_blocks: the first newline after a block tag is dropped.
  size_t trim_block_newline(size_t pos) {
    previous_was_line_start_ = false;
    if (pos < src_.size() && src_[pos] == '\n') {
      previous_was_line_start_ = true;
      return pos + 1;
    }
    if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') {
      previous_was_line_start_ = true;
      return pos + 2;
    }
    return pos;
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, std::move(text), location(offset)});
  }

  // {% raw %}...{% endraw %}: everything in between is text.
  size_t lex_raw(size_t pos, size_t open, bool strip_first, bool& strip_next_text) {
    size_t search = pos;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string_view::npos) error(open, "'raw' was never closed (expected 'endraw')");
      size_t p = tag + 2;
      bool strip_before = p < src_.size() && src_[p] == '-';
      if (strip_before || (p < src_.size() && src_[p] == '+')) ++p;
      while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
      bool strip_after = p < src_.size() && src_[p] == '-';
      if (strip_after) ++p;
      if (src_.compare(p, 2, "%}") != 0) error(p, "expected '%}' after 'endraw'");
      std::string text(src_.substr(pos, tag - pos));
      if (strip_first) text.erase(0, text.find_first_not_of(" \t\n\r\f\v"));
      if (strip_before) text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      emit_text(std::move(text), pos);
      strip_next_text = strip_after;
      return strip_after ? p + 2 : trim_block_newline(p + 2);
    }
  }

  // Tokens of one tag up to its closing `}}` or `%}`; returns the offset after it.
  size_t lex_tag(size_t tag_start, size_t pos, char closer, bool& strip_after) {
    int depth = 0;  // open brackets: a '}' inside a dict literal does not close the tag
    while (true) {
      while (pos < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos]))) ++pos;
      if (pos >= src_.size()) {
        error(tag_start, closer == '}' ? "this '{{' is never closed with '}}'"
                                       : "this '{%' is never closed with '%}'");
      }
      char c = src_[pos];
      auto closes_at = [&](size_t p) {
        return p + 1 < src_.size() && src_[p] == closer && src_[p + 1] == '}' &&
               (closer == '%' || depth == 0);
      };
      if (c == '-' && closes_at(pos + 1)) {
        strip_after = true;
        pos += 1;
        c = src_[pos];
      }
      if (closes_at(pos)) {
        tokens_.push_back({closer == '}' ? Token::Kind::ExprClose : Token::Kind::StmtClose,
                           closer == '}' ? "}}" : "%}", location(pos)});
        return pos + 2;
      }
      Location at = location(pos);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
          ++end;
        }
        tokens_.push_back({Token::Kind::Name, std::string(src_.substr(pos, end - pos)), at});
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = pos;
        bool is_float = false;
        while (end < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        if (end + 1 < src_.size() && src_[end] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
          is_float = true;
          ++end;
          while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
          size_t e = end + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            end = e;
            while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
          }
        }
        std::string digits;
        for (char d : src_.substr(pos, end - pos)) {
          if (d != '_') digits += d;
        }
        tokens_.push_back({is_float ? Token::Kind::Float : Token::Kind::Integer, digits, at});
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static constexpr std::string_view kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (auto two : kTwoChar) {
          if (src_.compare(pos, 2, two) == 0) op = two;
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~<>=.,:|()[]{}!").find(c) == std::string_view::npos) {
          error(pos, fmt::format("unexpected character '{}'", c));
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back({Token::Kind::Operator, op, at});
        pos += op.size();
      }
    }
  }

  size_t lex_string(size_t pos) {
    char quote = src_[pos];
    Location at = location(pos);
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) error(pos, "unterminated string");
      char c = src_[p];
      if (c == quote) break;
      if (c == '\\' && p + 1 < src_.size()) {
        char e = src_[p + 1];
        p += 2;
        switch (e) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          case '0':
            value += '\0';
            break;
          case '\\':
            value += '\\';
            break;
          case '\'':
            value += '\'';
            break;
          case '"':
            value += '"';
            break;
          case 'u':
          case 'x': {
            size_t digits = e == 'u' ? 4 : 2;
            uint32_t cp = 0;
            const char* first = src_.data() + p;
            if (p + digits > src_.size() ||
                std::from_chars(first, first + digits, cp, 16).ptr != first + digits) {
              error(p, "bad escape in string");  // found by fuzz/fuzz_jinja: std::stoul threw
            }
            unicode::append_utf8(value, static_cast<char32_t>(cp));
            p += digits;
            break;
          }
          default:
            // Python keeps unknown escapes as they are.
            value += '\\';
            value += e;
        }
        continue;
      }
      value += c;
      ++p;
    }
    tokens_.push_back({Token::Kind::String, std::move(value), at});
    return p + 1;
  }

  std::string_view src_;
  std::string_view name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool previous_was_line_start_ = false;
};

}  // namespace

std::vector<Token> tokenize_template(std::string_view source, std::string_view source_name) {
  return Lexer(source, source_name).run();
}

}  // namespace prism::llm::jinja
