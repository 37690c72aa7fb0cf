#include "prism/llm/json_prefix.h"

namespace prism::llm {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonPrefix::feed(char c) {
  const JsonPrefix before = *this;
  if (step(c)) return true;
  *this = before;
  return false;
}

bool JsonPrefix::feed(std::string_view bytes) {
  for (const char c : bytes) {
    if (!step(c)) return false;
  }
  return true;
}

bool JsonPrefix::blank(char c) {
  if (!is_blank(c) || blanks_ >= kMaxBlanks) return false;
  ++blanks_;
  return true;
}

bool JsonPrefix::number_may_end(Number n) {
  return n == Number::zero || n == Number::integer || n == Number::fraction ||
         n == Number::exponent;
}

bool JsonPrefix::open(char c) {
  if (depth_ == kMaxDepth) return false;
  stack_[depth_++] = c;
  return true;
}

bool JsonPrefix::end_value() {
  if (depth_ == 0) {
    state_ = State::done;
  } else {
    state_ = State::after_value;
  }
  return true;
}

// The first byte of a value (not whitespace).
bool JsonPrefix::begin_value(char c) {
  switch (c) {
    case '{':
      if (!open('{')) return false;
      state_ = State::key;
      empty_ok_ = true;
      return true;
    case '[':
      if (!open('[')) return false;
      state_ = State::value;
      empty_ok_ = true;
      return true;
    case '"':
      state_ = State::string;
      in_key_ = false;
      return true;
    case '-':
      state_ = State::number;
      number_ = Number::minus;
      return true;
    case 't':
    case 'f':
    case 'n':
      state_ = State::literal;
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_at_ = 1;
      return true;
    default:
      if (!is_digit(c)) return false;
      state_ = State::number;
      number_ = c == '0' ? Number::zero : Number::integer;
      return true;
  }
}

// UTF-8 as RFC 3629 has it: no overlong forms, no surrogates, nothing past U+10FFFF.
bool JsonPrefix::string_byte(unsigned char byte) {
  if (utf8_left_ > 0) {
    if (byte < utf8_low_ || byte > utf8_high_) return false;
    --utf8_left_;
    utf8_low_ = 0x80;
    utf8_high_ = 0xBF;
    return true;
  }
  if (byte >= 0xC2 && byte <= 0xDF) {
    utf8_left_ = 1;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    utf8_left_ = 2;
    if (byte == 0xE0) utf8_low_ = 0xA0;   // not overlong
    if (byte == 0xED) utf8_high_ = 0x9F;  // not a surrogate
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    utf8_left_ = 3;
    if (byte == 0xF0) utf8_low_ = 0x90;   // not overlong
    if (byte == 0xF4) utf8_high_ = 0x8F;  // not past U+10FFFF
  } else {
    return false;  // a continuation byte, C0, C1, F5-FF
  }
  return true;
}

bool JsonPrefix::step(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (state_ != State::string && state_ != State::escape && state_ != State::hex && !is_blank(c)) {
    blanks_ = 0;
  }
  switch (state_) {
    case State::start:
      if (c == '{') return begin_value(c);
      return blank(c);
    case State::key:
      if (c == '"') {
        state_ = State::string;
        in_key_ = true;
        return true;
      }
      if (c == '}' && empty_ok_) {
        --depth_;
        return end_value();
      }
      return blank(c);
    case State::colon:
      if (c == ':') {
        state_ = State::value;
        empty_ok_ = false;
        return true;
      }
      return blank(c);
    case State::value:
      if (c == ']' && empty_ok_) {
        --depth_;
        return end_value();
      }
      if (is_blank(c)) return blank(c);
      return begin_value(c);
    case State::after_value:
      if (c == ',') {
        state_ = top() == '{' ? State::key : State::value;
        empty_ok_ = false;
        return true;
      }
      if (c == (top() == '{' ? '}' : ']')) {
        --depth_;
        return end_value();
      }
      return blank(c);
    case State::string:
      if (want_low_ && c != '\\') return false;  // a high surrogate's pair must follow
      if (utf8_left_ > 0 || byte >= 0x80) return string_byte(byte);
      if (c == '"') {
        if (in_key_) {
          state_ = State::colon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') {
        state_ = State::escape;
        return true;
      }
      return byte >= 0x20;  // control characters must be escaped
    case State::escape:
      if (c == 'u') {
        state_ = State::hex;
        hex_left_ = 4;
        code_ = 0;
        return true;
      }
      if (want_low_) return false;
      if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return false;
      state_ = State::string;
      return true;
    case State::hex: {
      if (!is_hex(c)) return false;
      const int digit = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      code_ = static_cast<uint16_t>(code_ * 16 + digit);
      // A low surrogate (DC00-DFFF) must come after a high one and nowhere else: said by the
      // first two digits, so that no prefix taken is left without a way on.
      if (hex_left_ == 4 && want_low_ && code_ != 0xD) return false;
      if (hex_left_ == 3 && (code_ >= 0xDC && code_ <= 0xDF) != want_low_) return false;
      if (--hex_left_ > 0) return true;
      // UTF-16 surrogates come in pairs: a high one, then a low one.
      const bool high = code_ >= 0xD800 && code_ <= 0xDBFF;
      const bool low = code_ >= 0xDC00 && code_ <= 0xDFFF;
      if (low != want_low_) return false;
      want_low_ = high;
      state_ = State::string;
      return true;
    }
    case State::number:
      switch (number_) {
        case Number::minus:
          if (!is_digit(c)) return false;
          number_ = c == '0' ? Number::zero : Number::integer;
          return true;
        case Number::zero:
        case Number::integer:
          if (is_digit(c) && number_ == Number::integer) return true;
          if (c == '.') {
            number_ = Number::dot;
            return true;
          }
          if (c == 'e' || c == 'E') {
            number_ = Number::e;
            return true;
          }
          break;
        case Number::dot:
          if (!is_digit(c)) return false;
          number_ = Number::fraction;
          return true;
        case Number::fraction:
          if (is_digit(c)) return true;
          if (c == 'e' || c == 'E') {
            number_ = Number::e;
            return true;
          }
          break;
        case Number::e:
          if (c == '+' || c == '-') {
            number_ = Number::e_sign;
            return true;
          }
          [[fallthrough]];
        case Number::e_sign:
          if (!is_digit(c)) return false;
          number_ = Number::exponent;
          return true;
        case Number::exponent:
          if (is_digit(c)) return true;
          break;
      }
      // The number ends here (inside a container: the object opened first), and c belongs to
      // what follows it.
      if (!number_may_end(number_)) return false;
      end_value();
      return step(c);
    case State::literal:
      if (c != literal_[literal_at_]) return false;
      if (literal_[++literal_at_] == '\0') return end_value();
      return true;
    case State::done:
      return false;
  }
  return false;
}

}  // namespace prism::llm
