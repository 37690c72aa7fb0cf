// Renders a parsed template: walks statements, evaluates expressions with Python semantics.
#include <fmt/format.h>

#include <set>
#include <unordered_map>

#include "prism/core/error.h"
#include "prism/llm/jinja/ast.h"
#include "prism/llm/jinja/builtins.h"
#include "prism/llm/jinja/template.h"

namespace prism::llm::jinja {

namespace {

class Interpreter {
 public:
  Interpreter(const std::string& source_name, const Dict& context, int64_t step_limit)
      : source_name_(source_name), step_limit_(step_limit) {
    add_global_functions(globals_);
    for (const auto& [key, value] : context.entries) globals_.set(key, value);
    frames_.emplace_back();
  }

  std::string render(const Body& body) {
    std::string out;
    render_body(body, out);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  // The sandbox's budgets (limits:: in builtins.h): steps, nesting and bytes built.
  void step(Location at) {
    if (++steps_ > step_limit_) {
      error(at, fmt::format("the template ran past the sandbox's limit of {} steps", step_limit_));
    }
  }
  void charge(size_t bytes, Location at) {
    built_bytes_ += bytes;
    if (built_bytes_ > limits::kRenderBytes) {
      error(at, fmt::format("the template built more than the sandbox's limit of {} bytes",
                            limits::kRenderBytes));
    }
  }
  void append(std::string& out, std::string_view text, Location at) {
    charge(text.size(), at);
    out += text;
  }
  // Bytes a new value holds of its own (a list's items share nested lists, not strings).
  static size_t footprint(const Value& value) {
    if (value.is_string()) return value.as_string().size();
    size_t bytes = 0;
    auto item = [](const Value& v) {
      return sizeof(Value) + (v.is_string() ? v.as_string().size() : 0);
    };
    if (value.is_list()) {
      for (const Value& v : value.as_list()) bytes += item(v);
    } else if (value.is_dict()) {
      for (const auto& [key, v] : value.as_dict().entries) bytes += key.size() + item(v);
    }
    return bytes;
  }
  class Nested {
   public:
    Nested(Interpreter& interpreter, Location at) : interpreter_(interpreter) {
      if (++interpreter_.depth_ > limits::kCallDepth) {
        interpreter_.error(at, fmt::format("the template nests calls and expressions past the "
                                           "sandbox's limit of {} levels",
                                           limits::kCallDepth));
      }
    }
    ~Nested() { --interpreter_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Interpreter& interpreter_;
  };

  // A value about to be stored in a variable, a namespace or a macro's argument: its lists,
  // dicts and namespaces nest at most limits::kValueDepth deep, and a namespace may not come to
  // hold itself (`{% set ns.x = ns %}`), which would make printing it endless. Each container
  // visited is a step.
  void check_storable(const Value& value, const Dict* into, Location at) {
    std::vector<std::pair<const Value*, int>> pending{{&value, 1}};
    while (!pending.empty()) {
      auto [v, depth] = pending.back();
      pending.pop_back();
      if (!v->is_list() && !v->is_dict()) continue;
      step(at);
      if (depth > limits::kValueDepth) {
        error(at, fmt::format("a value nests lists and dicts past the sandbox's limit of {} levels",
                              limits::kValueDepth));
      }
      if (v->is_list()) {
        for (const Value& item : v->as_list()) pending.emplace_back(&item, depth + 1);
      } else {
        if (&v->as_dict() == into) {
          error(at, "a namespace cannot hold itself, directly or through the values it holds");
        }
        for (const auto& entry : v->as_dict().entries)
          pending.emplace_back(&entry.second, depth + 1);
      }
    }
  }

  [[noreturn]] void error(Location at, const std::string& message) const {
    fail("{}:{}:{}: {}", source_name_, at.line, at.column, message);
  }

  // An undefined value is fine to test (`is defined`, `if x`) but not to use: say which name.
  const Value& defined(const Value& value, Location use) const {
    if (!value.is_undefined()) return value;
    const UndefinedOrigin* origin = value.undefined_origin();
    if (origin && origin->line > 0) {
      fail("{}:{}:{}: {}", source_name_, origin->line, origin->column, origin->description);
    }
    error(use, origin ? origin->description : "undefined value");
  }

  Value lookup(const std::string& name, Location at) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      auto it = frame->find(name);
      if (it != frame->end()) return it->second;
    }
    if (const Value* global = globals_.find(name)) return *global;
    return Value::undefined(fmt::format("undefined variable '{}'", name), at.line, at.column);
  }

  void assign(const std::string& name, Value value, Location at) {
    check_storable(value, nullptr, at);
    frames_.back()[name] = std::move(value);
  }

  Flow render_body(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      Flow flow = render_node(*node, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow render_node(const Node& node, std::string& out) {
    step(node.at);
    Nested nested(*this, node.at);
    switch (node.kind) {
      case Node::Kind::Text:
        append(out, node.text, node.at);
        return Flow::Normal;
      case Node::Kind::Output: {
        Value value = eval(*node.expr);
        const UndefinedOrigin* origin = value.undefined_origin();
        if (origin && origin->prints_empty) return Flow::Normal;
        std::string text;
        try {
          text = defined(value, node.expr->at).str();
        } catch (const BuiltinError& e) {  // a value too large to print
          error(node.expr->at, e.what());
        }
        append(out, text, node.at);
        return Flow::Normal;
      }
      case Node::Kind::If:
        for (const auto& [condition, body] : node.branches) {
          if (eval(*condition).truthy()) return render_body(body, out);
        }
        return render_body(node.else_body, out);
      case Node::Kind::For:
        return render_for(node, out);
      case Node::Kind::Set: {
        Value value = eval(*node.expr);
        if (!node.attribute.empty()) {
          Value target = lookup(node.targets[0], node.at);
          if (!target.is_dict() || !target.as_dict().is_namespace) {
            error(node.at, fmt::format("cannot set attribute '{}' of {} '{}': only namespace() "
                                       "objects take attribute assignments",
                                       node.attribute, target.type_name(), node.targets[0]));
          }
          check_storable(value, &target.as_dict(), node.at);
          target.as_dict().set(node.attribute, std::move(value));
        } else if (node.targets.size() == 1) {
          assign(node.targets[0], std::move(value), node.at);
        } else {
          unpack(node.targets, value, node.at);
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string captured;
        render_body(node.body, captured);
        assign(node.targets[0], Value(std::move(captured)), node.at);
        return Flow::Normal;
      }
      case Node::Kind::Macro:
        assign(node.name, make_macro(node), node.at);
        return Flow::Normal;
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
      case Node::Kind::Plain:
        return render_body(node.body, out);
    }
    return Flow::Normal;
  }

  void unpack(const std::vector<std::string>& targets, const Value& value, Location at) {
    List items;
    try {  // an undefined value, or one that is not iterable (`for a, b in range(2)`)
      items = iterate(defined(value, at));
    } catch (const BuiltinError& e) {
      error(at, e.what());
    }
    if (items.size() != targets.size()) {
      error(at, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i], at);
  }

  Flow render_for(const Node& node, std::string& out) {
    Value iterable = eval(*node.expr);
    List items;
    try {
      items = iterate(defined(iterable, node.expr->at));
    } catch (const BuiltinError& e) {
      error(node.expr->at, e.what());
    }
    frames_.emplace_back();
    if (node.condition) {
      List kept;
      for (Value& item : items) {
        bind_targets(node, item);
        if (eval(*node.condition).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    for (size_t i = 0; i < n; ++i) {
      // As in Jinja2, each iteration starts with a scope of its own: a name the body sets is
      // gone at the next iteration, not only after the loop (namespace() carries state over).
      step(node.at);
      frames_.back().clear();
      bind_targets(node, items[i]);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i + 1 == n));
      loop.set("length", Value(n));
      loop.set("previtem",
               i > 0 ? items[i - 1]
                     : Value::undefined("loop.previtem is undefined on the first iteration"));
      loop.set("nextitem",
               i + 1 < n ? items[i + 1]
                         : Value::undefined("loop.nextitem is undefined on the last iteration"));
      loop.set("cycle", Value(Function([i](const Arguments& args) -> Value {
                 if (args.positional.empty()) throw BuiltinError("loop.cycle() needs arguments");
                 return args.positional[i % args.positional.size()];
               })));
      frames_.back()["loop"] = Value(std::move(loop));
      if (render_body(node.body, out) == Flow::Break) break;
    }
    frames_.pop_back();
    if (n == 0) render_body(node.else_body, out);
    return Flow::Normal;
  }

  void bind_targets(const Node& node, const Value& item) {
    if (node.targets.size() == 1) {
      frames_.back()[node.targets[0]] = item;  // an item of a stored value: already checked
    } else {
      unpack(node.targets, item, node.at);
    }
  }

  Value make_macro(const Node& node) {
    return Value(Function([this, &node](const Arguments& args) -> Value {
      if (args.positional.size() > node.params.size()) {
        throw BuiltinError(fmt::format("macro '{}' takes {} arguments, got {}", node.name,
                                       node.params.size(), args.positional.size()));
      }
      std::unordered_map<std::string, Value> frame;
      for (size_t i = 0; i < node.params.size(); ++i) {
        const auto& [param, fallback] = node.params[i];
        if (const Value* given = args.get(param, i)) {
          check_storable(*given, nullptr, node.at);
          frame[param] = *given;
        } else if (fallback) {
          frame[param] = eval(*fallback);
        } else {
          frame[param] = Value::undefined(
              fmt::format("macro '{}': argument '{}' was not given", node.name, param));
        }
      }
      frames_.push_back(std::move(frame));
      std::string out;
      render_body(node.body, out);
      frames_.pop_back();
      return Value(std::move(out));
    }));
  }

  Arguments eval_arguments(const Expr& expr) {
    Arguments args;
    for (const ExprPtr& item : expr.items) args.positional.push_back(eval(*item));
    for (const auto& [key, value] : expr.keywords) args.keyword.emplace_back(key, eval(*value));
    return args;
  }

  Value eval(const Expr& expr) {
    step(expr.at);
    Nested nested(*this, expr.at);
    try {
      Value value = eval_unchecked(expr);
      switch (expr.kind) {
        case Expr::Kind::Literal:
        case Expr::Kind::Name:
        case Expr::Kind::Attribute:
        case Expr::Kind::Subscript:
          break;  // a value that exists already
        default:
          charge(footprint(value), expr.at);
      }
      return value;
    } catch (const BuiltinError& e) {
      error(expr.at, e.what());
    }
  }

  Value eval_unchecked(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::Literal:
        return expr.literal;
      case Expr::Kind::Name:
        return lookup(expr.name, expr.at);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const ExprPtr& item : expr.items) items.push_back(eval(*item));
        return Value(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict dict;
        for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
          Value key = defined(eval(*expr.items[i]), expr.items[i]->at);
          dict.set(key.str(), eval(*expr.items[i + 1]));
        }
        return Value(std::move(dict));
      }
      case Expr::Kind::Attribute: {
        Value object = defined(eval(*expr.object), expr.object->at);
        if (object.is_dict()) {
          if (const Value* found = object.as_dict().find(expr.name)) return *found;
        }
        return Value::undefined(
            fmt::format("{} has no attribute '{}'", object.type_name(), expr.name), expr.at.line,
            expr.at.column);
      }
      case Expr::Kind::Subscript: {
        Value object = defined(eval(*expr.object), expr.object->at);
        Value index = defined(eval(*expr.operand), expr.operand->at);
        Value result = subscript(object, index);
        if (result.is_undefined()) {
          return Value::undefined(
              fmt::format("{} has no item {}", object.type_name(), index.repr()), expr.at.line,
              expr.at.column);
        }
        return result;
      }
      case Expr::Kind::Slice: {
        Value object = defined(eval(*expr.object), expr.object->at);
        Value start, stop, step;
        if (expr.start) start = eval(*expr.start);
        if (expr.stop) stop = eval(*expr.stop);
        if (expr.step) step = eval(*expr.step);
        return slice(object, expr.start ? &start : nullptr, expr.stop ? &stop : nullptr,
                     expr.step ? &step : nullptr);
      }
      case Expr::Kind::Call:
        return eval_call(expr);
      case Expr::Kind::Filter: {
        Value input = eval(*expr.object);
        Arguments args = eval_arguments(expr);
        // `default` looks at undefined values. Filters that read their input as text or iterate
        // it see "" in its place, as with Jinja2's Undefined (a template's `message['content']
        // | trim` renders "" for a message without content, as transformers renders it); every
        // other filter needs a value.
        static const std::set<std::string_view> kEmptyWhenUndefined{
            "trim",   "upper", "lower",  "capitalize", "title", "string", "safe",
            "escape", "e",     "length", "count",      "list",  "join"};
        if (input.is_undefined() && kEmptyWhenUndefined.contains(expr.name)) {
          input = Value(std::string());
        } else if (expr.name != "default" && expr.name != "d") {
          defined(input, expr.object->at);
        }
        return apply_filter(expr.name, input, args);
      }
      case Expr::Kind::Test: {
        Value input = eval(*expr.object);
        bool result = apply_test(expr.name, input, eval_arguments(expr));
        return Value(result != expr.negated);
      }
      case Expr::Kind::Unary: {
        Value operand = eval(*expr.object);
        if (expr.name == "not") return Value(!operand.truthy());
        defined(operand, expr.object->at);
        if (!operand.is_number() && !operand.is_bool()) {
          error(expr.at,
                fmt::format("bad operand type for unary {}: '{}'", expr.name, operand.type_name()));
        }
        if (expr.name == "+") return operand;
        if (operand.is_float()) return Value(-operand.as_number());
        return binary_operation("-", Value(int64_t{0}), operand);
      }
      case Expr::Kind::Binary: {
        if (expr.name == "and") {
          Value left = eval(*expr.object);
          return left.truthy() ? eval(*expr.operand) : left;
        }
        if (expr.name == "or") {
          Value left = eval(*expr.object);
          return left.truthy() ? left : eval(*expr.operand);
        }
        Value left = eval(*expr.object);
        Value right = eval(*expr.operand);
        if (expr.name == "==") return Value(left == right);
        if (expr.name == "!=") return Value(!(left == right));
        defined(left, expr.object->at);
        defined(right, expr.operand->at);
        return binary_operation(expr.name, left, right);
      }
      case Expr::Kind::Conditional: {
        if (eval(*expr.object).truthy()) return eval(*expr.operand);
        if (expr.alternative) return eval(*expr.alternative);
        return Value::undefined("the condition was false and there is no else", expr.at.line,
                                expr.at.column, /*prints_empty=*/true);
      }
    }
    return Value();
  }

  Value eval_call(const Expr& expr) {
    const Expr& callee = *expr.object;
    if (callee.kind == Expr::Kind::Attribute) {
      // obj.method(...): a str/list/dict method unless the dict holds a function by that name.
      Value object = defined(eval(*callee.object), callee.object->at);
      const Value* member = object.is_dict() ? object.as_dict().find(callee.name) : nullptr;
      if (!(member && member->is_function())) {
        Value result;
        if (call_method(object, callee.name, eval_arguments(expr), result)) return result;
        if (!member) {
          error(callee.at, fmt::format("{} has no method '{}'", object.type_name(), callee.name));
        }
      }
    }
    Value function = defined(eval(callee), callee.at);
    if (!function.is_function()) {
      error(expr.at, fmt::format("'{}' object is not callable", function.type_name()));
    }
    return function.as_function()(eval_arguments(expr));
  }

  const std::string& source_name_;
  int64_t step_limit_;
  int64_t steps_ = 0;
  int depth_ = 0;
  size_t built_bytes_ = 0;
  Dict globals_;
  std::vector<std::unordered_map<std::string, Value>> frames_;
};

}  // namespace

Template::Template(std::string_view source, std::string source_name)
    : parsed_(std::make_unique<ParsedTemplate>(parse_template(source, source_name))),
      source_name_(std::move(source_name)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Dict& context, const RenderLimits& limits) const {
  WorkBudget budget(limits.work_bytes);
  Interpreter interpreter(source_name_, context, limits.steps);
  try {
    return interpreter.render(parsed_->body);
  } catch (const BuiltinError& e) {  // one raised where no expression's location was at hand
    fail("{}: {}", source_name_, e.what());
  }
}

}  // namespace prism::llm::jinja
