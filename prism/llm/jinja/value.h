// Values of the Jinja interpreter, with Python's semantics (what chat templates are written
// against): truthiness, equality, str() and repr(), JSON conversion.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace prism::llm::jinja {

class Value;

// Where an undefined value came from, so that using it can say which name was missing.
struct UndefinedOrigin {
  std::string description;  // "'foo' is undefined", "dict has no key 'bar'"
  int line = 0;
  int column = 0;
  // `a if c` without else: Jinja prints it as nothing, a common idiom, so that is not an error.
  bool prints_empty = false;
};
struct Undefined {
  std::shared_ptr<const UndefinedOrigin> origin;
};
struct None {};

using List = std::vector<Value>;

// A dict keeps insertion order, as Python's does (it matters for tojson and iteration).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;  // namespace() objects accept `set ns.attr = ...`
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, or the positional argument at `index`, or nullptr.
  const Value* get(std::string_view name, size_t index) const;
};
using Function = std::function<Value(const Arguments&)>;

class Value {
 public:
  using Storage =
      std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
                   std::shared_ptr<Dict>, std::shared_ptr<Function>>;
  Value() = default;
  Value(None) : storage_(None{}) {}
  Value(bool b) : storage_(b) {}
  Value(int i) : storage_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : storage_(i) {}
  Value(size_t i) : storage_(static_cast<int64_t>(i)) {}
  Value(double d) : storage_(d) {}
  Value(std::string s) : storage_(std::move(s)) {}
  Value(std::string_view s) : storage_(std::string(s)) {}
  Value(const char* s) : storage_(std::string(s)) {}
  Value(List list) : storage_(std::make_shared<List>(std::move(list))) {}
  Value(Dict dict) : storage_(std::make_shared<Dict>(std::move(dict))) {}
  Value(Function f) : storage_(std::make_shared<Function>(std::move(f))) {}
  static Value undefined(std::string description, int line = 0, int column = 0,
                         bool prints_empty = false);
  static Value from_json(const nlohmann::ordered_json& json);

  bool is_undefined() const { return std::holds_alternative<Undefined>(storage_); }
  bool is_none() const { return std::holds_alternative<None>(storage_); }
  bool is_bool() const { return std::holds_alternative<bool>(storage_); }
  bool is_int() const { return std::holds_alternative<int64_t>(storage_); }
  bool is_float() const { return std::holds_alternative<double>(storage_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(storage_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(storage_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(storage_); }
  bool is_function() const { return std::holds_alternative<std::shared_ptr<Function>>(storage_); }

  // The value as that type; another type is a prism::Error naming both (Python's TypeError),
  // never a crash, whatever a template hands a filter or test.
  bool as_bool() const { return get<bool>("a bool"); }
  int64_t as_int() const { return get<int64_t>("an int"); }
  double as_number() const {
    return is_int() ? static_cast<double>(as_int()) : get<double>("a number");
  }
  const std::string& as_string() const { return get<std::string>("a str"); }
  List& as_list() const { return *get<std::shared_ptr<List>>("a list"); }
  Dict& as_dict() const { return *get<std::shared_ptr<Dict>>("a dict"); }
  const Function& as_function() const { return *get<std::shared_ptr<Function>>("callable"); }
  const UndefinedOrigin* undefined_origin() const;

  // Python's bool(), str(), repr(); type name as Python spells it ("str", "dict").
  bool truthy() const;
  std::string str() const;
  std::string repr() const;
  std::string type_name() const;
  // Python's json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: one line).
  // Throws BuiltinError where the text would pass the sandbox's limits on one value (bytes,
  // and items of lists and dicts: builtins.h), before building more than that.
  std::string to_json(int indent = -1) const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  template <typename T>
  const T& get(const char* want) const {
    if (const T* v = std::get_if<T>(&storage_)) return *v;
    wrong_type(want);
  }
  [[noreturn]] void wrong_type(const char* want) const;

  Storage storage_;
};

}  // namespace prism::llm::jinja
