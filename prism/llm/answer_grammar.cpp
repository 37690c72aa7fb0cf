#include "prism/llm/answer_grammar.h"

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
  }
}

AnswerGrammar AnswerGrammar::json_object() { return AnswerGrammar({{Part::Kind::json_object}}); }

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
      next_part();  // the byte is the next part's
      return step(s, c);
    }
  }
  return false;
}

}  // namespace prism::llm
