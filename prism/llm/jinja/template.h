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

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "prism/llm/jinja/value.h"

namespace prism::llm::jinja {

struct ParsedTemplate;

// The time one render may take, bounded: past either budget it ends with one error. Chat
// templates come from model repositories; the other limits (nesting, bytes one value or one
// render builds) are fixed, in builtins.h. The defaults are far past what real chat templates
// use on long conversations (docs/tokenizers.md), and end any template within about a second.
struct RenderLimits {
  // Statements rendered plus expressions evaluated (a loop's body counts each time).
  int64_t steps = 2'000'000;
  // Bytes that the filters, tests, methods and operators read and copy: each operand's bytes (a
  // list's items and their strings), a string's characters when split into values, and each
  // comparison of two values (`in` over a list, sort, unique, ==). Steps count what the
  // template does; this counts what each step costs.
  int64_t work_bytes = int64_t{512} << 20;
};

class Template {
 public:
  Template(std::string_view source, std::string source_name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `context` holds the template's variables; the builtins (range, namespace, raise_exception,
  // strftime_now, ...) are added underneath it.
  std::string render(const Dict& context, const RenderLimits& limits = {}) const;
  const std::string& source_name() const { return source_name_; }

 private:
  std::unique_ptr<ParsedTemplate> parsed_;
  std::string source_name_;
};

}  // namespace prism::llm::jinja
