// Splits a Jinja template into text and the tokens inside {{ }}, {% %}; drops {# #} comments.
// Whitespace control follows Hugging Face's environment: trim_blocks and lstrip_blocks on, plus
// the explicit `-` / `+` markers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "prism/llm/jinja/ast.h"

namespace prism::llm::jinja {

struct Token {
  enum class Kind {
    Text,
    ExprOpen,   // {{
    ExprClose,  // }}
    StmtOpen,   // {%
    StmtClose,  // %}
    Name,
    String,
    Integer,
    Float,
    Operator,
    End,
  };
  Kind kind;
  std::string text;  // the text, name, operator, or a string literal's decoded value
  Location at;
};

std::vector<Token> tokenize_template(std::string_view source, std::string_view source_name);

const char* token_kind_name(Token::Kind kind);

}  // namespace prism::llm::jinja
