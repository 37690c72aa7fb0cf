// Pre-tokenizers of tokenizer.json: they cut normalized text into the pieces the model sees.
#include <algorithm>
#include <cctype>

#include "prism/core/error.h"
#include "prism/llm/regex.h"
#include "prism/llm/tokenizer_pipeline.h"
#include "prism/llm/unicode.h"

namespace prism::llm::pipeline {

using nlohmann::json;

namespace {

// GPT-2's pattern, what ByteLevel uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior parse_behavior(const std::string& name, const JsonPath& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("{}: unknown split behavior \"{}\"", where.str(), name);
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// Cuts `text` at `matches` the way Hugging Face's NormalizedString::split does, and hands the
// non-empty parts to `sink`.
void split_piece(std::string_view text, bool at_input_start, const std::vector<Match>& matches,
                 SplitBehavior behavior, bool invert, PieceSink sink) {
  auto emit = [&](size_t begin, size_t end) {
    if (end > begin) sink(text.substr(begin, end - begin), at_input_start && begin == 0);
  };
  // The common cases, without building the list of parts.
  if (behavior == SplitBehavior::Isolated || behavior == SplitBehavior::Removed) {
    size_t last = 0;
    for (const Match& m : matches) {
      bool gap_removed = behavior == SplitBehavior::Removed && invert;
      bool match_removed = behavior == SplitBehavior::Removed && !invert;
      if (!gap_removed) emit(last, m.begin);
      if (!match_removed) emit(m.begin, m.end);
      last = m.end;
    }
    if (!(behavior == SplitBehavior::Removed && invert)) emit(last, text.size());
    return;
  }
  std::vector<Span> spans;
  size_t last = 0;
  for (const Match& m : matches) {
    if (m.begin > last) spans.push_back({last, m.begin, invert});
    spans.push_back({m.begin, m.end, !invert});
    last = m.end;
  }
  if (last < text.size()) spans.push_back({last, text.size(), invert});

  std::vector<Span> parts;
  bool previous_match = false;
  if (behavior == SplitBehavior::Contiguous) {
    for (const Span& span : spans) {
      if (span.is_match == previous_match && !parts.empty()) {
        parts.back().end = span.end;
      } else {
        parts.push_back(span);
      }
      previous_match = span.is_match;
    }
  } else if (behavior == SplitBehavior::MergedWithPrevious) {
    for (const Span& span : spans) {
      if (span.is_match && !previous_match && !parts.empty()) {
        parts.back().end = span.end;
      } else {
        parts.push_back(span);
      }
      previous_match = span.is_match;
    }
  } else {  // MergedWithNext
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->is_match && !previous_match && !parts.empty()) {
        parts.back().begin = it->begin;
      } else {
        parts.push_back(*it);
      }
      previous_match = it->is_match;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (const Span& part : parts) emit(part.begin, part.end);
}

// Matches of single characters that satisfy `predicate`, one match per character.
template <typename Predicate>
std::vector<Match> character_matches(std::string_view text, Predicate predicate) {
  std::vector<Match> matches;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t begin = pos;
    if (predicate(unicode::next_code_point(text, pos))) matches.push_back({begin, pos});
  }
  return matches;
}

// The common shape of a splitting pre-tokenizer: find matches in each piece, cut.
class Splitter : public PreTokenizer {
 public:
  Splitter(SplitBehavior behavior, bool invert) : behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::string_view text, bool at_input_start, PieceSink sink) const override {
    if (behavior_ != SplitBehavior::Isolated && behavior_ != SplitBehavior::Removed) {
      split_piece(text, at_input_start, find(text), behavior_, invert_, sink);
      return;
    }
    // Isolated and Removed act on each match as it is found: nothing to collect.
    const bool keep_gaps = !(behavior_ == SplitBehavior::Removed && invert_);
    const bool keep_matches = !(behavior_ == SplitBehavior::Removed && !invert_);
    auto emit = [&](size_t begin, size_t end) {
      if (end > begin) sink(text.substr(begin, end - begin), at_input_start && begin == 0);
    };
    size_t last = 0;
    for_each_match(text, [&](Match m) {
      if (keep_gaps) emit(last, m.begin);
      if (keep_matches) emit(m.begin, m.end);
      last = m.end;
    });
    if (keep_gaps) emit(last, text.size());
  }

 protected:
  virtual std::vector<Match> find(std::string_view text) const = 0;
  virtual void for_each_match(std::string_view text, MatchSink sink) const {
    for (const Match& m : find(text)) sink(m);
  }

 private:
  SplitBehavior behavior_;
  bool invert_;
};

class RegexSplit final : public Splitter {
 public:
  RegexSplit(Regex regex, SplitBehavior behavior, bool invert)
      : Splitter(behavior, invert), regex_(std::move(regex)) {}

 protected:
  std::vector<Match> find(std::string_view text) const override { return regex_.find_all(text); }
  void for_each_match(std::string_view text, MatchSink sink) const override {
    regex_.for_each_match(text, sink);
  }

 private:
  Regex regex_;
};

template <typename Predicate>
class CharacterSplit final : public Splitter {
 public:
  CharacterSplit(Predicate predicate, SplitBehavior behavior)
      : Splitter(behavior, false), predicate_(predicate) {}

 protected:
  std::vector<Match> find(std::string_view text) const override {
    return character_matches(text, predicate_);
  }

 private:
  Predicate predicate_;
};

template <typename Predicate>
std::unique_ptr<PreTokenizer> split_on(Predicate predicate, SplitBehavior behavior) {
  return std::make_unique<CharacterSplit<Predicate>>(predicate, behavior);
}

// Punctuation as Hugging Face's Punctuation and BertPreTokenizer see it: Unicode's, and every
// ASCII punctuation character (symbols such as '<', '$' and '+' included).
bool is_punctuation_or_ascii_symbol(char32_t c) {
  return unicode::is_punctuation(c) || (c < 0x80 && std::ispunct(static_cast<int>(c)));
}

// Digits: runs of digits (or each digit alone) become their own pieces.
class Digits final : public Splitter {
 public:
  explicit Digits(bool individual)
      : Splitter(individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false) {}

 protected:
  std::vector<Match> find(std::string_view text) const override {
    return character_matches(text, unicode::is_numeric);
  }
};

// ByteLevel: optional prefix space, optional GPT-2 split, then every byte becomes one printable
// character of GPT-2's alphabet.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const JsonPath& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex)
      split_ = std::make_unique<RegexSplit>(Regex(kGpt2Pattern, where.str()),
                                            SplitBehavior::Isolated, false);
  }
  void pre_tokenize(std::string_view text, bool at_input_start, PieceSink sink) const override {
    std::string prefixed;
    // Nothing is prepended to nothing (a normalizer may have removed every character).
    if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    const auto& alphabet = unicode::byte_level_alphabet();
    std::string mapped;  // reused for every piece of this call
    auto map_and_emit = [&](std::string_view piece, bool piece_at_start) {
      mapped.clear();
      for (char c : piece) mapped += alphabet.byte_to_utf8[static_cast<unsigned char>(c)];
      sink(mapped, piece_at_start);
    };
    if (split_) {
      split_->pre_tokenize(text, at_input_start, map_and_emit);
    } else {
      map_and_emit(text, at_input_start);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<RegexSplit> split_;
};

// Metaspace (SentencePiece style): spaces become `replacement`, a replacement is prepended
// (always, or only at the start of the input), and pieces start at each replacement.
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const json& node, const JsonPath& where) {
    replacement_ = optional_string(node, "replacement", "\u2581", where);
    std::string scheme = optional_string(
        node, "prepend_scheme",
        optional_bool(node, "add_prefix_space", true, where) ? "always" : "never", where);
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      fail("{}: unknown prepend_scheme \"{}\"", (where / "prepend_scheme").str(), scheme);
    }
    prepend_always_ = scheme == "always";
    prepend_first_ = scheme == "first";
    split_ = optional_bool(node, "split", true, where);
    split_regex_ = Regex(regex_escape(replacement_), where.str());
  }
  void pre_tokenize(std::string_view text, bool at_input_start, PieceSink sink) const override {
    std::string replaced;
    replaced.reserve(text.size() + replacement_.size());
    for (char c : text) {
      if (c == ' ') {
        replaced += replacement_;
      } else {
        replaced += c;
      }
    }
    bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
    if (!replaced.empty() && !starts && (prepend_always_ || (prepend_first_ && at_input_start))) {
      replaced.insert(0, replacement_);
    }
    if (split_) {
      split_piece(replaced, at_input_start, split_regex_.find_all(replaced),
                  SplitBehavior::MergedWithNext, false, sink);
    } else {
      sink(replaced, at_input_start);
    }
  }

 private:
  std::string replacement_;
  bool prepend_always_ = false, prepend_first_ = false, split_ = true;
  Regex split_regex_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> stages)
      : stages_(std::move(stages)) {}
  void pre_tokenize(std::string_view text, bool at_input_start, PieceSink sink) const override {
    run(0, text, at_input_start, sink);
  }

 private:
  // Stage `index` cuts `text`; each of its pieces goes through the following stages.
  void run(size_t index, std::string_view text, bool at_input_start, PieceSink sink) const {
    if (index == stages_.size()) {
      sink(text, at_input_start);
      return;
    }
    stages_[index]->pre_tokenize(text, at_input_start, [&](std::string_view piece, bool start) {
      run(index + 1, piece, start, sink);
    });
  }

  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& node, const JsonPath& where) {
  if (node.is_null()) return nullptr;
  std::string type = require_string(node, "type", where);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(optional_bool(node, "add_prefix_space", true, where),
                                       optional_bool(node, "use_regex", true, where), where);
  }
  if (type == "Split") {
    return std::make_unique<RegexSplit>(
        pattern_regex(node, where),
        parse_behavior(require_string(node, "behavior", where), where / "behavior"),
        optional_bool(node, "invert", false, where));
  }
  if (type == "Digits") {
    return std::make_unique<Digits>(optional_bool(node, "individual_digits", false, where));
  }
  if (type == "Metaspace") return std::make_unique<Metaspace>(node, where);
  if (type == "Whitespace") {
    // Hugging Face matches \w+|[^\w\s]+ with Rust's regex crate, whose \w is Unicode's word
    // class (alphabetic characters, marks, decimal digits, connector punctuation and the
    // joiners U+200C/U+200D) where PCRE2's is letters, numbers and '_': spelt out here.
    return std::make_unique<RegexSplit>(
        Regex(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+|)"
              R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\p{White_Space}]+)",
              where.str()),
        SplitBehavior::Removed, true);
  }
  if (type == "WhitespaceSplit") return split_on(unicode::is_whitespace, SplitBehavior::Removed);
  if (type == "Punctuation") {
    return split_on(
        is_punctuation_or_ascii_symbol,
        parse_behavior(optional_string(node, "behavior", "Isolated", where), where / "behavior"));
  }
  if (type == "CharDelimiterSplit") {
    std::string delimiter = require_string(node, "delimiter", where);
    size_t pos = 0;
    char32_t c = unicode::next_code_point(delimiter, pos);
    return split_on([c](char32_t x) { return x == c; }, SplitBehavior::Removed);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    stages.push_back(split_on(unicode::is_whitespace, SplitBehavior::Removed));
    stages.push_back(split_on(is_punctuation_or_ascii_symbol, SplitBehavior::Isolated));
    return std::make_unique<Sequence>(std::move(stages));
  }
  if (type == "Sequence") {
    const json& list = require(node, "pretokenizers", where);
    if (!list.is_array()) fail("{}: expected a list", (where / "pretokenizers").str());
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto stage = make_pre_tokenizer(list[i], (where / "pretokenizers")[i])) {
        stages.push_back(std::move(stage));
      }
    }
    return std::make_unique<Sequence>(std::move(stages));
  }
  fail("{}: unsupported pre_tokenizer type \"{}\"", where.str(), type);
}

}  // namespace prism::llm::pipeline
