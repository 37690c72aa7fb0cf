// The syntax tree of a Jinja template, as the parser builds it and the interpreter walks it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prism/llm/jinja/value.h"

namespace prism::llm::jinja {

struct Location {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KeywordArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    List,         // items
    Tuple,        // items
    Dict,         // items: key, value, key, value, ...
    Attribute,    // object.name
    Subscript,    // object[index]
    Slice,        // object[start:stop:step]; each may be null
    Call,         // object(items..., keywords...)
    Filter,       // object | name(items..., keywords...)
    Test,         // object is [not] name(items...)
    Unary,        // name object  (not, -, +)
    Binary,       // object name operand
    Conditional,  // operand if object else alternative
  };
  Kind kind;
  Location at;
  Value literal;
  std::string name;
  ExprPtr object, operand, alternative;
  ExprPtr start, stop, step;
  std::vector<ExprPtr> items;
  KeywordArgs keywords;
  bool negated = false;

  Expr(Kind k, Location l) : kind(k), at(l) {}
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches, else_body
    For,       // targets in expr [if condition]: body, else_body
    Set,       // targets = expr, or target.attribute = expr
    SetBlock,  // {% set target %}body{% endset %}
    Macro,     // name(params): body
    Break,
    Continue,
    Plain,  // a block rendered as it is ({% generation %})
  };
  Kind kind;
  Location at;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null

  Node(Kind k, Location l) : kind(k), at(l) {}
};

struct ParsedTemplate {
  Body body;
};

// Parses `source`; errors throw prism::Error as "source_name:line:column: message".
ParsedTemplate parse_template(std::string_view source, std::string_view source_name);

}  // namespace prism::llm::jinja
