// A Jinja template, parsed once and rendered many times: the subset of Jinja that Hugging Face
// chat templates use (see docs/tokenizers.md for the list).
//
//   jinja::Template t("Hello {{ name | upper }}!", "greeting");
//   jinja::Dict context;
//   context.set("name", jinja::Value("world"));
//   t.render(context);  // "Hello WORLD!"
//
// Errors (syntax, undefined variables used, type errors, raise_exception) throw prism::Error as
// "source_name:line:column: message".
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prism/llm/jinja/value.h"

namespace prism::llm::jinja {

struct ParsedTemplate;

class Template {
 public:
  Template(std::string_view source, std::string source_name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `context` holds the template's variables; the builtins (range, namespace, raise_exception,
  // strftime_now, ...) are added underneath it.
  std::string render(const Dict& context) const;
  const std::string& source_name() const { return source_name_; }

 private:
  std::unique_ptr<ParsedTemplate> parsed_;
  std::string source_name_;
};

}  // namespace prism::llm::jinja
