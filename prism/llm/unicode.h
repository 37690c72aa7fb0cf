// Unicode helpers the tokenizers need: UTF-8 walking, normalization forms (through utf8proc),
// character classes as Rust's `char` methods define them, and GPT-2's byte-to-character table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace prism::llm::unicode {

// Number of bytes of the UTF-8 sequence that starts with `lead` (1 for invalid leads, so that
// walking a broken string still advances).
inline int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at text[pos] and advances pos past it. Invalid bytes decode as U+FFFD.
char32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t code_point);
std::string to_utf8(char32_t code_point);

// Throws prism::Error naming `what` and the byte offset when `text` is not valid UTF-8.
void validate_utf8(std::string_view text, std::string_view what);
// Replaces every invalid sequence by U+FFFD, the way a lenient UTF-8 decoder does.
std::string to_valid_utf8(std::string_view bytes);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view text, NormalForm form);
std::string to_lower(std::string_view text);
std::string to_upper(std::string_view text);

// Character classes (Unicode general categories / properties).
bool is_whitespace(char32_t c);
bool is_alphanumeric(char32_t c);
bool is_numeric(char32_t c);
bool is_punctuation(char32_t c);

// GPT-2's reversible map from the 256 byte values to printable code points: printable
// Latin-1 bytes map to themselves, the rest to U+0100 onwards.
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_utf8;
  // Inverse, indexed by code point below 0x200; -1 where no byte maps there.
  std::array<int16_t, 0x200> code_point_to_byte;
};
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace prism::llm::unicode
