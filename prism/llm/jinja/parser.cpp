// Recursive-descent parser for the Jinja subset chat templates use. Operator precedence follows
// Jinja: conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary, with
// filters, tests, attributes, subscripts and calls binding tightest.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "prism/core/error.h"
#include "prism/llm/jinja/ast.h"
#include "prism/llm/jinja/builtins.h"
#include "prism/llm/jinja/lexer.h"

namespace prism::llm::jinja {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name)
      : tokens_(std::move(tokens)), name_(name) {}

  ParsedTemplate run() {
    ParsedTemplate parsed;
    parsed.body = parse_body({});
    if (peek().kind != Token::Kind::End) {
      error(peek(), fmt::format("unexpected '{}'", peek_statement_name()));
    }
    return parsed;
  }

 private:
  // Tokens.

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_operator(std::string_view op) const {
    return peek().kind == Token::Kind::Operator && peek().text == op;
  }
  bool at_name(std::string_view name) const {
    return peek().kind == Token::Kind::Name && peek().text == name;
  }
  bool accept_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  // An integer literal's value; one that does not fit 64 bits is an error (Python's would be
  // a big integer, which nothing in a chat template needs).
  int64_t integer(const Token& t) const {
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), value);
    if (ec != std::errc() || end != t.text.data() + t.text.size()) {
      error(t, fmt::format("integer literal {} is out of range", t.text));
    }
    return value;
  }

  [[noreturn]] void error(const Token& at, const std::string& message) const {
    fail("{}:{}:{}: template syntax error: {}", name_, at.at.line, at.at.column, message);
  }
  std::string describe(const Token& t) const {
    if (t.kind == Token::Kind::End || t.kind == Token::Kind::Text) return token_kind_name(t.kind);
    if (t.kind == Token::Kind::String) return fmt::format("string '{}'", t.text);
    return fmt::format("'{}'", t.text);
  }
  void expect_operator(std::string_view op) {
    if (!accept_operator(op)) {
      error(peek(), fmt::format("expected '{}', got {}", op, describe(peek())));
    }
  }
  void expect(Token::Kind kind) {
    if (peek().kind != kind) {
      error(peek(), fmt::format("expected {}, got {}", token_kind_name(kind), describe(peek())));
    }
    next();
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name) {
      error(peek(), fmt::format("expected a name, got {}", describe(peek())));
    }
    return next().text;
  }
  // Nesting (limits::kNesting). Rendering and freeing walk the tree recursively, so whatever
  // deepens it counts: brackets, blocks, `not`/sign prefixes, and each link of an operator,
  // filter, attribute or call chain (`a + b + c ...` is as deep as it is long).
  class Level {
   public:
    explicit Level(Parser& parser) : parser_(parser) {}
    Level(Parser& parser, const Token& at) : parser_(parser) { deeper(at); }
    ~Level() { parser_.depth_ -= taken_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;
    void deeper(const Token& at) {
      ++taken_;
      if (++parser_.depth_ > limits::kNesting) {
        parser_.error(at, fmt::format("the template nests deeper than the sandbox's limit of {}",
                                      limits::kNesting));
      }
    }

   private:
    Parser& parser_;
    int taken_ = 0;
  };

  std::string peek_statement_name() const {
    return peek(1).kind == Token::Kind::Name ? peek(1).text : peek().text;
  }

  // Statements.

  // Nodes up to a `{% name %}` whose name is in `ends` (not consumed) or the end of input.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Token::Kind::End) return body;
      if (t.kind == Token::Kind::Text) {
        auto node = std::make_unique<Node>(Node::Kind::Text, t.at);
        node->text = next().text;
        body.push_back(std::move(node));
      } else if (t.kind == Token::Kind::ExprOpen) {
        auto node = std::make_unique<Node>(Node::Kind::Output, t.at);
        next();
        node->expr = parse_expression();
        expect(Token::Kind::ExprClose);
        body.push_back(std::move(node));
      } else if (t.kind == Token::Kind::StmtOpen) {
        const Token& keyword = peek(1);
        if (keyword.kind != Token::Kind::Name) error(keyword, "expected a statement name");
        for (auto end : ends) {
          if (keyword.text == end) return body;
        }
        body.push_back(parse_statement());
      } else {
        error(t, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // Consumes `{% name` for an expected closing statement, or fails naming the opener.
  void expect_statement(std::string_view name, const Node& opener, std::string_view opener_name) {
    if (peek().kind != Token::Kind::StmtOpen ||
        !(peek(1).kind == Token::Kind::Name && peek(1).text == name)) {
      error(peek(), fmt::format("'{}' at line {} column {} was never closed (expected '{}')",
                                opener_name, opener.at.line, opener.at.column, name));
    }
    next();
    next();
  }

  NodePtr parse_statement() {
    Level level(*this, peek());
    const Token& open = next();  // {%
    const Token& keyword = next();
    Location at = open.at;
    const std::string& word = keyword.text;
    if (word == "if") return parse_if(at);
    if (word == "for") return parse_for(at);
    if (word == "set") return parse_set(at);
    if (word == "macro") return parse_macro(at);
    if (word == "break" || word == "continue") {
      auto node =
          std::make_unique<Node>(word == "break" ? Node::Kind::Break : Node::Kind::Continue, at);
      expect(Token::Kind::StmtClose);
      return node;
    }
    if (word == "generation") {
      // Hugging Face's marker for assistant-generated text: rendered as its content.
      auto node = std::make_unique<Node>(Node::Kind::Plain, at);
      expect(Token::Kind::StmtClose);
      node->body = parse_body({"endgeneration"});
      expect_statement("endgeneration", *node, "generation");
      expect(Token::Kind::StmtClose);
      return node;
    }
    if (word.rfind("end", 0) == 0 || word == "elif" || word == "else") {
      error(keyword, fmt::format("unexpected '{}' with no block open", word));
    }
    error(keyword, fmt::format("unknown statement '{}'", word));
  }

  NodePtr parse_if(Location at) {
    auto node = std::make_unique<Node>(Node::Kind::If, at);
    ExprPtr condition = parse_expression();
    expect(Token::Kind::StmtClose);
    Body body = parse_body({"elif", "else", "endif"});
    node->branches.emplace_back(std::move(condition), std::move(body));
    while (true) {
      if (peek().kind != Token::Kind::StmtOpen) expect_statement("endif", *node, "if");
      const std::string& word = peek(1).text;
      if (word == "elif") {
        next();
        next();
        ExprPtr c = parse_expression();
        expect(Token::Kind::StmtClose);
        Body b = parse_body({"elif", "else", "endif"});
        node->branches.emplace_back(std::move(c), std::move(b));
      } else if (word == "else") {
        next();
        next();
        expect(Token::Kind::StmtClose);
        node->else_body = parse_body({"endif"});
        expect_statement("endif", *node, "if");
        break;
      } else {
        expect_statement("endif", *node, "if");
        break;
      }
    }
    expect(Token::Kind::StmtClose);
    return node;
  }

  NodePtr parse_for(Location at) {
    auto node = std::make_unique<Node>(Node::Kind::For, at);
    do {
      node->targets.push_back(expect_name());
    } while (accept_operator(","));
    if (!accept_name("in")) error(peek(), fmt::format("expected 'in', got {}", describe(peek())));
    // The iterable stops before a trailing `if` filter, so no conditional expression here.
    node->expr = parse_or();
    if (accept_name("if")) node->condition = parse_or();
    if (accept_name("recursive")) error(peek(), "recursive loops are not supported");
    expect(Token::Kind::StmtClose);
    node->body = parse_body({"else", "endfor"});
    if (peek().kind == Token::Kind::StmtOpen && peek(1).text == "else") {
      next();
      next();
      expect(Token::Kind::StmtClose);
      node->else_body = parse_body({"endfor"});
    }
    expect_statement("endfor", *node, "for");
    expect(Token::Kind::StmtClose);
    return node;
  }

  NodePtr parse_set(Location at) {
    auto node = std::make_unique<Node>(Node::Kind::Set, at);
    node->targets.push_back(expect_name());
    if (accept_operator(".")) {
      node->attribute = expect_name();
    } else {
      while (accept_operator(",")) node->targets.push_back(expect_name());
    }
    if (peek().kind == Token::Kind::StmtClose && node->targets.size() == 1 &&
        node->attribute.empty()) {
      next();
      node->kind = Node::Kind::SetBlock;
      node->body = parse_body({"endset"});
      expect_statement("endset", *node, "set");
      expect(Token::Kind::StmtClose);
      return node;
    }
    expect_operator("=");
    node->expr = parse_expression();
    if (node->targets.size() > 1 && at_operator(",")) {
      error(peek(), "assign a list or tuple to several names");
    }
    expect(Token::Kind::StmtClose);
    return node;
  }

  NodePtr parse_macro(Location at) {
    auto node = std::make_unique<Node>(Node::Kind::Macro, at);
    node->name = expect_name();
    expect_operator("(");
    while (!accept_operator(")")) {
      std::string param = expect_name();
      ExprPtr fallback;
      if (accept_operator("=")) fallback = parse_expression();
      node->params.emplace_back(std::move(param), std::move(fallback));
      if (!at_operator(")")) expect_operator(",");
    }
    expect(Token::Kind::StmtClose);
    node->body = parse_body({"endmacro"});
    expect_statement("endmacro", *node, "macro");
    if (peek().kind == Token::Kind::Name) next();  // {% endmacro name %}
    expect(Token::Kind::StmtClose);
    return node;
  }

  // Expressions.

  ExprPtr make(Expr::Kind kind, Location at) { return std::make_unique<Expr>(kind, at); }

  ExprPtr parse_expression() {
    Level level(*this, peek());
    ExprPtr value = parse_or();
    if (at_name("if")) {
      Location at = next().at;
      auto node = make(Expr::Kind::Conditional, at);
      node->object = parse_or();
      node->operand = std::move(value);
      if (accept_name("else")) node->alternative = parse_expression();
      return node;
    }
    return value;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, Location at) {
    auto node = make(Expr::Kind::Binary, at);
    node->name = std::move(op);
    node->object = std::move(left);
    node->operand = std::move(right);
    return node;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    Level chain(*this);
    while (at_name("or")) {
      chain.deeper(peek());
      Location at = next().at;
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    Level chain(*this);
    while (at_name("and")) {
      chain.deeper(peek());
      Location at = next().at;
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Level level(*this, peek());
      Location at = next().at;
      auto node = make(Expr::Kind::Unary, at);
      node->name = "not";
      node->object = parse_not();
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_add();
    Level chain(*this);
    while (true) {
      Location at = peek().at;
      std::string op;
      if (peek().kind == Token::Kind::Operator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && peek(1).kind == Token::Kind::Name && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      chain.deeper(peek());
      left = binary(op, std::move(left), parse_add(), at);
    }
  }

  ExprPtr parse_add() {
    ExprPtr left = parse_concat();
    Level chain(*this);
    while (at_operator("+") || at_operator("-")) {
      chain.deeper(peek());
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_multiply();
    Level chain(*this);
    while (at_operator("~")) {
      chain.deeper(peek());
      Location at = next().at;
      left = binary("~", std::move(left), parse_multiply(), at);
    }
    return left;
  }

  ExprPtr parse_multiply() {
    ExprPtr left = parse_power();
    Level chain(*this);
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      chain.deeper(peek());
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_power(), op.at);
    }
    return left;
  }

  ExprPtr parse_power() {
    ExprPtr left = parse_unary();
    Level chain(*this);
    while (at_operator("**")) {
      chain.deeper(peek());
      Location at = next().at;
      left = binary("**", std::move(left), parse_unary(), at);
    }
    return left;
  }

  // As in Jinja2, a sign binds tighter than filters and tests: `-3 | abs` is 3.
  ExprPtr parse_unary(bool with_filters = true) {
    ExprPtr value;
    if (at_operator("-") || at_operator("+")) {
      Level level(*this, peek());
      const Token& op = next();
      auto node = make(Expr::Kind::Unary, op.at);
      node->name = op.text;
      node->object = parse_unary(false);
      value = std::move(node);
    } else {
      value = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters(std::move(value)) : std::move(value);
  }

  void parse_call_arguments(Expr& call) {
    while (!accept_operator(")")) {
      if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Operator &&
          peek(1).text == "=") {
        std::string key = next().text;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        call.items.push_back(parse_expression());
      }
      if (!at_operator(")")) expect_operator(",");
    }
  }

  ExprPtr parse_filters(ExprPtr value) {
    Level chain(*this);
    while (true) {
      if (at_operator("|")) {
        chain.deeper(next());
        Location at = peek().at;
        auto node = make(Expr::Kind::Filter, at);
        node->name = expect_name();
        while (accept_operator(".")) node->name += "." + expect_name();
        node->object = std::move(value);
        if (accept_operator("(")) parse_call_arguments(*node);
        value = std::move(node);
      } else if (at_name("is")) {
        chain.deeper(peek());
        Location at = next().at;
        auto node = make(Expr::Kind::Test, at);
        node->negated = accept_name("not");
        node->name = expect_name();
        node->object = std::move(value);
        if (accept_operator("(")) {
          parse_call_arguments(*node);
        } else if (peek().kind == Token::Kind::String || peek().kind == Token::Kind::Integer ||
                   peek().kind == Token::Kind::Float || at_operator("[") || at_operator("{") ||
                   (peek().kind == Token::Kind::Name && !at_name("and") && !at_name("or") &&
                    !at_name("if") && !at_name("else") && !at_name("is") && !at_name("in") &&
                    !at_name("not"))) {
          // `x is divisibleby 3`, `x is in [1, 2]`: one argument without parentheses.
          node->items.push_back(parse_postfix(parse_primary()));
        }
        value = std::move(node);
      } else {
        return value;
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr value) {
    Level chain(*this);
    while (true) {
      if (at_operator(".") || at_operator("[") || at_operator("(")) chain.deeper(peek());
      if (at_operator(".")) {
        Location at = next().at;
        auto node = make(Expr::Kind::Attribute, at);
        if (peek().kind == Token::Kind::Integer) {
          // `x.0` is Jinja for x[0].
          node->kind = Expr::Kind::Subscript;
          node->operand = make(Expr::Kind::Literal, peek().at);
          node->operand->literal = Value(integer(next()));
        } else {
          node->name = expect_name();
        }
        node->object = std::move(value);
        value = std::move(node);
      } else if (at_operator("[")) {
        Location at = next().at;
        ExprPtr first;
        if (!at_operator(":")) first = parse_expression();
        if (at_operator(":")) {
          auto node = make(Expr::Kind::Slice, at);
          node->object = std::move(value);
          node->start = std::move(first);
          next();
          if (!at_operator(":") && !at_operator("]")) node->stop = parse_expression();
          if (accept_operator(":") && !at_operator("]")) node->step = parse_expression();
          expect_operator("]");
          value = std::move(node);
        } else {
          auto node = make(Expr::Kind::Subscript, at);
          node->object = std::move(value);
          node->operand = std::move(first);
          expect_operator("]");
          value = std::move(node);
        }
      } else if (at_operator("(")) {
        next();
        // A call is located where its callee starts: that is what errors should point at.
        auto node = make(Expr::Kind::Call, value->at);
        node->object = std::move(value);
        parse_call_arguments(*node);
        value = std::move(node);
      } else {
        return value;
      }
    }
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    Location at = t.at;
    switch (t.kind) {
      case Token::Kind::Name: {
        std::string name = next().text;
        auto node = make(Expr::Kind::Literal, at);
        if (name == "true" || name == "True") {
          node->literal = Value(true);
        } else if (name == "false" || name == "False") {
          node->literal = Value(false);
        } else if (name == "none" || name == "None") {
          node->literal = Value(None{});
        } else {
          node->kind = Expr::Kind::Name;
          node->name = std::move(name);
        }
        return node;
      }
      case Token::Kind::String: {
        std::string text = next().text;
        // Adjacent literals concatenate, as in Python.
        while (peek().kind == Token::Kind::String) text += next().text;
        auto node = make(Expr::Kind::Literal, at);
        node->literal = Value(std::move(text));
        return node;
      }
      case Token::Kind::Integer: {
        auto node = make(Expr::Kind::Literal, at);
        node->literal = Value(integer(next()));
        return node;
      }
      case Token::Kind::Float: {
        auto node = make(Expr::Kind::Literal, at);
        // strtod: a literal past double's range is inf, as in Python (std::stod throws).
        node->literal = Value(std::strtod(next().text.c_str(), nullptr));
        return node;
      }
      case Token::Kind::Operator:
        if (t.text == "(") {
          next();
          if (accept_operator(")")) return make(Expr::Kind::Tuple, at);
          ExprPtr first = parse_expression();
          if (!at_operator(",")) {
            expect_operator(")");
            return first;
          }
          auto node = make(Expr::Kind::Tuple, at);
          node->items.push_back(std::move(first));
          while (accept_operator(",")) {
            if (at_operator(")")) break;
            node->items.push_back(parse_expression());
          }
          expect_operator(")");
          return node;
        }
        if (t.text == "[") {
          next();
          auto node = make(Expr::Kind::List, at);
          while (!accept_operator("]")) {
            node->items.push_back(parse_expression());
            if (!at_operator("]")) expect_operator(",");
          }
          return node;
        }
        if (t.text == "{") {
          next();
          auto node = make(Expr::Kind::Dict, at);
          while (!accept_operator("}")) {
            node->items.push_back(parse_expression());
            expect_operator(":");
            node->items.push_back(parse_expression());
            if (!at_operator("}")) expect_operator(",");
          }
          return node;
        }
        break;
      default:
        break;
    }
    error(t, fmt::format("unexpected {}", describe(t)));
  }

  std::vector<Token> tokens_;
  std::string_view name_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

ParsedTemplate parse_template(std::string_view source, std::string_view source_name) {
  return Parser(tokenize_template(source, source_name), source_name).run();
}

}  // namespace prism::llm::jinja
