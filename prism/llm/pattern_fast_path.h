// A hand-written matcher for the pre-tokenizer pattern of the Llama 3 and Qwen 2/3 families:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+                        (Qwen: \p{N} instead of \p{N}{1,3})
//
// It returns the same matches as PCRE2 does for that pattern (its character classes come from
// PCRE2 itself), a few times faster, since this split is most of the cost of encoding.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "prism/llm/regex.h"

namespace prism::llm {

// The `{1,n}` of the number alternative when `pattern` is one of the family, else nullopt.
std::optional<int> llama3_family_max_digits(std::string_view pattern);

// All matches of the pattern with that digit count in valid UTF-8 `text`.
std::vector<Match> split_llama3_family(std::string_view text, int max_digits);
void for_each_llama3_family_match(std::string_view text, int max_digits, MatchSink sink);

}  // namespace prism::llm
