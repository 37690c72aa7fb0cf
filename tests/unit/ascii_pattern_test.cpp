// AsciiPattern: a JSON Schema pattern's DFA takes the strings the C++ library's ECMAScript
// regex finds a match in (std::regex_search, the semantics JSON Schema gives `pattern`), on
// random strings; no state it enters is a dead end; expressions it does not take are refused
// with one line.
#include "prism/llm/ascii_pattern.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "prism/core/error.h"

namespace prism {
namespace {

using llm::AsciiPattern;

// Whether the DFA takes `text` whole (every character, ending in a match).
bool matches(const AsciiPattern& p, std::string_view text) {
  int32_t s = static_cast<int32_t>(p.start());
  for (const char c : text) {
    s = p.next(static_cast<uint32_t>(s), c);
    if (s == AsciiPattern::kRefused) return false;
  }
  return p.accepting(static_cast<uint32_t>(s));
}

TEST(AsciiPattern, AsTheEcmaScriptRegexSearches) {
  // Each pattern, and where the library's regex lacks a construct, the same without it.
  const std::pair<const char*, const char*> patterns[] = {
      {R"(^\d{4}-\d{2}-\d{2}$)", nullptr},
      {R"(^[A-Z]{2,3}[0-9]*$)", nullptr},
      {"ab|cd", nullptr},
      {"^(foo|bar)+$", nullptr},
      {"^[^,]{1,3}$", nullptr},
      {"x?y*z+", nullptr},
      {R"(^\w+@\w+\.(com|org)$)", nullptr},
      {"^(?:a|b)(?<n>c)$", "^(?:a|b)(c)$"},
      {"^[a-c-]$", nullptr},
      {R"(^\$\d+(\.\d{2})?$)", nullptr},
      {"^.{2}$", nullptr},
      {"[.]", nullptr},
      {"^a{2,}$", nullptr},
      {"^(ab){1,2}$", nullptr},
      {"^a|b$", nullptr},
      {R"(^[\w.-]+$)", nullptr},
      {"c{1}d{0,1}?", nullptr},
      {R"(^\x41\u0042[\d-]$)", nullptr},
      {"^(a*)*b$", nullptr},
      {R"(^[^\s]+\s?$)", nullptr},
      {"(?:)", nullptr},
  };
  const std::string alphabet = "abcdxyzforAZBC019-_@.,$ ";
  std::mt19937 rng(5);
  for (const auto& [pattern, as_reference] : patterns) {
    const auto p = AsciiPattern::compile(pattern);
    const std::regex reference(as_reference ? as_reference : pattern, std::regex::ECMAScript);
    // Random strings, mostly not matches.
    for (int i = 0; i < 2000; ++i) {
      std::string text;
      for (size_t n = rng() % 9; n > 0; --n) text += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(matches(*p, text), std::regex_search(text, reference))
          << "/" << pattern << "/ on \"" << text << "\"";
    }
    // Random walks through the DFA, stopped at random matches: matches for the library too.
    for (int i = 0; i < 300; ++i) {
      std::string text;
      uint32_t s = p->start();
      while (text.size() < 40 && !(p->accepting(s) && rng() % 3 == 0)) {
        std::vector<char> next;
        for (char c = ' '; c <= '~'; ++c) {
          if (p->next(s, c) != AsciiPattern::kRefused) next.push_back(c);
        }
        if (next.empty()) break;
        const char c = next[rng() % next.size()];
        text += c;
        s = static_cast<uint32_t>(p->next(s, c));
      }
      if (!p->accepting(s)) continue;  // (a long walk)
      ASSERT_TRUE(std::regex_search(text, reference))
          << "/" << pattern << "/ on \"" << text << "\"";
    }
  }
}

TEST(AsciiPattern, NoStateIsADeadEnd) {
  // From every state a walk reaches: some character goes on, or it matches.
  for (const char* pattern : {R"(^\d{4}-\d{2}$)", "^(ab|a)c$", "^[a-z]{3}$", "q"}) {
    const auto p = AsciiPattern::compile(pattern);
    std::vector<uint32_t> todo = {p->start()}, seen = {p->start()};
    while (!todo.empty()) {
      const uint32_t s = todo.back();
      todo.pop_back();
      bool on = p->accepting(s);
      for (int c = 0; c < 128; ++c) {
        const int32_t t = p->next(s, static_cast<char>(c));
        if (t == AsciiPattern::kRefused) continue;
        on = true;
        if (std::find(seen.begin(), seen.end(), static_cast<uint32_t>(t)) == seen.end()) {
          seen.push_back(static_cast<uint32_t>(t));
          todo.push_back(static_cast<uint32_t>(t));
        }
      }
      EXPECT_TRUE(on) << pattern << " state " << s;
    }
  }
  // Written in printable ASCII without quotes or backslashes: never a control character.
  const auto p = AsciiPattern::compile("^a.b$");
  EXPECT_TRUE(matches(*p, "a-b"));
  EXPECT_FALSE(matches(*p, "a\tb"));
  EXPECT_FALSE(matches(*p, "a\"b"));
}

TEST(AsciiPattern, RefusesWhatItDoesNotTake) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a", "'(' without ')'"},
      {"a)", "')' without '('"},
      {R"((a)\1)", "back references"},
      {"(?=a)b", "lookaround"},
      {R"(\bx)", R"(\b is not supported)"},
      {R"(\p{L})", "Unicode properties"},
      {"a{3,2}", "m < n"},
      {"*a", "nothing to repeat"},
      {"^a^b", "anchor inside"},
      {"(a$)", "anchor inside"},
      {R"(^["\\]$)", "no string"},
      {"^é$", "no string"},
      {"[a", "'[' without ']'"},
      {"a{1001}", "more than 1000"},
      {"(a{1000}){1000}", "too large"},
  };
  for (const auto& [pattern, message] : cases) {
    try {
      AsciiPattern::compile(pattern);
      ADD_FAILURE() << pattern << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace prism
