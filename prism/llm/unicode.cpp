#include "prism/llm/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "prism/core/error.h"

namespace prism::llm::unicode {

char32_t next_code_point(std::string_view text, size_t& pos) {
  utf8proc_int32_t code_point = -1;
  auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                               static_cast<utf8proc_ssize_t>(text.size() - pos), &code_point);
  if (read <= 0) {
    pos += 1;
    return 0xFFFD;
  }
  pos += static_cast<size_t>(read);
  return static_cast<char32_t>(code_point);
}

void append_utf8(std::string& out, char32_t code_point) {
  utf8proc_uint8_t buffer[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

std::string to_utf8(char32_t code_point) {
  std::string out;
  append_utf8(out, code_point);
  return out;
}

void validate_utf8(std::string_view text, std::string_view what) {
  size_t pos = 0;
  while (pos < text.size()) {
    utf8proc_int32_t code_point;
    auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                                 static_cast<utf8proc_ssize_t>(text.size() - pos), &code_point);
    if (read <= 0) fail("{}: invalid UTF-8 at byte {}", what, pos);
    pos += static_cast<size_t>(read);
  }
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    utf8proc_int32_t code_point;
    auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data() + pos),
                                 static_cast<utf8proc_ssize_t>(bytes.size() - pos), &code_point);
    if (read > 0) {
      out.append(bytes.substr(pos, static_cast<size_t>(read)));
      pos += static_cast<size_t>(read);
      continue;
    }
    // One replacement character per maximal invalid subpart, as WHATWG and Rust decoders do:
    // a truncated but well-started sequence counts once.
    auto lead = static_cast<unsigned char>(bytes[pos]);
    size_t expected = static_cast<size_t>(sequence_length(lead));
    size_t consumed = 1;
    if (expected > 1) {
      unsigned char lo = 0x80, hi = 0xBF;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
      if (lead > 0xF4 || lead < 0xC2) expected = 1;
      while (consumed < expected && pos + consumed < bytes.size()) {
        auto c = static_cast<unsigned char>(bytes[pos + consumed]);
        if (c < lo || c > hi) break;
        lo = 0x80;
        hi = 0xBF;
        ++consumed;
      }
    }
    out += "\xEF\xBF\xBD";
    pos += consumed;
  }
  return out;
}

namespace {

std::string normalize_with_utf8proc(std::string_view text, int options) {
  utf8proc_uint8_t* result = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                        static_cast<utf8proc_ssize_t>(text.size()), &result,
                        static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

bool is_ascii(char c) { return static_cast<unsigned char>(c) < 0x80; }

}  // namespace

std::string normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  // ASCII is in every normal form, and an ASCII character followed by another ASCII character
  // never interacts with its neighbours (no composition has an ASCII second element). So only the
  // non-ASCII runs, each with the ASCII starter just before it, go through the library.
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    while (next < text.size() && is_ascii(text[next])) ++next;
    if (next == text.size()) {
      out.append(text.substr(pos));
      break;
    }
    size_t start = next > pos ? next - 1 : next;
    out.append(text.substr(pos, start - pos));
    size_t end = next;
    while (end < text.size() &&
           !(is_ascii(text[end]) && (end + 1 == text.size() || is_ascii(text[end + 1])))) {
      ++end;
    }
    out += normalize_with_utf8proc(text.substr(start, end - start), options);
    pos = end;
  }
  return out;
}

namespace {
template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    auto c = static_cast<unsigned char>(text[pos]);
    if (c < 0x80) {
      out += static_cast<char>(map(static_cast<char32_t>(c)));
      ++pos;
      continue;
    }
    append_utf8(out, map(next_code_point(text, pos)));
  }
  return out;
}
}  // namespace

std::string to_lower(std::string_view text) {
  // U+0130 (capital I with dot above) is the one character whose lowercase is two code points
  // (SpecialCasing.txt, unconditional); utf8proc gives only simple case mappings.
  constexpr std::string_view kDottedCapitalI = "\xC4\xB0";
  if (text.find(kDottedCapitalI) != std::string_view::npos) {
    std::string expanded;
    size_t last = 0, pos;
    while ((pos = text.find(kDottedCapitalI, last)) != std::string_view::npos) {
      expanded.append(text.substr(last, pos - last));
      expanded += "i\xCC\x87";
      last = pos + kDottedCapitalI.size();
    }
    expanded.append(text.substr(last));
    return to_lower(expanded);
  }
  return map_code_points(text, [](char32_t c) {
    return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  });
}

std::string to_upper(std::string_view text) {
  return map_code_points(text, [](char32_t c) {
    return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
  });
}

namespace {
utf8proc_propval_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
}  // namespace

bool is_whitespace(char32_t c) {
  // Unicode's White_Space property (what Rust's char::is_whitespace tests).
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_numeric(char32_t c) {
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
  auto cat = category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || is_numeric(c);
}

bool is_punctuation(char32_t c) {
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    a.code_point_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      a.byte_to_utf8[b] = to_utf8(cp);
      a.code_point_to_byte[cp] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return alphabet;
}

}  // namespace prism::llm::unicode
