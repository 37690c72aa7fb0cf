#include "prism/llm/pattern_fast_path.h"

#include <cstdint>

#include "prism/llm/unicode.h"

namespace prism::llm {

namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

// The class of every code point, as PCRE2 (UTF + UCP) sees \p{L}, \p{N} and \s: computed by
// running those patterns over all code points once, so the two paths cannot disagree.
const std::vector<uint8_t>& character_classes() {
  static const std::vector<uint8_t> classes = [] {
    constexpr char32_t kCodePoints = 0x110000;
    std::string all;
    std::vector<uint32_t> offsets;  // code point of each byte offset where one starts
    all.reserve(kCodePoints * 4);
    for (char32_t c = 0; c < kCodePoints; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;  // surrogates are not characters
      unicode::append_utf8(all, c);
    }
    std::vector<uint8_t> table(kCodePoints, 0);
    auto mark = [&](const char* pattern, uint8_t flag) {
      for (const Match& m : Regex(pattern, "character classes").find_all(all)) {
        size_t pos = m.begin;
        while (pos < m.end) table[unicode::next_code_point(all, pos)] |= flag;
      }
    };
    mark(R"(\p{L}+)", kLetter);
    mark(R"(\p{N}+)", kNumber);
    mark(R"(\s+)", kSpace);
    return table;
  }();
  return classes;
}

class Scanner {
 public:
  Scanner(std::string_view text, const std::vector<uint8_t>& classes)
      : text_(text), classes_(classes) {}

  size_t size() const { return text_.size(); }

  // The code point at `pos` and the offset after it.
  char32_t at(size_t pos, size_t& next) const {
    auto lead = static_cast<unsigned char>(text_[pos]);
    if (lead < 0x80) {
      next = pos + 1;
      return lead;
    }
    next = pos;
    return unicode::next_code_point(text_, next);
  }
  uint8_t flags(char32_t c) const { return c < classes_.size() ? classes_[c] : 0; }

  // End of the run of characters whose flags satisfy `want`, from `pos`.
  template <typename Want>
  size_t run(size_t pos, Want want) const {
    while (pos < text_.size()) {
      size_t next;
      char32_t c = at(pos, next);
      if (!want(c, flags(c))) break;
      pos = next;
    }
    return pos;
  }

 private:
  std::string_view text_;
  const std::vector<uint8_t>& classes_;
};

bool is_other(uint8_t flags) { return (flags & (kLetter | kNumber | kSpace)) == 0; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at `pos` (which holds the apostrophe): the end, or 0.
size_t contraction(const Scanner& s, size_t pos) {
  size_t after1, after2;
  if (pos + 1 >= s.size()) return 0;
  char32_t c1 = s.at(pos + 1, after1);
  // Caseless under Unicode: U+017F (long s) folds to 's'.
  if (c1 == 's' || c1 == 'S' || c1 == 0x17F || c1 == 't' || c1 == 'T' || c1 == 'm' || c1 == 'M' ||
      c1 == 'd' || c1 == 'D') {
    return after1;
  }
  if (after1 >= s.size()) return 0;
  char32_t c2 = s.at(after1, after2);
  if ((c1 == 'r' || c1 == 'R' || c1 == 'v' || c1 == 'V') && (c2 == 'e' || c2 == 'E')) {
    return after2;
  }
  if ((c1 == 'l' || c1 == 'L') && (c2 == 'l' || c2 == 'L')) return after2;
  return 0;
}

// The end of the match that starts at `pos` (every character starts one).
size_t match_at(const Scanner& s, size_t pos, int max_digits) {
  size_t next;
  char32_t c = s.at(pos, next);
  uint8_t f = s.flags(c);
  auto letters = [](char32_t, uint8_t flags) { return (flags & kLetter) != 0; };

  if (c == '\'') {
    if (size_t end = contraction(s, pos)) return end;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (f & kLetter) return s.run(next, letters);
  if (c != '\r' && c != '\n' && !(f & kNumber) && next < s.size()) {
    size_t after;
    char32_t c1 = s.at(next, after);
    if (s.flags(c1) & kLetter) return s.run(after, letters);
  }
  // \p{N}{1,max}
  if (f & kNumber) {
    size_t end = next;
    for (int digits = 1; digits < max_digits && end < s.size(); ++digits) {
      size_t after;
      if (!(s.flags(s.at(end, after)) & kNumber)) break;
      end = after;
    }
    return end;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t start = pos;
  if (c == ' ' && next < s.size()) {
    size_t after;
    if (is_other(s.flags(s.at(next, after)))) start = next;
  }
  {
    size_t after;
    if (is_other(s.flags(s.at(start, after)))) {
      size_t end = s.run(after, [](char32_t, uint8_t flags) { return is_other(flags); });
      return s.run(end, [](char32_t x, uint8_t) { return x == '\r' || x == '\n'; });
    }
  }
  // Here `c` is whitespace. \s*[\r\n]+ : up to the last line break of the whitespace run.
  size_t last_break_end = 0, last_char_start = pos, end = pos;
  while (end < s.size()) {
    size_t after;
    char32_t x = s.at(end, after);
    if (!(s.flags(x) & kSpace)) break;
    if (x == '\r' || x == '\n') last_break_end = after;
    last_char_start = end;
    end = after;
  }
  if (last_break_end) return last_break_end;
  // \s+(?!\S): the run, or all of it but its last character when something follows.
  if (end == s.size()) return end;
  if (last_char_start > pos) return last_char_start;
  // \s+
  return end;
}

}  // namespace

std::optional<int> llama3_family_max_digits(std::string_view pattern) {
  if (pattern == kLlama3Pattern) return 3;
  if (pattern == kQwenPattern) return 1;
  return std::nullopt;
}

void for_each_llama3_family_match(std::string_view text, int max_digits, MatchSink sink) {
  Scanner scanner(text, character_classes());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = match_at(scanner, pos, max_digits);
    sink({pos, end});
    pos = end;
  }
}

std::vector<Match> split_llama3_family(std::string_view text, int max_digits) {
  std::vector<Match> matches;
  for_each_llama3_family_match(text, max_digits, [&](Match m) { matches.push_back(m); });
  return matches;
}

}  // namespace prism::llm
