// A grammar an answer is held to, byte by byte: parts in order, each a literal text, one of a
// few names, a JSON object (JsonPrefix) or a value of a JSON Schema (JsonSchema). `prism serve`
// builds one for response_format json_object or json_schema (the JSON alone) and for a tool
// call it must make (the model's call format around the function's name and its arguments),
// and before each token masks the tokens whose bytes the grammar refuses (docs/serving.md).
//
// The grammar is immutable and shared; what an answer has matched so far is a State, small and
// copied freely (a mask copies it for every token of the vocabulary).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/llm/json_prefix.h"
#include "prism/llm/json_schema.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {

class AnswerGrammar {
 public:
  struct Part {
    enum class Kind { literal, one_of, json_object, json_schema } kind;
    std::string text;                // literal
    std::vector<std::string> names;  // one_of: at most kMaxNames, none empty
    // json_schema: one schema, or one for each name of the choice before it (the name chosen
    // picks the schema: a function's arguments).
    std::vector<std::shared_ptr<const JsonSchema>> schemas{};
  };
  static constexpr size_t kMaxNames = 64;

  explicit AnswerGrammar(std::vector<Part> parts);  // throws for a bad part
  static AnswerGrammar json_object();

  struct State {
    size_t part = 0;
    size_t offset = 0;     // bytes of the part matched (a literal's, or a name's)
    uint64_t alive = 0;    // one_of: the names the bytes so far begin (bit i: names[i])
    bool started = false;  // one_of: `alive` is set; json_schema: `schema` is
    uint32_t chosen = 0;   // the name the last choice took
    JsonPrefix json;
    JsonSchema::State schema;
  };

  // Feeds one byte (false, and `s` unchanged, where the grammar refuses it), or bytes in turn
  // (false at the first refused; `s` then undefined: feed a copy).
  bool feed(State& s, char c) const;
  bool feed(State& s, std::string_view bytes) const;
  // feed() of one byte, leaving `s` undefined where it is refused (no copy kept).
  bool advance(State& s, char c) const { return step(s, c); }
  // Whether the answer so far matches the whole grammar (where it ends in a JSON Schema's
  // number, more digits may yet come).
  bool complete(const State& s) const;
  // Whether the answer is inside a JSON string of any text, between characters (JsonPrefix,
  // JsonSchema).
  bool in_plain_string(const State& s) const;

 private:
  bool step(State& s, char c) const;
  const JsonSchema& schema_of(const State& s) const;

  std::vector<Part> parts_;
};

// Which tokens of a vocabulary a grammar takes next: a mask over the logits before a token is
// picked. The tokens are kept sorted by their bytes and walked as a trie: a start they share is
// fed to the grammar once, and a byte it refuses rules out every token that starts with it.
// Tokens that are plain string text (printable, no quote or backslash, whole UTF-8
// characters), which a JSON string takes whole, are marked at once inside one; the walk then
// covers the others alone. Most of a large vocabulary is settled by those two cases at most
// steps.
class GrammarMask {
 public:
  // bytes[t]: token t's bytes alone; empty for a token no answer may hold (a special one).
  explicit GrammarMask(std::vector<std::string> bytes);
  // A model's vocabulary of `vocab_size` tokens (its rows, which may be more than the
  // tokenizer's) as `tokenizer` spells them: special tokens and rows without a token are no
  // answer's text.
  static GrammarMask of(const Tokenizer& tokenizer, int64_t vocab_size);
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  size_t size() const { return bytes_.size(); }
  // allowed[t] = 1 where `grammar` takes token t after `state`, else 0 (one per token);
  // returns how many it takes. End tokens are the caller's (complete() says when).
  size_t allowed(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
                 std::vector<uint8_t>& allowed) const;
  // Sets to -infinity the logits of the tokens `grammar` refuses after `state`, and of the end
  // tokens `eos` until it is complete (then they may come); `allowed` is scratch. False where
  // no token is left.
  bool apply(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
             std::span<const int64_t> eos, std::span<float> logits,
             std::vector<uint8_t>& allowed) const;

 private:
  void walk(const AnswerGrammar& grammar, const AnswerGrammar::State& state,
            std::span<const int32_t> ids, size_t depth, std::vector<uint8_t>& allowed,
            size_t& n) const;

  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;  // the tokens with bytes, sorted by them
  std::vector<int32_t> plain_;   // those that are plain string text
  std::vector<int32_t> rough_;   // the others, sorted by their bytes
};

// The grammar of an answer held to JSON: a value of the JSON Schema whose text is `schema`, or
// any JSON object where `schema` is empty. Throws prism::Error, one line, for a schema that is
// not JSON or that JsonSchema refuses.
std::shared_ptr<const AnswerGrammar> json_answer_grammar(std::string_view schema);

// An answer held to a grammar as it is generated (`prism llm --json-schema`, the Python
// package's json_schema): mask() the logits before each token is picked, take() the token
// picked.
class HeldAnswer {
 public:
  HeldAnswer(std::shared_ptr<const AnswerGrammar> grammar,
             std::shared_ptr<const GrammarMask> vocabulary, std::vector<int64_t> eos);
  // Throws prism::Error where the grammar leaves no token (a prefix the model cannot finish
  // within its vocabulary).
  void mask(std::span<float> logits);
  // A token mask() left (an end token once the grammar is complete).
  void take(int32_t token);
  bool complete() const { return grammar_->complete(state_); }

 private:
  std::shared_ptr<const AnswerGrammar> grammar_;
  std::shared_ptr<const GrammarMask> vocabulary_;
  std::vector<int64_t> eos_;
  AnswerGrammar::State state_;
  std::vector<uint8_t> allowed_;
};

}  // namespace prism::llm
