// JsonSchema: the grammar a JSON Schema compiles to takes the texts it should (properties in
// order, optional ones passed over, unions parted by a const, lengths and counts, recursion)
// and refuses the rest; random walks through it never reach a prefix with no way on, and end
// in JSON that parses; schemas it cannot hold to are refused at compile time with one line.
#include "prism/llm/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "prism/core/error.h"
#include "prism/llm/answer_grammar.h"

namespace prism {
namespace {

using llm::JsonSchema;
using Json = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> compile(std::string_view schema) {
  return JsonSchema::compile(Json::parse(schema));
}

// How many bytes of `text` the grammar takes, and whether it is then a whole value.
std::pair<size_t, bool> run(const JsonSchema& g, std::string_view text) {
  JsonSchema::State s = g.start();
  for (size_t i = 0; i < text.size(); ++i) {
    if (!g.feed(s, text[i])) return {i, false};
  }
  return {text.size(), g.complete(s)};
}

// Whether nlohmann's parser reads `text` as JSON (a number past a double's range, which JSON's
// grammar allows and nlohmann does not, counts as read).
bool parses(const std::string& text) {
  try {
    const Json parsed = Json::parse(text);
    return !parsed.is_discarded();
  } catch (const nlohmann::json::out_of_range&) {
    return true;
  } catch (const nlohmann::json::parse_error&) {
    return false;
  }
}

bool takes(const JsonSchema& g, std::string_view text) {
  return run(g, text) == std::pair(text.size(), true);
}

TEST(JsonSchema, ObjectPropertiesInOrder) {
  const auto g = compile(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"], "additionalProperties": false})");
  EXPECT_TRUE(takes(*g, R"({"b": "x"})"));
  EXPECT_TRUE(takes(*g, R"({"a": -12, "b": "", "c": false})"));
  EXPECT_TRUE(takes(*g, " {\n  \"a\":1,\"b\":\"y\"\n}"));
  EXPECT_FALSE(takes(*g, R"({})"));                    // b is required
  EXPECT_FALSE(takes(*g, R"({"b": "x", "a": 1})"));    // out of order
  EXPECT_FALSE(takes(*g, R"({"b": "x", "b": "y"})"));  // twice
  EXPECT_FALSE(takes(*g, R"({"b": "x", "d": 1})"));    // not declared
  EXPECT_FALSE(takes(*g, R"({"a": 1.5, "b": "x"})"));  // not an integer
  EXPECT_FALSE(takes(*g, R"({"b": 1})"));
  EXPECT_EQ(run(*g, R"({"b": "x"} )").first, 10u);  // nothing after the value
  // Whitespace as pretty-printers write it: a space, or a line break and an indent.
  EXPECT_TRUE(takes(*g, "{\n\t\t\"b\": \"x\"\n}"));
  EXPECT_EQ(run(*g, "{\"b\":  ").first, 6u);
  EXPECT_EQ(run(*g, "{\"b\":\r\n").first, 5u);
  EXPECT_EQ(run(*g, "{\"b\": \n").first, 6u);
  EXPECT_EQ(run(*g, "{\n" + std::string(JsonSchema::kMaxIndent + 1, ' ')).first,
            2 + JsonSchema::kMaxIndent);
  // After "b", only "c" may come: a ',' with nothing to follow is refused.
  const auto last = compile(R"({"properties": {"a": {}}, "required": ["a"]})");
  EXPECT_EQ(run(*last, R"({"a": 1,)").first, 7u);
}

TEST(JsonSchema, UnionsPartWhereTheirTextsDo) {
  // pydantic's discriminated union: two objects that start alike.
  const auto g = compile(R"({"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
       "required": ["kind", "lives"]},
      {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
       "required": ["kind"]},
      {"type": "null"}]})");
  EXPECT_TRUE(takes(*g, R"({"kind": "cat", "lives": 9})"));
  EXPECT_TRUE(takes(*g, R"({"kind": "dog"})"));
  EXPECT_TRUE(takes(*g, R"({"kind": "dog", "good": true})"));
  EXPECT_TRUE(takes(*g, "null"));
  EXPECT_FALSE(takes(*g, R"({"kind": "cat"})"));
  EXPECT_FALSE(takes(*g, R"({"kind": "cat", "good": true})"));
  EXPECT_FALSE(takes(*g, R"({"kind": "cow"})"));
  const auto types = compile(R"({"type": ["string", "null", "integer"], "maxLength": 2})");
  EXPECT_TRUE(takes(*types, R"("ab")"));
  EXPECT_TRUE(takes(*types, "null"));
  EXPECT_FALSE(takes(*types, R"("abc")"));
  EXPECT_FALSE(takes(*types, "true"));
}

TEST(JsonSchema, StringLengthsInCharacters) {
  const auto g = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(takes(*g, R"("a")"));
  EXPECT_TRUE(takes(*g, R"("ab")"));
  EXPECT_TRUE(takes(*g, "\"\xC3\xA9t\xC3\xA9\""));  // été: 3 characters, 5 bytes
  EXPECT_TRUE(takes(*g, R"("\ud83d\ude00\n")"));    // a surrogate pair is one
  EXPECT_FALSE(takes(*g, R"("abcd")"));
  EXPECT_FALSE(takes(*g, R"("\ude00a")"));  // a low surrogate alone
  // ... refused at its second digit, so that no prefix taken is a dead end
  EXPECT_EQ(run(*g, R"("\uDE)").first, 4u);
  EXPECT_EQ(run(*g, R"("\ud83d\u0)").first, 9u);  // a high one's pair must be a low one
  EXPECT_FALSE(takes(*g, "\"\xC0\x80\""));        // overlong
  EXPECT_FALSE(takes(*g, "\"a\tb\""));            // a control character
  const auto free = compile(R"({"type": "string"})");
  JsonSchema::State s = free->start();
  EXPECT_FALSE(free->in_plain_string(s));
  ASSERT_TRUE(free->feed(s, "\"ab"));
  EXPECT_TRUE(free->in_plain_string(s));
  ASSERT_TRUE(free->feed(s, "\xE2\x82"));  // inside a character
  EXPECT_FALSE(free->in_plain_string(s));
  const auto bounded = compile(R"({"type": "string", "maxLength": 9})");
  JsonSchema::State t = bounded->start();
  ASSERT_TRUE(bounded->feed(t, "\"ab"));
  EXPECT_FALSE(bounded->in_plain_string(t));  // its characters are counted
}

TEST(JsonSchema, ArraysNumbersAndLiterals) {
  const auto g = compile(R"({"type": "array", "items": {"enum": [1, 10, "x", null]},
                             "minItems": 1, "maxItems": 2})");
  EXPECT_TRUE(takes(*g, "[10]"));
  EXPECT_TRUE(takes(*g, R"([1, "x"])"));
  EXPECT_TRUE(takes(*g, "[null,1]"));
  EXPECT_FALSE(takes(*g, "[]"));
  EXPECT_FALSE(takes(*g, "[1, 1, 1]"));
  EXPECT_FALSE(takes(*g, "[100]"));
  const auto n = compile(R"({"type": "number"})");
  for (const char* ok : {"0", "-0.5", "12e3", "1.25E-7", "-9"}) EXPECT_TRUE(takes(*n, ok)) << ok;
  for (const char* no : {"01", "-", "1.", ".5", "1e", "+1", "1e+"}) EXPECT_FALSE(takes(*n, no));
  const auto i = compile(R"({"type": "integer"})");
  EXPECT_TRUE(takes(*i, "-120"));
  EXPECT_FALSE(takes(*i, "1.0"));
  EXPECT_FALSE(takes(*i, "1e3"));
  // A number is whole as soon as it may end, and more digits may still come.
  JsonSchema::State s = i->start();
  ASSERT_TRUE(i->feed(s, "12"));
  EXPECT_TRUE(i->complete(s));
  EXPECT_TRUE(i->feed(s, '3'));
  // At most kMaxNumber bytes, and none that would leave it unable to end.
  EXPECT_TRUE(takes(*i, std::string(JsonSchema::kMaxNumber, '7')));
  EXPECT_FALSE(takes(*i, std::string(JsonSchema::kMaxNumber + 1, '7')));
  EXPECT_EQ(run(*n, std::string(JsonSchema::kMaxNumber - 1, '7') + ".").first,
            JsonSchema::kMaxNumber - 1);
  const auto b = compile(R"({"type": "boolean"})");
  EXPECT_TRUE(takes(*b, "true"));
  EXPECT_FALSE(takes(*b, "tru"));
  const auto c = compile(R"({"const": {"a": [1, "é"]}})");
  EXPECT_TRUE(takes(*c, "{\"a\":[1,\"\xC3\xA9\"]}"));
  EXPECT_FALSE(takes(*c, "{\"a\": [1, \"\xC3\xA9\"]}"));  // its one text alone
}

TEST(JsonSchema, LargeEnumsAndManyProperties) {
  // Every value of a large enum, and every property of a large object, stays reachable (an
  // enum is one frame over its sorted texts, not a thread a text).
  Json values = Json::array(), properties = Json::object();
  for (int i = 0; i < 1000; ++i) {
    values.push_back(fmt::format("v{}", i));
    properties[fmt::format("p{}", i)] = {{"type", "integer"}};
  }
  values.push_back(1);
  values.push_back(10);
  values.push_back(100);
  const auto e = JsonSchema::compile({{"type", "array"}, {"items", {{"enum", values}}}});
  EXPECT_TRUE(takes(*e, R"(["v0", "v999", "v500", 1, 100, 10])"));
  EXPECT_FALSE(takes(*e, R"(["v1000"])"));
  EXPECT_FALSE(takes(*e, "[1000]"));
  const auto root = JsonSchema::compile({{"enum", values}});
  EXPECT_TRUE(takes(*root, "1"));
  EXPECT_TRUE(takes(*root, "10"));
  EXPECT_FALSE(takes(*root, "1000"));
  const auto o = JsonSchema::compile({{"type", "object"}, {"properties", properties}});
  EXPECT_TRUE(takes(*o, R"({"p999": 1})"));
  EXPECT_TRUE(takes(*o, R"({"p1": 1, "p10": 2, "p100": 3, "p998": 4})"));
  EXPECT_FALSE(takes(*o, R"({"p10": 1, "p1": 2})"));
  EXPECT_FALSE(takes(*o, R"({"p1000": 1})"));
}

TEST(JsonSchema, IntegerBounds) {
  const auto teens = compile(R"({"type": "integer", "minimum": 10, "maximum": 20})");
  for (const char* ok : {"10", "15", "20"}) EXPECT_TRUE(takes(*teens, ok)) << ok;
  EXPECT_FALSE(takes(*teens, "1"));        // a start of 10-19, not a value
  EXPECT_EQ(run(*teens, "21").first, 1u);  // refused at the digit that leaves the range
  EXPECT_EQ(run(*teens, "3").first, 0u);
  EXPECT_EQ(run(*teens, "0").first, 0u);
  EXPECT_EQ(run(*teens, "-").first, 0u);
  const auto natural = compile(R"({"type": "integer", "minimum": 0})");
  EXPECT_TRUE(takes(*natural, "12345678901234"));
  EXPECT_TRUE(takes(*natural, "-0"));  // 0
  EXPECT_EQ(run(*natural, "-1").first, 1u);
  const auto negative = compile(R"({"type": "integer", "minimum": -5, "maximum": -3})");
  for (const char* ok : {"-3", "-4", "-5"}) EXPECT_TRUE(takes(*negative, ok)) << ok;
  EXPECT_EQ(run(*negative, "-2").first, 1u);
  EXPECT_EQ(run(*negative, "-6").first, 1u);
  EXPECT_EQ(run(*negative, "3").first, 0u);
  const auto open =
      compile(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100})");
  EXPECT_TRUE(takes(*open, "99"));
  EXPECT_EQ(run(*open, "100").first, 2u);
  EXPECT_EQ(run(*open, "0").first, 0u);  // a leading 0 is 0 alone
  // Draft 4's boolean exclusiveMinimum, and bounds that are not integers.
  const auto draft4 = compile(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})");
  EXPECT_FALSE(takes(*draft4, "0"));
  EXPECT_TRUE(takes(*draft4, "1"));
  const auto half = compile(R"({"type": ["integer", "null"], "minimum": 1.5, "maximum": 2.5})");
  EXPECT_TRUE(takes(*half, "2"));
  EXPECT_TRUE(takes(*half, "null"));
  EXPECT_FALSE(takes(*half, "1"));
  EXPECT_FALSE(takes(*half, "3"));
  // In a list: the number ends where the list goes on, within its bounds only.
  const auto list = compile(R"({"type": "array", "items": {"type": "integer", "maximum": 7}})");
  EXPECT_TRUE(takes(*list, "[7, -100, 0]"));
  EXPECT_EQ(run(*list, "[7, 8").first, 4u);
}

TEST(JsonSchema, NumberBounds) {
  const auto unit = compile(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "1", "0.5", "0.999", "1.0", "1.000", "-0", "-0.0", "0.0000001"}) {
    EXPECT_TRUE(takes(*unit, ok)) << ok;
  }
  EXPECT_EQ(run(*unit, "1.5").first, 2u);  // refused at the digit that leaves the bounds
  EXPECT_EQ(run(*unit, "2").first, 0u);
  EXPECT_EQ(run(*unit, "-0.1").first, 3u);
  EXPECT_EQ(run(*unit, "10").first, 1u);
  EXPECT_EQ(run(*unit, "1e0").first, 1u);  // no exponent where there are bounds
  const auto open = compile(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})");
  EXPECT_FALSE(takes(*open, "0"));  // a start of 0.x, not a value
  EXPECT_TRUE(takes(*open, "0.01"));
  EXPECT_FALSE(takes(*open, "0.0"));
  EXPECT_EQ(run(*open, "1").first, 0u);
  const auto negative = compile(R"({"type": "number", "minimum": -2.5, "maximum": -1.25})");
  for (const char* ok : {"-2.5", "-1.25", "-1.3", "-2", "-1.2500"}) {
    EXPECT_TRUE(takes(*negative, ok)) << ok;
  }
  EXPECT_FALSE(takes(*negative, "-1.2"));  // a start of -1.25 to -1.29
  EXPECT_EQ(run(*negative, "-1.24").first, 4u);
  EXPECT_EQ(run(*negative, "-2.6").first, 3u);
  EXPECT_EQ(run(*negative, "1").first, 0u);
  // At most 15 significant digits (so that the bounds compare as a validator's doubles do).
  EXPECT_TRUE(takes(*unit, "0.123456789012345"));
  EXPECT_EQ(run(*unit, "0.1234567890123456").first, 17u);
  // A bound far below 1 is reached within the number's bytes; one past them is refused.
  const auto tiny = compile(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1e-20})");
  EXPECT_TRUE(takes(*tiny, "0.00000000000000000001"));
  EXPECT_FALSE(takes(*tiny, "0.0000000000000000001"));
  // In a list, beside an integer's.
  const auto list = compile(R"({"type": "array", "items": {"type": ["number", "null"],
                                "minimum": 0.5, "exclusiveMaximum": 100}})");
  EXPECT_TRUE(takes(*list, "[0.5, 99.99, null, 1]"));
  EXPECT_EQ(run(*list, "[0.4").first, 3u);
  EXPECT_EQ(run(*list, "[100").first, 3u);
}

// Random bounds and random walks through the numbers they allow: each walk's prefix has a way
// on, and each number it ends in is within the bounds as the C library reads it (strtod, the
// doubles a validator compares).
TEST(JsonSchema, NumberBoundsAsDoublesCompare) {
  const double points[] = {-1000, -2.5,   -1,  -0.125, -0.001, 0, 1e-7,  0.001,
                           0.1,   0.3333, 0.5, 1,      2.25,   7, 99.99, 1e6};
  std::mt19937 rng(3);
  const std::string bytes = "-0123456789.";
  for (int round = 0; round < 300; ++round) {
    double lo = points[rng() % std::size(points)], hi = points[rng() % std::size(points)];
    if (lo > hi) std::swap(lo, hi);
    const bool lo_open = rng() % 2, hi_open = rng() % 2;
    if (lo == hi && (lo_open || hi_open)) continue;
    Json schema = {{"type", "number"}};
    schema[lo_open ? "exclusiveMinimum" : "minimum"] = lo;
    schema[hi_open ? "exclusiveMaximum" : "maximum"] = hi;
    const auto g = JsonSchema::compile(schema);
    for (int walk = 0; walk < 40; ++walk) {
      JsonSchema::State st = g->start();
      std::string text;
      for (;;) {
        std::vector<char> next;
        for (const char c : bytes) {
          JsonSchema::State t = st;
          if (g->feed(t, c)) next.push_back(c);
        }
        const bool whole = g->complete(st);
        ASSERT_TRUE(whole || !next.empty()) << schema.dump() << " stranded after " << text;
        if (whole && (next.empty() || rng() % 3 == 0)) break;
        const char c = next[rng() % next.size()];
        ASSERT_TRUE(g->feed(st, c));
        text += c;
      }
      const double v = std::strtod(text.c_str(), nullptr);
      EXPECT_TRUE((lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi))
          << schema.dump() << ": " << text;
    }
  }
}

TEST(JsonSchema, Patterns) {
  const auto g = compile(R"({"type": "object", "properties": {
      "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
      "code": {"pattern": "[A-Z]{3}"}}, "required": ["date", "code"]})");
  EXPECT_TRUE(takes(*g, R"({"date": "2026-12-05", "code": "xxABCyy"})"));
  EXPECT_EQ(run(*g, R"({"date": "2026-1x)").first, 16u);               // refused where the DFA is
  EXPECT_FALSE(takes(*g, R"({"date": "2026-12-05", "code": "AB"})"));  // not closed before a match
  EXPECT_FALSE(takes(*g, R"({"date": "2026-12-5", "code": "ABC"})"));
  // With lengths: a character only where a match of a length within them goes on.
  const auto word = compile(R"({"type": "string", "pattern": "^[a-z]+$", "minLength": 3,
                                "maxLength": 5})");
  EXPECT_TRUE(takes(*word, R"("abc")"));
  EXPECT_TRUE(takes(*word, R"("abcde")"));
  EXPECT_FALSE(takes(*word, R"("ab")"));
  EXPECT_EQ(run(*word, R"("abcdef")").first, 6u);
  const auto pairs = compile(R"({"type": "string", "pattern": "^(ab)+$", "minLength": 3,
                                 "maxLength": 5})");
  EXPECT_TRUE(takes(*pairs, R"("abab")"));
  EXPECT_FALSE(takes(*pairs, R"("ab")"));
  EXPECT_EQ(run(*pairs, R"("ababa)").first, 5u);  // "ababab" would be too long
  const auto somewhere = compile(R"({"type": "string", "pattern": "x", "maxLength": 3})");
  EXPECT_TRUE(takes(*somewhere, R"("abx")"));
  EXPECT_EQ(run(*somewhere, R"("abc)").first, 3u);  // no room left for the x
  // Printable ASCII alone, written as it is: no escapes, no UTF-8.
  const auto any = compile(R"({"type": "string", "pattern": "^.+$"})");
  EXPECT_TRUE(takes(*any, R"("a b")"));
  EXPECT_FALSE(takes(*any, R"("a
b")"));
  EXPECT_FALSE(takes(*any, "\"\xC3\xA9\""));
  JsonSchema::State s = any->start();
  ASSERT_TRUE(any->feed(s, "\"a"));
  EXPECT_FALSE(any->in_plain_string(s));  // each character is the DFA's
}

TEST(JsonSchema, Formats) {
  auto of = [](const char* format) {
    return JsonSchema::compile({{"type", "string"}, {"format", format}});
  };
  const auto date = of("date");
  for (const char* ok : {"\"2024-02-29\"", "\"2000-02-29\"", "\"0001-12-31\"", "\"2026-04-30\""}) {
    EXPECT_TRUE(takes(*date, ok)) << ok;
  }
  for (const char* no : {"\"2023-02-29\"", "\"1900-02-29\"", "\"2026-04-31\"", "\"2026-13-01\"",
                         "\"0000-01-01\"", "\"2026-1-01\""}) {
    EXPECT_FALSE(takes(*date, no)) << no;
  }
  const auto date_time = of("date-time");
  EXPECT_TRUE(takes(*date_time, R"("2026-12-05T21:30:00Z")"));
  EXPECT_TRUE(takes(*date_time, R"("2026-12-05T23:59:59.123456+05:30")"));
  EXPECT_FALSE(takes(*date_time, R"("2026-12-05 21:30:00Z")"));
  EXPECT_FALSE(takes(*date_time, R"("2026-12-05T24:00:00Z")"));
  EXPECT_TRUE(takes(*of("time"), R"("08:15:00-01:00")"));
  EXPECT_TRUE(takes(*of("uuid"), R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(takes(*of("uuid"), R"("123e4567-e89b-12d3-a456-42661417400")"));
  EXPECT_TRUE(takes(*of("ipv4"), R"("255.255.0.9")"));
  EXPECT_FALSE(takes(*of("ipv4"), R"("256.1.1.1")"));
  EXPECT_FALSE(takes(*of("ipv4"), R"("01.1.1.1")"));
  EXPECT_TRUE(takes(*of("email"), R"("first.last+tag@mail.example.com")"));
  EXPECT_FALSE(takes(*of("email"), R"("a@b")"));
  EXPECT_FALSE(takes(*of("email"), R"("@example.com")"));
  // Formats it does not know are annotations; a pattern beside a format is what holds.
  EXPECT_TRUE(takes(*of("hostname"), R"("any text")"));
  EXPECT_TRUE(
      takes(*JsonSchema::compile({{"type", "string"}, {"format", "date"}, {"pattern", "^x$"}}),
            R"("x")"));
}

TEST(JsonSchema, MapsAndAnyValue) {
  const auto m = compile(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(takes(*m, R"({})"));
  EXPECT_TRUE(takes(*m, R"({"x": 1, "y \"q\"": 2})"));
  EXPECT_FALSE(takes(*m, R"({"x": "1"})"));
  const auto any = compile("{}");
  for (const char* ok : {"1", "\"s\"", "[]", "{\"a\": [true, null, {\"b\": -1.5}]}", "false"}) {
    EXPECT_TRUE(takes(*any, ok)) << ok;
  }
  EXPECT_FALSE(takes(*any, "{\"a\" 1}"));
  EXPECT_FALSE(takes(*any, "[1,]"));
  const auto none = compile(R"({"properties": {"a": false, "b": {}}, "items": false,
                                "required": ["b"]})");
  EXPECT_TRUE(takes(*none, R"({"b": 1})"));
  EXPECT_FALSE(takes(*none, R"({"a": 1, "b": 1})"));
  EXPECT_TRUE(takes(*compile(R"({"type": "array", "items": false})"), "[]"));
  EXPECT_FALSE(takes(*compile(R"({"type": "array", "items": false})"), "[1]"));
  const auto closed = compile(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(takes(*closed, "{ }"));
  EXPECT_FALSE(takes(*closed, R"({"a": 1})"));
}

TEST(JsonSchema, ReferencesAndRecursion) {
  const auto g = compile(R"({"$ref": "#/$defs/node", "$defs": {"node": {
      "type": "object", "properties": {"v": {"type": "integer"},
                                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})");
  EXPECT_TRUE(takes(*g, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  EXPECT_FALSE(takes(*g, R"({"v": 1, "kids": [{}]})"));
  // Nesting stops where no more frames fit; what was taken can always be closed.
  std::string deep = "{\"v\": 0";
  size_t taken = 0;
  JsonSchema::State s = g->start();
  for (int level = 0; level < 64; ++level) {
    const std::string more = ", \"kids\": [{\"v\": 0";
    JsonSchema::State t = s;
    if (!g->feed(t, level == 0 ? deep : more)) break;
    s = std::move(t);
    taken = static_cast<size_t>(level) + 1;
  }
  EXPECT_GT(taken, 10u);
  EXPECT_LT(taken, 64u);
  for (size_t level = 1; level < taken; ++level) ASSERT_TRUE(g->feed(s, "}]"));
  ASSERT_TRUE(g->feed(s, '}'));
  EXPECT_TRUE(g->complete(s));
  // allOf of one, with annotations beside, and a reference to the root.
  const auto list = compile(R"({"title": "list", "anyOf": [{"type": "null"},
      {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}]})");
  EXPECT_TRUE(takes(*list, R"({"next": {"next": null}})"));
  EXPECT_TRUE(takes(*compile(R"({"allOf": [{"type": "integer"}], "description": "n"})"), "3"));
}

TEST(JsonSchema, RefusesWhatItCannotHoldTo) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a("})", "at the root: pattern /^a(/: '(' without ')'"},
      {R"({"type": "string", "pattern": "^(ab)+$", "minLength": 5, "maxLength": 5})",
       "no string of the pattern has a length within"},
      {R"({"type": "string", "pattern": 3})", "'pattern' must be a string"},
      {R"({"properties": {"n": {"type": "integer", "multipleOf": 2}}})",
       "at /properties/n: 'multipleOf' is not supported"},
      {R"({"type": "string", "minimum": 0})", "'minimum' needs 'type' 'number' or 'integer'"},
      {R"({"maximum": 3})", "'maximum' needs 'type'"},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-31})",
       "no number within the bounds"},
      {R"({"type": "integer", "minimum": 2, "maximum": 1.5})", "no integer is within"},
      {R"({"type": "strin"})", "unknown type 'strin'"},
      {R"({"$ref": "#/$defs/missing"})", "refers to nothing"},
      {R"({"$ref": "https://example.com/s.json"})", "refer into the schema itself"},
      {R"({"$ref": "#/$defs/a", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}})",
       "refers to itself"},
      {R"({"properties": {"a": {"$ref": "#"}}, "required": ["a"]})", "has no value"},
      {R"({"enum": []})", "non-empty"},
      {R"({"type": "integer", "enum": ["a"]})", "no value of 'enum'"},
      {R"({"required": ["x"]})", "does not declare"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "more than"},
      {R"({"allOf": [{}, {}]})", "more than one"},
      {R"({"type": "object", "anyOf": [{}]})", "beside"},
      {R"(false)", "no value"},
      {R"(3)", "must be an object"},
  };
  for (const auto& [schema, message] : cases) {
    try {
      compile(schema);
      ADD_FAILURE() << schema << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(JsonSchema, BoundsWhatARequestCanAskFor) {
  Json deep = {{"type", "integer"}};
  for (int i = 0; i < 200; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(JsonSchema::compile(deep), Error);  // (the compiler recurses as schemas nest)
  Json many = Json::array();
  for (size_t i = 0; i <= JsonSchema::kMaxThreads; ++i) many.push_back({{"const", i}});
  EXPECT_THROW(JsonSchema::compile({{"anyOf", many}}), Error);
  many.erase(many.begin());
  EXPECT_NO_THROW(JsonSchema::compile({{"anyOf", many}}));
}

// Random walks: at every prefix some byte goes on or the value is whole, and each whole text
// parses as JSON.
TEST(JsonSchema, RandomWalksNeverStrand) {
  const char* schemas[] = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
          "n": {"type": "number"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]},
          "maxItems": 3}, "id": {"type": "string", "pattern": "^[a-f0-9]{2}(-[a-f0-9]{2})?$"},
          "tag": {"type": "string", "pattern": "^(ab|c)+$", "minLength": 2, "maxLength": 5},
          "pet": {"anyOf": [{"const": "cat"}, {"type": "integer"},
          {"type": "null"}]}, "age": {"type": "integer", "minimum": -3, "maximum": 120},
          "p": {"type": "number", "minimum": -0.5, "exclusiveMaximum": 2.25}},
          "required": ["name", "pet", "age"]})",
      R"({"$ref": "#/$defs/t", "$defs": {"t": {"type": "object", "properties": {
          "v": {"type": "boolean"}, "k": {"type": "array", "items": {"$ref": "#/$defs/t"},
          "maxItems": 2}}, "required": ["v"]}}})",
      R"({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 2},
          "minItems": 2, "maxItems": 4})",
  };
  // Bytes the walk picks from: printable ASCII, a newline, a UTF-8 character's; half the time
  // one that closes or separates, where one may come.
  std::string alphabet = "\n\xC3\xA9";
  for (char c = ' '; c <= '~'; ++c) alphabet += c;
  const std::string closing = "\"}],:";
  std::mt19937 rng(7);
  for (const char* text : schemas) {
    const auto g = compile(text);
    for (int walk = 0; walk < 200; ++walk) {
      JsonSchema::State s = g->start();
      std::string out;
      for (int step = 0; step < 400; ++step) {
        std::vector<char> next;
        for (const char c : alphabet) {
          JsonSchema::State t = s;
          if (g->feed(t, c)) next.push_back(c);
        }
        const bool whole = g->complete(s);
        ASSERT_TRUE(whole || !next.empty()) << text << "\nstranded after: " << out;
        // Close quickly: past a few bytes, stop wherever the value is whole.
        if (whole && (next.empty() || rng() % 4 == 0)) break;
        std::vector<char> closers;
        for (const char c : next) {
          if (closing.find(c) != std::string::npos) closers.push_back(c);
        }
        const std::vector<char>& pick = !closers.empty() && rng() % 2 ? closers : next;
        const char c = pick[rng() % pick.size()];
        ASSERT_TRUE(g->feed(s, c));
        out += c;
      }
      if (!g->complete(s)) continue;  // (a long walk; its prefixes were checked)
      EXPECT_TRUE(parses(out)) << out;
    }
  }
}

// In an AnswerGrammar: a forced call's arguments held to the schema of the function named.
TEST(JsonSchema, ArgumentsOfTheFunctionNamed) {
  using Part = llm::AnswerGrammar::Part;
  const llm::AnswerGrammar g({{Part::Kind::literal, "{\"name\": \""},
                              {Part::Kind::one_of, "", {"add", "echo"}},
                              {Part::Kind::literal, "\", \"arguments\": "},
                              {Part::Kind::json_schema,
                               "",
                               {},
                               {compile(R"({"properties": {"a": {"type": "integer"}},
           "required": ["a"]})"),
                                compile(R"({"properties": {"s": {"type": "string"}},
           "required": ["s"]})")}},
                              {Part::Kind::literal, "}"}});
  auto whole = [&](std::string_view text) {
    llm::AnswerGrammar::State s;
    return g.feed(s, text) && g.complete(s);
  };
  EXPECT_TRUE(whole(R"({"name": "add", "arguments": {"a": 2}})"));
  EXPECT_TRUE(whole(R"({"name": "echo", "arguments": {"s": "hi"}})"));
  EXPECT_FALSE(whole(R"({"name": "add", "arguments": {"s": "hi"}})"));
  EXPECT_FALSE(whole(R"({"name": "echo", "arguments": {"a": 2}})"));
  // A schema whose value is a number ends where the next part starts.
  const llm::AnswerGrammar n(
      {{Part::Kind::json_schema, "", {}, {compile(R"({"type": "integer"})")}},
       {Part::Kind::literal, "!"}});
  llm::AnswerGrammar::State s;
  EXPECT_TRUE(n.feed(s, "42!"));
  EXPECT_TRUE(n.complete(s));
}

}  // namespace
}  // namespace prism
