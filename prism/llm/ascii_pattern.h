// A JSON Schema `pattern` (an ECMA-262 regular expression) as a DFA over the characters a
// string held to it is written in: printable ASCII, less the quote and the backslash (which a
// JSON string would have to escape). Its states are small numbers, so that a grammar's frame
// holds one; a state with no way to a match is never entered, so that no prefix the DFA takes
// is left without a way on.
//
// The expressions taken: characters and escaped ones, `.`, classes (`[a-z_]`, `[^,]`, `\d`,
// `\w`, `\s` and their negations), groups (`(...)`, `(?:...)`, `(?<name>...)`), alternation,
// the quantifiers `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}` (lazy ones match the same strings),
// `^` at the start and `$` at the end. A pattern without `^` or `$` matches anywhere in the
// string, as JSON Schema says. Back references, lookaround, `\b` and Unicode properties are
// refused, and so is a pattern that takes no string of those characters.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace prism::llm {

class AsciiPattern {
 public:
  // Throws prism::Error ("pattern /.../: ...") for an expression it does not take.
  static std::shared_ptr<const AsciiPattern> compile(std::string_view pattern);

  // Bounds on the work a pattern may ask for (a request's): the NFA's states, and the DFA's.
  static constexpr size_t kMaxNfaStates = 1024, kMaxStates = 512;
  static constexpr int32_t kRefused = -1;

  uint32_t start() const { return 0; }
  // The state after `c` (kRefused where c is not written here, or leads to no match).
  int32_t next(uint32_t state, char c) const {
    const auto b = static_cast<unsigned char>(c);
    return b < 128 ? table_[state][b] : kRefused;
  }
  bool accepting(uint32_t state) const { return accepting_[state] != 0; }
  size_t states() const { return table_.size(); }

  // Which lengths the rest of a match may have from each state: bit l of lengths[state] (words
  // of 64 bits, `limit` + 1 bits a state) says some match ends l characters on. Throws
  // prism::Error where the table would be too large.
  struct Lengths {
    size_t limit = 0, words = 0;
    std::vector<uint64_t> bits;
    // Whether some match from `state` ends between `low` and `high` characters on (high
    // clipped to limit).
    bool any(uint32_t state, size_t low, size_t high) const;
  };
  Lengths lengths(size_t limit) const;

 private:
  std::vector<std::array<int32_t, 128>> table_;
  std::vector<uint8_t> accepting_;
  friend class PatternCompiler;
};

}  // namespace prism::llm
