#include "prism/llm/answer_grammar.h"

#include <algorithm>
#include <limits>

#include "prism/core/error.h"

namespace prism::llm {

AnswerGrammar::AnswerGrammar(std::vector<Part> parts) : parts_(std::move(parts)) {
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Part& p = parts_[i];
    PRISM_CHECK(p.kind != Part::Kind::literal || !p.text.empty(),
                "answer grammar: part {} is an empty literal", i);
    if (p.kind == Part::Kind::one_of) {
      PRISM_CHECK(!p.names.empty() && p.names.size() <= kMaxNames,
                  "answer grammar: part {} names {} choices (1 to {})", i, p.names.size(),
                  kMaxNames);
      for (const std::string& name : p.names) {
        PRISM_CHECK(!name.empty(), "answer grammar: part {} has an empty name", i);
      }
      // What follows says where a name ends.
      PRISM_CHECK(i + 1 < parts_.size(), "answer grammar: part {}, a choice of names, is last", i);
    }
    if (p.kind == Part::Kind::json_schema) {
      PRISM_CHECK(!p.schemas.empty() &&
                      std::find(p.schemas.begin(), p.schemas.end(), nullptr) == p.schemas.end(),
                  "answer grammar: part {} is a JSON Schema without one", i);
      // Several: one for each name of the choice before.
      size_t names = 1;
      for (size_t k = i; k-- > 0;) {
        if (parts_[k].kind == Part::Kind::one_of) {
          names = parts_[k].names.size();
          break;
        }
      }
      PRISM_CHECK(p.schemas.size() == 1 || p.schemas.size() == names,
                  "answer grammar: part {} has {} schemas for a choice of {} names", i,
                  p.schemas.size(), names);
    }
  }
}

AnswerGrammar AnswerGrammar::json_object() { return AnswerGrammar({{Part::Kind::json_object}}); }

const JsonSchema& AnswerGrammar::schema_of(const State& s) const {
  const Part& p = parts_[s.part];
  return *p.schemas[p.schemas.size() == 1 ? 0 : s.chosen];
}

bool AnswerGrammar::complete(const State& s) const {
  if (s.part == parts_.size()) return true;
  const Part& p = parts_[s.part];
  return s.part + 1 == parts_.size() && p.kind == Part::Kind::json_schema && s.started &&
         schema_of(s).complete(s.schema);
}

bool AnswerGrammar::in_plain_string(const State& s) const {
  if (s.part == parts_.size()) return false;
  const Part& p = parts_[s.part];
  if (p.kind == Part::Kind::json_object) return s.json.in_plain_string();
  return p.kind == Part::Kind::json_schema && s.started && schema_of(s).in_plain_string(s.schema);
}

bool AnswerGrammar::feed(State& s, char c) const {
  const State before = s;
  if (step(s, c)) return true;
  s = before;
  return false;
}

bool AnswerGrammar::feed(State& s, std::string_view bytes) const {
  for (const char c : bytes) {
    if (!step(s, c)) return false;
  }
  return true;
}

bool AnswerGrammar::step(State& s, char c) const {
  if (s.part == parts_.size()) return false;
  const Part& p = parts_[s.part];
  auto next_part = [&] {
    ++s.part;
    s.offset = 0;
    s.started = false;
    s.json = {};
    s.schema = {};
  };
  switch (p.kind) {
    case Part::Kind::literal:
      if (p.text[s.offset] != c) return false;
      if (++s.offset == p.text.size()) next_part();
      return true;
    case Part::Kind::json_object:
      if (!s.json.feed(c)) return false;
      if (s.json.complete()) next_part();
      return true;
    case Part::Kind::json_schema: {
      const JsonSchema& schema = schema_of(s);
      if (!s.started) {
        s.schema = schema.start();
        s.started = true;
      }
      // A whole value (a number ends only here): a byte it refuses is the next part's.
      const bool whole = s.part + 1 < parts_.size() && schema.complete(s.schema);
      if (schema.advance(s.schema, c)) return true;
      if (!whole) return false;
      next_part();
      return step(s, c);
    }
    case Part::Kind::one_of: {
      if (!s.started) {
        s.alive = p.names.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << p.names.size()) - 1;
        s.started = true;
      }
      uint64_t extended = 0;
      bool ended = false;  // a name is whole before this byte
      for (size_t i = 0; i < p.names.size(); ++i) {
        if (!(s.alive >> i & 1)) continue;
        const std::string& name = p.names[i];
        if (s.offset == name.size()) {
          ended = true;
        } else if (name[s.offset] == c) {
          extended |= uint64_t{1} << i;
        }
      }
      if (extended != 0) {  // (the longer name, where one is another's start)
        s.alive = extended;
        ++s.offset;
        return true;
      }
      if (!ended) return false;
      for (size_t i = 0; i < p.names.size(); ++i) {
        if ((s.alive >> i & 1) && p.names[i].size() == s.offset)
          s.chosen = static_cast<uint32_t>(i);
      }
      next_part();  // the byte is the next part's
      return step(s, c);
    }
  }
  return false;
}

GrammarMask::GrammarMask(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
  for (size_t t = 0; t < bytes_.size(); ++t) {
    const std::string& b = bytes_[t];
    if (b.empty()) continue;
    // Plain string text: what a JSON string, between characters, takes and stays in all along
    // (no quote or backslash, which would leave it or escape; the probe checks the rest).
    JsonPrefix probe;
    probe.feed(std::string_view("{\""));
    const bool plain =
        b.find_first_of("\"\\") == std::string::npos && probe.feed(b) && probe.in_plain_string();
    (plain ? plain_ : rough_).push_back(static_cast<int32_t>(t));
    sorted_.push_back(static_cast<int32_t>(t));
  }
  // Sorted by their bytes, tokens that share a start are neighbours: a trie, walked in order.
  auto by_bytes = [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  };
  std::sort(sorted_.begin(), sorted_.end(), by_bytes);
  std::sort(rough_.begin(), rough_.end(), by_bytes);
}

GrammarMask GrammarMask::of(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  for (size_t t = 0; t < bytes.size() && t < tokenizer.vocab_size(); ++t) {
    const auto id = static_cast<int32_t>(t);
    try {
      tokenizer.id_to_token(id);  // (a row past the tokenizer's, or a gap in its ids: none)
    } catch (const Error&) {
      continue;
    }
    if (!tokenizer.is_special(id)) bytes[t] = tokenizer.decode(std::span(&id, 1));
  }
  return GrammarMask(std::move(bytes));
}

bool GrammarMask::apply(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
                        std::span<const int64_t> eos, std::span<float> logits,
                        std::vector<uint8_t>& allowed) const {
  size_t n = this->allowed(grammar, state, allowed);
  if (grammar.complete(state)) {
    for (const int64_t id : eos) {
      if (id >= 0 && static_cast<size_t>(id) < allowed.size()) {
        n += !allowed[static_cast<size_t>(id)];
        allowed[static_cast<size_t>(id)] = 1;
      }
    }
  }
  for (size_t t = 0; t < logits.size(); ++t) {
    if (t >= allowed.size() || !allowed[t]) logits[t] = -std::numeric_limits<float>::infinity();
  }
  return n > 0;
}

std::shared_ptr<const AnswerGrammar> json_answer_grammar(std::string_view schema) {
  if (schema.empty()) return std::make_shared<const AnswerGrammar>(AnswerGrammar::json_object());
  const auto parsed = nlohmann::ordered_json::parse(schema, nullptr, false);
  PRISM_CHECK(!parsed.is_discarded(), "llm: the JSON Schema is not valid JSON");
  return std::make_shared<const AnswerGrammar>(std::vector<AnswerGrammar::Part>{
      {AnswerGrammar::Part::Kind::json_schema, "", {}, {JsonSchema::compile(parsed)}}});
}

HeldAnswer::HeldAnswer(std::shared_ptr<const AnswerGrammar> grammar,
                       std::shared_ptr<const GrammarMask> vocabulary, std::vector<int64_t> eos)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), eos_(std::move(eos)) {}

void HeldAnswer::mask(std::span<float> logits) {
  PRISM_CHECK(vocabulary_->apply(*grammar_, state_, eos_, logits, allowed_),
              "llm: the answer's grammar leaves no token of the vocabulary to go on with");
}

void HeldAnswer::take(int32_t token) {
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return;
  PRISM_CHECK(token >= 0 && static_cast<size_t>(token) < vocabulary_->size() &&
                  grammar_->feed(state_, vocabulary_->bytes(token)),
              "llm: token {} leaves the answer's grammar", token);
}

size_t GrammarMask::allowed(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
                            std::vector<uint8_t>& allowed) const {
  allowed.assign(bytes_.size(), 0);
  size_t n = 0;
  if (grammar.in_plain_string(state)) {
    for (const int32_t t : plain_) allowed[static_cast<size_t>(t)] = 1;
    n = plain_.size();
    walk(grammar, state, rough_, 0, allowed, n);
  } else {
    walk(grammar, state, sorted_, 0, allowed, n);
  }
  return n;
}

// The tokens `ids` (sorted by their bytes) share their first `depth` bytes, which the grammar
// took (`state` after them): those that end there are taken; the rest go on in runs that share
// their next byte, each fed once for the run.
void GrammarMask::walk(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
                       std::span<const int32_t> ids, size_t depth, std::vector<uint8_t>& allowed,
                       size_t& n) const {
  size_t i = 0;
  for (; i < ids.size() && bytes_[static_cast<size_t>(ids[i])].size() == depth; ++i) {
    n += !allowed[static_cast<size_t>(ids[i])];
    allowed[static_cast<size_t>(ids[i])] = 1;
  }
  while (i < ids.size()) {
    const char c = bytes_[static_cast<size_t>(ids[i])][depth];
    size_t j = i + 1;
    while (j < ids.size() && bytes_[static_cast<size_t>(ids[j])][depth] == c) ++j;
    AnswerGrammar::State next = state;
    if (grammar.advance(next, c)) walk(grammar, next, ids.subspan(i, j - i), depth + 1, allowed, n);
    i = j;
  }
}

}  // namespace prism::llm
