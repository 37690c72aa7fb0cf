// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available), shared between copies.
// Hugging Face's tokenizers write their patterns for Oniguruma; PCRE2 accepts the constructs
// they use (`\p{L}`, `(?i:...)`, lookahead such as `\s+(?!\S)`).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::llm {

struct Match {
  size_t begin = 0;
  size_t end = 0;
};

// A non-owning reference to a callable that receives matches (no allocation per call).
class MatchSink {
 public:
  template <typename F>
  MatchSink(const F& f)  // NOLINT: implicit, like a function_ref
      : object_(&f), call_([](const void* o, Match m) { (*static_cast<const F*>(o))(m); }) {}
  void operator()(Match m) const { call_(object_, m); }

 private:
  const void* object_;
  void (*call_)(const void*, Match);
};

class Regex {
 public:
  Regex() = default;
  // `context` names where the pattern comes from, for errors ("tokenizer.json: pre_tokenizer").
  Regex(std::string_view pattern, std::string_view context);

  // Every non-overlapping, non-empty match in `text`, left to right. `text` must be valid UTF-8.
  std::vector<Match> find_all(std::string_view text) const;
  // The same matches, handed to `sink` one at a time as they are found.
  void for_each_match(std::string_view text, MatchSink sink) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  std::string pattern_;
  // Set for the Llama 3 / Qwen pre-tokenizer pattern, matched by pattern_fast_path.h instead.
  int fast_path_max_digits_ = 0;
};

// The pattern that matches `literal` exactly.
std::string regex_escape(std::string_view literal);

}  // namespace prism::llm
