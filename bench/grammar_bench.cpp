// What holding an answer to a grammar costs a token (`prism serve`'s response_format
// json_object and forced tool calls): llm::GrammarMask's mask over a whole vocabulary, made
// once per generated token, against feeding every token's bytes to the grammar (what the mask
// would be without its index), along a JSON answer and a forced Hermes-style call tokenized by
// the Llama 3.1 tokenizer (128K tokens; --tokenizer=DIR for another). Printed: milliseconds a
// token for each (medians over the answer's tokens) and their ratio, measured in this run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "prism/backends/registry.h"
#include "prism/llm/answer_grammar.h"
#include "prism/llm/tokenizer.h"

namespace prism::bench {
namespace {

using Clock = std::chrono::steady_clock;
using llm::AnswerGrammar;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void grammar_bench() {
  const std::string dir = option("tokenizer", std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1");
  const llm::Tokenizer tokenizer = llm::Tokenizer::load(dir);
  // The tokens' bytes as the server takes them (special tokens hold no answer's text).
  const auto t0 = Clock::now();
  const llm::GrammarMask mask = llm::GrammarMask::of(tokenizer, tokenizer.vocab_size());
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("%s; %zu tokens (%s); the mask made (tokens decoded and indexed) in %.0f ms\n",
              get_platform("cpu").devices().at(0).name.c_str(), mask.size(), dir.c_str(), build_ms);
  std::printf("%-15s %7s %12s %14s %7s\n", "answer", "tokens", "mask, ms", "every token, ms",
              "ratio");

  using Part = AnswerGrammar::Part;
  const AnswerGrammar json = AnswerGrammar::json_object();
  // The arguments' schema, as a client would send it.
  const auto schema = llm::JsonSchema::compile(nlohmann::ordered_json::parse(R"({
      "type": "object", "additionalProperties": false,
      "properties": {"city": {"type": "string"}, "days": {"type": "array",
        "items": {"type": "integer"}}, "units": {"enum": ["metric", "imperial"]},
        "note": {"type": "string"}, "ok": {"type": "boolean"}},
      "required": ["city", "days", "units", "note", "ok"]})"));
  const auto any_object = llm::JsonSchema::compile({{"type", "object"}});
  const AnswerGrammar held({{Part::Kind::json_schema, "", {}, {schema}}});
  const AnswerGrammar any({{Part::Kind::json_schema, "", {}, {any_object}}});
  const AnswerGrammar call({{Part::Kind::literal, "<tool_call>\n{\"name\": \""},
                            {Part::Kind::one_of, "", {"get_weather", "get_time", "search"}},
                            {Part::Kind::literal, "\", \"arguments\": "},
                            {Part::Kind::json_schema, "", {}, {schema, any_object, any_object}},
                            {Part::Kind::literal, "}\n</tool_call>"}});
  const std::string args =
      "{\"city\": \"Paris\", \"days\": [1, 2, 3], \"units\": \"metric\", \"note\": \"Bring an "
      "umbrella; it may rain in the afternoon, and the evening will be cool.\", \"ok\": true}";
  const std::pair<const char*, const AnswerGrammar*> runs[] = {{"json_object", &json},
                                                               {"schema: object", &any},
                                                               {"json_schema", &held},
                                                               {"tool call", &call}};
  for (const auto& [name, grammar] : runs) {
    const std::string text = grammar != &call ? args
                                              : "<tool_call>\n{\"name\": \"get_weather\", "
                                                "\"arguments\": " +
                                                    args + "}\n</tool_call>";
    const std::vector<int32_t> ids = tokenizer.encode(text);
    std::vector<double> masked, every;
    std::vector<uint8_t> allowed;
    AnswerGrammar::State state;
    for (const int32_t id : ids) {
      auto a = Clock::now();
      const size_t n = mask.allowed(*grammar, state, allowed);
      masked.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
      a = Clock::now();
      size_t m = 0;
      for (size_t t = 0; t < mask.size(); ++t) {
        const std::string& b = mask.bytes(static_cast<int32_t>(t));
        AnswerGrammar::State next = state;
        m += !b.empty() && grammar->feed(next, b);
      }
      every.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
      PRISM_CHECK(n == m && allowed[static_cast<size_t>(id)],
                  "grammar: the mask and feeding every token disagree");
      PRISM_CHECK(grammar->feed(state, mask.bytes(id)), "grammar: the answer leaves its grammar");
    }
    PRISM_CHECK(grammar->complete(state), "grammar: the answer does not complete its grammar");
    const double mm = median_of(masked), em = median_of(every);
    std::printf("%-15s %7zu %12.2f %14.2f %6.1fx\n", name, ids.size(), mm, em, em / mm);
    std::fflush(stdout);
  }
}

const Register kGrammar{"grammar",
                        "the grammar mask of JSON answers and forced tool calls, against feeding "
                        "every token",
                        grammar_bench};

}  // namespace
}  // namespace prism::bench
