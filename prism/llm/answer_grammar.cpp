#include "prism/llm/answer_grammar.h"

#include <algorithm>

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

GrammarMask::GrammarMask(std::vector<std::string> bytes)
    : bytes_(std::move(bytes)), by_first_(256), plain_(bytes_.size(), 0) {
  for (size_t t = 0; t < bytes_.size(); ++t) {
    const std::string& b = bytes_[t];
    if (b.empty()) continue;
    by_first_[static_cast<unsigned char>(b[0])].push_back(static_cast<int32_t>(t));
    // Plain string text: what a JSON string, between characters, takes and stays in all along
    // (no quote or backslash, which would leave it or escape; the probe checks the rest).
    JsonPrefix probe;
    probe.feed(std::string_view("{\""));
    plain_[t] =
        b.find_first_of("\"\\") == std::string::npos && probe.feed(b) && probe.in_plain_string();
  }
}

size_t GrammarMask::allowed(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
                            std::vector<uint8_t>& allowed) const {
  allowed.assign(bytes_.size(), 0);
  const bool in_string = grammar.in_plain_string(state);
  size_t n = 0;
  for (size_t first = 0; first < by_first_.size(); ++first) {
    const std::vector<int32_t>& tokens = by_first_[first];
    if (tokens.empty()) continue;
    AnswerGrammar::State probe = state;
    if (!grammar.feed(probe, static_cast<char>(first))) continue;  // none of them
    for (const int32_t t : tokens) {
      bool ok = in_string && plain_[static_cast<size_t>(t)];
      if (!ok) {
        AnswerGrammar::State next = state;
        ok = grammar.feed(next, bytes_[static_cast<size_t>(t)]);
      }
      allowed[static_cast<size_t>(t)] = ok;
      n += ok;
    }
  }
  return n;
}

}  // namespace prism::llm
