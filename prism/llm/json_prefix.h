// Whether a text is the start of a JSON object (RFC 8259), byte by byte: what constrains an
// answer to JSON (`prism serve`'s response_format json_object). Each byte either keeps the
// text a prefix of some valid JSON object text (strings in valid UTF-8, \u escapes of UTF-16
// surrogates in pairs) or is refused;
// complete() says when the object has closed. Whitespace between tokens is allowed up to a
// limit, so that a constrained model cannot spin on blanks, and nesting up to a depth; nothing
// may follow the closed object.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace prism::llm {

class JsonPrefix {
 public:
  // Feeds one byte; false (and the state unchanged) where the text would no longer start a
  // JSON object.
  bool feed(char c);
  // Feeds bytes in turn; false at the first refused one (the state then is undefined: feed a
  // copy).
  bool feed(std::string_view bytes);
  bool complete() const { return state_ == State::done; }
  // Inside a string, between characters: any printable text without a quote or backslash, in
  // whole UTF-8 characters, keeps it there.
  bool in_plain_string() const { return state_ == State::string && utf8_left_ == 0 && !want_low_; }

  static constexpr int kMaxBlanks = 16;  // consecutive whitespace bytes allowed
  static constexpr int kMaxDepth = 64;   // containers open at once

 private:
  enum class State : uint8_t {
    start,        // before the object's '{'
    key,          // an object's key (or '}' where it may be empty)
    colon,        // after a key
    value,        // a value (or ']' where an array may be empty)
    after_value,  // ',' or the container's close
    string,       // inside a string (in_key_ says which)
    escape,       // after a backslash in a string
    hex,          // \uXXXX: hex_left_ digits to go
    number,       // inside a number (number_ says where)
    literal,      // inside true, false or null (literal_ and literal_at_)
    done,         // the object has closed
  };
  // Where a number is: after '-', after a leading '0', in its integer digits, after '.', in
  // its fraction digits, after 'e', after the exponent's sign, in the exponent's digits.
  enum class Number : uint8_t { minus, zero, integer, dot, fraction, e, e_sign, exponent };

  bool step(char c);
  bool string_byte(unsigned char byte);  // a byte of a string's text, as valid UTF-8
  bool blank(char c);
  bool begin_value(char c);
  bool end_value();  // a value ended: after it in its container, or done
  static bool number_may_end(Number n);

  State state_ = State::start;
  Number number_ = Number::integer;
  bool in_key_ = false;
  bool empty_ok_ = false;  // a '}' or ']' may come now: the container is still empty
  int blanks_ = 0;
  int hex_left_ = 0;
  uint16_t code_ = 0;      // a \u escape's value so far
  bool want_low_ = false;  // after a high surrogate's escape: its low one must come
  // A string's UTF-8: continuation bytes to go, and the range the next must be in.
  int utf8_left_ = 0;
  uint8_t utf8_low_ = 0x80, utf8_high_ = 0xBF;
  const char* literal_ = nullptr;
  int literal_at_ = 0;
  // The open containers, '{' or '[' (fixed, so that a copy, made for each token of the
  // vocabulary each step, costs no allocation).
  std::array<char, kMaxDepth> stack_{};
  int depth_ = 0;
  char top() const { return stack_[depth_ - 1]; }
  bool open(char c);
};

}  // namespace prism::llm
