// Templates rendered by Jinja2 in the environment transformers renders chat templates in, written
// by tools/make_tokenizer_fixtures.py from tools/jinja_fixture_templates.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/llm/jinja/template.h"
#include "prism/llm/json_file.h"

namespace prism::llm::jinja {
namespace {

TEST(JinjaReference, RendersLikeHuggingFaceJinja) {
  std::string path = std::string(PRISM_TEST_DATA) + "/tokenizers/jinja_cases.json";
  std::string text = read_text_file(path);
  parse_json(text, path);  // errors with line and column
  auto fixture = nlohmann::ordered_json::parse(text);
  int cases = 0;
  for (const auto& c : fixture["cases"]) {
    std::string name = c["name"];
    Template t(c["template"].get<std::string>(), name);
    Value context = Value::from_json(c["context"]);
    EXPECT_EQ(t.render(context.as_dict()), c["rendered"].get<std::string>()) << name;
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

}  // namespace
}  // namespace prism::llm::jinja
