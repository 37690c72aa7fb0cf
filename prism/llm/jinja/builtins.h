// The builtins of the Jinja interpreter: filters, tests, methods of str/list/dict, and global
// functions. Internal to prism/llm/jinja.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "prism/llm/jinja/value.h"

namespace prism::llm::jinja {

// Thrown by builtins; the interpreter adds the template location and rethrows prism::Error.
class BuiltinError : public std::runtime_error {
 public:
  explicit BuiltinError(const std::string& message) : std::runtime_error(message) {}
};

// Throws BuiltinError describing where the undefined value came from, when it is undefined.
const Value& require_defined(const Value& value);

// `value | name(args)`; throws BuiltinError for unknown filters or bad arguments.
Value apply_filter(std::string_view name, const Value& value, const Arguments& args);
// `value is name(args)`.
bool apply_test(std::string_view name, const Value& value, const Arguments& args);
// `object.name(args)` for str, list and dict; false when `object` has no such method.
bool call_method(const Value& object, std::string_view name, const Arguments& args, Value& result);
// range, namespace, dict, raise_exception, strftime_now.
void add_global_functions(Dict& globals);

// Python's semantics for the operators that builtins share with the interpreter.
Value binary_operation(std::string_view op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Items of a for loop (list, tuple, dict keys, string characters).
List iterate(const Value& value);
// Python-style indexing with negative indices; undefined when out of range.
Value subscript(const Value& object, const Value& index);
Value slice(const Value& object, const Value* start, const Value* stop, const Value* step);
// Python's str.capitalize() and str.title().
std::string capitalize(const std::string& s);
std::string title_case(const std::string& s);
// Jinja2's `title` filter, which differs from str.title(): words start only after whitespace,
// '-', '(', '{', '[' or '<' (so "they're" becomes "They're", not "They'Re").
std::string title_filter(const std::string& s);

}  // namespace prism::llm::jinja
