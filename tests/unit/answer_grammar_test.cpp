// AnswerGrammar: the grammar `prism serve` holds a forced tool call to (Hermes's format around
// one of the tools' names and a JSON object of arguments) takes the calls the tool-call reader
// reads back, and refuses other names, other formats and anything after the call; GrammarMask
// gives what feeding every token would.
#include "prism/llm/answer_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "prism/core/error.h"
#include "prism/serve/tool_calls.h"

namespace prism {
namespace {

using llm::AnswerGrammar;
using Part = AnswerGrammar::Part;

AnswerGrammar hermes(std::vector<std::string> names) {
  return AnswerGrammar({{Part::Kind::literal, "<tool_call>\n{\"name\": \""},
                        {Part::Kind::one_of, "", std::move(names)},
                        {Part::Kind::literal, "\", \"arguments\": "},
                        {Part::Kind::json_object},
                        {Part::Kind::literal, "}\n</tool_call>"}});
}

// How many bytes of `text` the grammar takes, and whether it is then complete.
std::pair<size_t, bool> run(const AnswerGrammar& g, std::string_view text) {
  AnswerGrammar::State s;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!g.feed(s, text[i])) return {i, false};
  }
  return {text.size(), g.complete(s)};
}

TEST(AnswerGrammar, AForcedCallReadsBackAsThatCall) {
  const AnswerGrammar g = hermes({"get", "get_weather", "time"});
  for (const char* name : {"get", "get_weather", "time"}) {
    const std::string call = std::string("<tool_call>\n{\"name\": \"") + name +
                             "\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
                             "</tool_call>";
    EXPECT_EQ(run(g, call), std::pair(call.size(), true)) << call;
    const serve::ToolCallAnswer answer =
        serve::parse_tool_calls(serve::ToolCallFormat::hermes, call);
    ASSERT_EQ(answer.calls.size(), 1u);
    EXPECT_EQ(answer.calls[0].name, name);
    EXPECT_EQ(answer.calls[0].arguments, R"({"city":"Paris","days":[1,2]})");
  }
}

TEST(AnswerGrammar, RefusesWhatIsNotTheCall) {
  const AnswerGrammar g = hermes({"get", "get_weather"});
  const std::string head = "<tool_call>\n{\"name\": \"";
  EXPECT_EQ(run(g, "Sure: <tool_call>").first, 0u);            // text before it
  EXPECT_EQ(run(g, head + "gex").first, head.size() + 2);      // another name
  EXPECT_EQ(run(g, head + "get_w\"").first, head.size() + 5);  // a name's start only
  const std::string before = head + "get\", \"arguments\": ";
  EXPECT_EQ(run(g, before + "[").first, before.size());  // arguments not an object
  const std::string whole = head + "get\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(run(g, whole + "\n").first, whole.size());  // nothing after it
  // Bytes a token at a time: one token may span parts.
  AnswerGrammar::State s;
  EXPECT_TRUE(g.feed(s, head + "get_weather\", \"arg"));
  EXPECT_TRUE(g.feed(s, "uments\": {\"a\": 1}}\n</tool"));
  EXPECT_FALSE(g.complete(s));
  EXPECT_TRUE(g.feed(s, "_call>"));
  EXPECT_TRUE(g.complete(s));
}

TEST(AnswerGrammar, JsonObjectAlone) {
  const AnswerGrammar g = AnswerGrammar::json_object();
  EXPECT_EQ(run(g, " {\"a\": [true]}"), std::pair(size_t{14}, true));
  EXPECT_EQ(run(g, "[1]").first, 0u);
}

// The mask's shortcuts (a first byte refused, plain string text) give what feeding every
// token does, at states along random JSON answers and a forced call, over a vocabulary of
// random pieces (with quotes, escapes, blanks, brackets and parts of UTF-8 characters).
TEST(GrammarMask, AsFeedingEveryToken) {
  std::mt19937 rng(5);
  const std::vector<std::string> atoms = {
      "\"",   "\\",           "{",    "}",           "[",   "]",     ":",     ",",    " ", "\n",
      "a",    "Paris",        "1",    "-",           ".",   "e",     "true",  "null", "u", "\xc3",
      "\xa9", "\xe2\x82\xac", "\x01", "<tool_call>", "get", "_time", "\"name"};
  std::vector<std::string> vocab(3000);
  for (size_t t = 1; t < vocab.size(); ++t) {  // token 0 stays empty: a special one
    for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n)
      vocab[t] += atoms[rng() % atoms.size()];
  }
  const llm::GrammarMask mask(vocab);
  const AnswerGrammar json = AnswerGrammar::json_object(), call = hermes({"get", "get_time"});
  for (const AnswerGrammar* g : {&json, &call}) {
    for (int answer = 0; answer < 20; ++answer) {
      AnswerGrammar::State s;
      std::vector<uint8_t> allowed;
      for (int step = 0; step < 30 && !g->complete(s); ++step) {
        const size_t n = mask.allowed(*g, s, allowed);
        std::vector<int32_t> ok;
        for (size_t t = 0; t < vocab.size(); ++t) {
          AnswerGrammar::State next = s;
          const bool want = !vocab[t].empty() && g->feed(next, vocab[t]);
          ASSERT_EQ(allowed[t], want) << "token " << t << " at step " << step;
          if (want) ok.push_back(static_cast<int32_t>(t));
        }
        ASSERT_EQ(n, ok.size());
        if (ok.empty()) break;
        ASSERT_TRUE(g->feed(s, vocab[ok[rng() % ok.size()]]));
      }
    }
  }
}

// A token that leaves a string and comes back into another is not plain string text: in a
// value's string, '":"' would close it and then meet a ':' (found by prism-bench grammar on
// the Llama 3.1 vocabulary).
TEST(GrammarMask, ATokenThatLeavesTheStringIsFed) {
  const std::vector<std::string> vocab = {"x", "\":\"", "\"}", "y\"", "\\n"};
  const llm::GrammarMask mask(vocab);
  const AnswerGrammar g = AnswerGrammar::json_object();
  for (const char* before : {"{\"a\": \"v", "{\"k"}) {
    AnswerGrammar::State s;
    ASSERT_TRUE(g.feed(s, before));
    std::vector<uint8_t> allowed;
    mask.allowed(g, s, allowed);
    for (size_t t = 0; t < vocab.size(); ++t) {
      AnswerGrammar::State next = s;
      EXPECT_EQ(allowed[t] != 0, g.feed(next, vocab[t])) << before << " + " << vocab[t];
    }
  }
}

TEST(AnswerGrammar, BadPartsAreRefused) {
  EXPECT_THROW(AnswerGrammar({{Part::Kind::literal, ""}}), Error);
  EXPECT_THROW(AnswerGrammar({{Part::Kind::one_of, "", {}}, {Part::Kind::literal, "x"}}), Error);
  EXPECT_THROW(AnswerGrammar({{Part::Kind::one_of, "", {"a", ""}}, {Part::Kind::literal, "x"}}),
               Error);
  EXPECT_THROW(AnswerGrammar({{Part::Kind::one_of, "", {"a"}}}), Error);  // nothing after it
  EXPECT_THROW(AnswerGrammar({{Part::Kind::one_of, "", std::vector<std::string>(65, "n")},
                              {Part::Kind::literal, "x"}}),
               Error);
}

}  // namespace
}  // namespace prism
