// The hand-written matcher for the Llama 3 / Qwen pre-tokenizer pattern against PCRE2 on the
// same pattern, over random strings built from the characters where the two could disagree.
#include "prism/llm/pattern_fast_path.h"

#include <gtest/gtest.h>

#include <random>

#include "prism/llm/regex.h"
#include "prism/llm/unicode.h"

namespace prism::llm {
namespace {

const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string random_text(std::mt19937& random) {
  static const char32_t kPalette[] = {
      'a',    'B',    's',    'S',     't',     'r',    'e',    'v',    'm',   'l',    'L',
      'd',    'D',    '\'',   '\'',    '0',     '7',    ' ',    ' ',    ' ',   '\t',   '\n',
      '\r',   0x0B,   0x0C,   '.',     ',',     '!',    '(',    '-',    '_',   '"',    0x17F,
      0xA0,   0x85,   0x180E, 0x2028,  0x2029,  0x3000, 0x200B, 0xFEFF, 0x301, 0x4E2D, 0x0661,
      0x2460, 0x216B, 0xFF11, 0x1F999, 0x1F600, 0x130,  0x3B1,  0x5D0,  0x915, 0x93F,  0x10400};
  std::uniform_int_distribution<size_t> pick(0, std::size(kPalette) - 1);
  std::uniform_int_distribution<int> length(0, 24);
  std::string text;
  for (int i = length(random); i > 0; --i) unicode::append_utf8(text, kPalette[pick(random)]);
  return text;
}

void expect_same_as_pcre2(const char* pattern, int max_digits) {
  ASSERT_EQ(llama3_family_max_digits(pattern), max_digits);
  // An alternative that never matches keeps the meaning but not the text, so this one is PCRE2.
  Regex reference(std::string(pattern) + "|(?!)", "reference");
  std::mt19937 random(42);
  for (int i = 0; i < 20000; ++i) {
    std::string text = random_text(random);
    auto fast = split_llama3_family(text, max_digits);
    auto slow = reference.find_all(text);
    ASSERT_EQ(fast.size(), slow.size()) << "text " << testing::PrintToString(text);
    for (size_t m = 0; m < fast.size(); ++m) {
      ASSERT_EQ(fast[m].begin, slow[m].begin) << testing::PrintToString(text);
      ASSERT_EQ(fast[m].end, slow[m].end) << testing::PrintToString(text);
    }
  }
}

TEST(PatternFastPath, Llama3MatchesPcre2) { expect_same_as_pcre2(kLlama3, 3); }
TEST(PatternFastPath, QwenMatchesPcre2) { expect_same_as_pcre2(kQwen, 1); }
TEST(PatternFastPath, OtherPatternsUseTheEngine) {
  EXPECT_FALSE(llama3_family_max_digits(R"(\s+)"));
}

}  // namespace
}  // namespace prism::llm
