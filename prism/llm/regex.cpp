#define PCRE2_CODE_UNIT_WIDTH 8
#include "prism/llm/regex.h"

#include <pcre2.h>

#include "prism/core/error.h"
#include "prism/llm/pattern_fast_path.h"
#include "prism/llm/unicode.h"

namespace prism::llm {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Oniguruma's \s is Unicode's White_Space; PCRE2's (with UCP) also takes U+180E, which Unicode
// 6.3 moved out of the spaces. Both escapes are spelt as the property, in or out of a class.
std::string with_white_space_property(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
    } else if (char next = pattern[++i]; next == 's' || next == 'S') {
      out += next == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

}  // namespace

Regex::Regex(std::string_view pattern, std::string_view context) : pattern_(pattern) {
  auto compile = [](std::string_view text, int& error, PCRE2_SIZE& offset) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  };
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = compile(with_white_space_property(pattern), error, offset);
  if (code == nullptr) {
    // Where the pattern as written fails, when it does (the rewriting moves offsets).
    int original_error = 0;
    PCRE2_SIZE original_offset = 0;
    pcre2_code* original = compile(pattern, original_error, original_offset);
    if (original == nullptr) {
      error = original_error;
      offset = original_offset;
    }
    pcre2_code_free(original);
    fail("{}: bad regex /{}/ at offset {}: {}", context, pattern, offset, pcre2_message(error));
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  compiled_ = std::move(compiled);
  if (auto max_digits = llama3_family_max_digits(pattern)) fast_path_max_digits_ = *max_digits;
}

std::vector<Match> Regex::find_all(std::string_view text) const {
  std::vector<Match> matches;
  for_each_match(text, [&](Match m) { matches.push_back(m); });
  return matches;
}

void Regex::for_each_match(std::string_view text, MatchSink sink) const {
  if (fast_path_max_digits_ > 0) {
    for_each_llama3_family_match(text, fast_path_max_digits_, sink);
    return;
  }
  if (!compiled_) return;
  // One match data per call: `sink` may run other patterns (a Split followed by a ByteLevel with
  // its regex) before this scan resumes, so nothing here may be shared.
  MatchData match_data(compiled_->code);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, text.size(), start,
                                              PCRE2_NO_UTF_CHECK, match_data.data, nullptr)
                            : pcre2_match(compiled_->code, subject, text.size(), start,
                                          PCRE2_NO_UTF_CHECK, match_data.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex /{}/: match failed: {}", pattern_, pcre2_message(rc));
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.data);
    size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      sink({begin, end});
      start = end;
    } else {
      // An empty match: step over one character so the scan moves on.
      if (begin >= text.size()) break;
      start = begin + static_cast<size_t>(
                          unicode::sequence_length(static_cast<unsigned char>(text[begin])));
    }
  }
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace prism::llm
