// A JSON Schema as a grammar an answer is held to byte by byte: what `prism serve` makes of
// response_format json_schema and of a forced tool call's parameters (docs/serving.md).
//
// compile() turns a schema into a small graph of nodes (objects with their properties in the
// schema's order, maps, arrays, strings, numbers, literal texts for const, enum, booleans and
// null, and unions for anyOf, oneOf and type lists); a State follows an answer through it.
// Every text the grammar takes to the end is valid JSON the schema accepts; in return the
// grammar is narrower than the schema where that keeps it simple: an object's properties come
// in the schema's order, each at most once, and an object that declares properties takes no
// others; a bounded number is written without an exponent; a string with a pattern (or a
// format it knows) in printable ASCII (AsciiPattern). Unions are followed as threads, each a
// stack of frames, so that alternatives which start alike (objects told apart by a const
// property) part where their texts do.
//
// A prefix the grammar takes always has a way to its end, so a constrained answer can never
// be left with no token to pick; assertion keywords the grammar cannot hold to (multipleOf,
// not, if, uniqueItems, ...) make compile() throw rather than be ignored.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "prism/llm/ascii_pattern.h"

namespace prism::llm {

class JsonSchema {
 public:
  // Throws prism::Error ("json_schema: ...", naming where in the schema) for a schema that is
  // not one, refers outside itself, or asks for what the grammar cannot hold to.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema);

  static constexpr size_t kMaxNodes = 4096;
  static constexpr size_t kMaxDepth = 64;     // open frames a thread may have
  static constexpr size_t kMaxThreads = 64;   // more are dropped (the first are kept)
  static constexpr size_t kMaxNesting = 128;  // schemas inside schemas
  static constexpr int kMaxIndent = 32;       // spaces or tabs after a line break
  static constexpr uint32_t kMaxNumber = 32;  // bytes of a number

  struct Frame {
    uint32_t node = 0;
    uint8_t phase = 0;
    uint8_t a = 0, b = 0, c = 0;
    uint32_t x = 0, y = 0, z = 0;
    auto operator<=>(const Frame&) const = default;
  };
  struct Thread {
    std::vector<Frame> stack;  // empty: the value has ended
    uint8_t blanks = 0;  // the whitespace just taken: 0: none, 1: a space, 2 + n: a line break and
                         // n spaces or tabs
    auto operator<=>(const Thread&) const = default;
  };
  struct State {
    std::vector<Thread> threads;  // none: the answer has left the grammar
  };

  State start() const;
  // Feeds one byte (false, and `s` unchanged, where every thread refuses it), or bytes in turn
  // (false at the first refused; `s` then undefined: feed a copy).
  bool feed(State& s, char c) const;
  bool feed(State& s, std::string_view bytes) const;
  // feed() of one byte, leaving `s` undefined where it is refused (no copy kept).
  bool advance(State& s, char c) const;
  // Whether the text so far is a whole value of the schema (a number may yet go on).
  bool complete(const State& s) const;
  // Whether some thread is inside a string of any text and length, between characters: any
  // printable text without a quote or backslash, in whole UTF-8 characters, is taken there.
  bool in_plain_string(const State& s) const;

  // A node of the compiled graph.
  struct Node {
    enum class Kind : uint8_t { object, map, array, string, number, literal, one_of } kind;
    struct Property {
      std::string key;  // the name as JSON text, quotes and all
      uint32_t node;
      bool required;
    };
    std::vector<Property> properties;     // object
    std::vector<uint32_t> required_from;  // object: the first required property at or after i
    uint32_t child = 0;                   // map: the values; array: the items
    uint32_t min = 0, max = UINT32_MAX;   // array: items; string: characters
    std::shared_ptr<const AsciiPattern> pattern;  // string: what its text must match
    AsciiPattern::Lengths lengths;                // ... with min and max: how long it may go
    bool integer = false;                         // number
    int64_t low = INT64_MIN, high = INT64_MAX;    // integer: the bounds (inclusive)
    // A number's bounds (not an integer's): a decimal k * 10^e, negative or not, that values
    // must be above and below (or at, where not open).
    struct Bound {
      bool present = false, open = false, negative = false;
      uint64_t k = 0;
      int e = 0;
    };
    Bound below, above;
    std::vector<std::string> texts;      // literal: JSON texts, one of which comes
    std::vector<uint32_t> alternatives;  // one_of
    // The fewest frames a value of this node needs open at once (UINT32_MAX: it has no finite
    // value): a node is entered only where that many still fit.
    uint32_t depth = UINT32_MAX;
  };

 private:
  JsonSchema() = default;
  bool fits(const Thread& t, uint32_t node) const;
  void enter(Thread t, uint32_t node, std::vector<Thread>& out) const;
  void step(Thread t, char c, std::vector<Thread>& out) const;

  std::vector<Node> nodes_;
  uint32_t root_ = 0;
  uint32_t string_ = 0;  // a string of any text: a map's keys
  friend class SchemaCompiler;
};

}  // namespace prism::llm
