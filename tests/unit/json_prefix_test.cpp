// JsonPrefix: JSON object texts byte by byte, against RFC 8259's grammar on hand-picked cases
// and against nlohmann::json's parser on random objects and random mutations of them.
#include "prism/llm/json_prefix.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace prism {
namespace {

using llm::JsonPrefix;

// How many bytes of `text` JsonPrefix takes, and whether the object is then complete.
std::pair<size_t, bool> run(std::string_view text) {
  JsonPrefix p;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!p.feed(text[i])) return {i, false};
  }
  return {text.size(), p.complete()};
}

TEST(JsonPrefix, ValidObjects) {
  for (const char* text :
       {"{}", "{\"a\":1}",
        " {\n\t\"a\" : [1, -2.5e+3, 0, 0.1, 1E-2, true, false, null, {}],\r\n"
        "  \"b\": {\"c\": \"x\\n\\u00e9\\\"\\\\\\/\"}, \"\": []}",
        "{\"caf\xc3\xa9\": \"\xe6\x97\xa5\xe6\x9c\xac\"}", "{\"a\":[[],[{}]]}"}) {
    EXPECT_EQ(run(text), std::pair(std::string_view(text).size(), true)) << text;
  }
  // A prefix is taken whole and is not complete.
  const std::string_view prefix = "{\"a\": [1, {\"b\": tr";
  EXPECT_EQ(run(prefix), std::pair(prefix.size(), false));
}

TEST(JsonPrefix, RefusesTheFirstWrongByte) {
  const std::pair<const char*, size_t> cases[] = {
      {"[1]", 0},
      {"\"s\"", 0},
      {"{\"a\" 1}", 5},
      {"{\"a\":01}", 6},
      {"{\"a\":1,}", 7},
      {"{,}", 1},
      {"{\"a\":tru e}", 8},
      {"{\"a\":\"\x01\"}", 6},
      {"{\"a\":\"\\q\"}", 7},
      {"{\"a\":1}}", 7},
      {"{\"a\":-}", 6},
      {"{\"a\":1.}", 7},
      {"{\"a\":1e}", 7},
      {"{\"a\":[1,]}", 8},
      {"{} ", 2},
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{a:1}", 1},
      {"{\"a\":[}", 6},
      {"{\"a\":+1}", 5},
      {"{\"a\":.5}", 5},
  };
  for (const auto& [text, at] : cases) EXPECT_EQ(run(text).first, at) << text;
}

TEST(JsonPrefix, StringsInValidUtf8) {
  EXPECT_EQ(run("{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\xa6\x99\":1}").second, true);
  for (const char* bad : {"\x80", "\xc0\xaf", "\xc3", "\xe0\x80\x80", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3\x28"}) {
    const std::string text = std::string("{\"") + bad + "\":1}";
    EXPECT_FALSE(run(text).second)
        << nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

TEST(JsonPrefix, SurrogateEscapesInPairs) {
  EXPECT_TRUE(run("{\"a\":\"\\ud83e\\udd99\"}").second);
  for (const char* bad : {"{\"a\":\"\\ud83e\"}", "{\"a\":\"\\udd99\"}", "{\"a\":\"\\ud83e\\n\"}",
                          "{\"a\":\"\\ud83ex\"}", "{\"a\":\"\\ud83e\\ud83e\"}"}) {
    EXPECT_FALSE(run(bad).second) << bad;
    EXPECT_FALSE(nlohmann::json::accept(bad)) << bad;  // as nlohmann's parser has it
  }
  // Refused as soon as the digits say so, so that no prefix taken is a dead end: a low
  // surrogate alone at its second digit, a high one's pair not a low one at its first.
  EXPECT_EQ(run("{\"a\":\"\\uDd").first, 9u);
  EXPECT_EQ(run("{\"a\":\"\\ud83e\\u0").first, 14u);
}

TEST(JsonPrefix, BoundsNesting) {
  // The object and 63 arrays in it: the deepest allowed; one more is refused.
  const std::string deep = "{\"a\":" + std::string(JsonPrefix::kMaxDepth - 1, '[');
  EXPECT_EQ(run(deep + "[").first, deep.size());
  const std::string closed = deep + std::string(JsonPrefix::kMaxDepth - 1, ']') + "}";
  EXPECT_EQ(run(closed), std::pair(closed.size(), true));
}

TEST(JsonPrefix, BoundsWhitespaceOutsideStrings) {
  const std::string blanks(JsonPrefix::kMaxBlanks, ' ');
  EXPECT_EQ(run("{" + blanks + "}"), std::pair(blanks.size() + 2, true));
  EXPECT_EQ(run("{" + blanks + " }").first, blanks.size() + 1);
  const std::string long_string = "{\"a\": \"" + std::string(100, ' ') + "\"}";
  EXPECT_EQ(run(long_string), std::pair(long_string.size(), true));
}

// A random JSON value, `depth` levels at most, written with random whitespace.
std::string random_value(std::mt19937& rng, int depth, bool object = false) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto ws = [&] { return std::string(pick(3), " \n\t"[pick(3)]); };
  const int kind = object ? 0 : pick(depth > 0 ? 7 : 5);
  switch (kind) {
    case 0:
    case 1: {
      const bool obj = kind == 0;
      std::string s = obj ? "{" : "[";
      const int n = depth > 0 ? pick(4) : 0;
      for (int i = 0; i < n; ++i) {
        if (i) s += ",";
        s += ws();
        if (obj) {
          std::string key;
          for (int k = pick(4); k > 0; --k) {
            key += std::array<const char*, 6>{"a", "b", "\"", "\\", "\n", "\xc3\xa9"}[pick(6)];
          }
          s += nlohmann::json(key).dump() + ws() + ":";
        }
        s += ws() + random_value(rng, depth - 1) + ws();
      }
      return s + (obj ? "}" : "]");
    }
    case 2:
      return nlohmann::json(static_cast<double>(pick(20000)) / 7 - 1000).dump();
    case 3:
      return std::to_string(pick(2000) - 1000);
    case 4:
      return std::array<const char*, 3>{"true", "false", "null"}[pick(3)];
    default:
      return nlohmann::json(std::string(pick(5), "x y\t\"/"[pick(6)])).dump();
  }
}

TEST(JsonPrefix, AgreesWithNlohmannOnRandomTexts) {
  std::mt19937 rng(11);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = random_value(rng, 3, true);
    // Half of them mutated: a byte deleted, replaced or inserted.
    if (i % 2) {
      const size_t at = rng() % text.size();
      const char c = "{}[],:\"\\0123456789.eE+-tfnul x"[rng() % 30];
      switch (rng() % 3) {
        case 0:
          text.erase(at, 1);
          break;
        case 1:
          text[at] = c;
          break;
        default:
          text.insert(at, 1, c);
      }
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\t')) {
      text.pop_back();  // (JsonPrefix takes nothing after the object)
    }
    bool want = false;
    try {
      want = nlohmann::json::parse(text).is_object();
    } catch (const nlohmann::json::parse_error&) {
    } catch (const nlohmann::json::out_of_range&) {
      continue;  // a number past a double's range: JSON's grammar allows it, nlohmann does not
    }
    const auto [taken, complete] = run(text);
    EXPECT_EQ(taken == text.size() && complete, want)
        << nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (want ? valid : invalid) += 1;
  }
  EXPECT_GT(valid, 1000);  // both kinds well represented
  EXPECT_GT(invalid, 500);
}

}  // namespace
}  // namespace prism
