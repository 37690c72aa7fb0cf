// The builtins of the Jinja interpreter: filters, tests, methods of str/list/dict, and global
// functions. Internal to prism/llm/jinja.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The sandbox's limits. Chat templates come from model repositories: past one of these a render
// ends with one error, where it would otherwise crash, hang or take all memory. Each is far past
// what a real chat template needs (docs/tokenizers.md).
namespace limits {
// Items range() makes, as in jinja2's sandbox (MAX_RANGE).
inline constexpr int64_t kRange = 100'000;
// Bytes of one string (or items of one list) that an operation builds: `*` repetition, replace,
// indent, tojson's indent, joins and concatenations.
inline constexpr size_t kValueBytes = size_t{64} << 20;
// Items of lists and dicts in one value's text (printing a list, str(), string): each costs
// a step of its own, and shared lists make millions of them from a few characters.
inline constexpr int64_t kPrintedItems = 1'000'000;
// Bytes of all strings, lists and output that one render builds.
inline constexpr size_t kRenderBytes = size_t{256} << 20;
// Parse nesting: brackets, operators chained on one value, blocks inside blocks.
inline constexpr int kNesting = 128;
// Evaluation nesting at run time: expressions inside expressions and macro calls inside macros.
inline constexpr int kCallDepth = 500;
// Nesting of lists, dicts and namespaces inside each other in a value a template stores.
inline constexpr int kValueDepth = 256;
// tojson(indent=): each line repeats the indent once per level, so a huge one is only memory.
inline constexpr int64_t kJsonIndent = 1024;
}  // namespace limits

// The work budget (RenderLimits::work_bytes) of the render on this thread while one is alive:
// each render holds one. Without one, charge_work() counts nothing.
class WorkBudget {
 public:
  explicit WorkBudget(int64_t bytes);
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;

 private:
  friend void charge_work(size_t bytes);
  int64_t limit_;
  int64_t left_;
  WorkBudget* previous_;
};

// Charges `bytes` read or copied to this thread's budget; throws BuiltinError once it is spent.
void charge_work(size_t bytes);
// Charges what reading or copying `value` once costs: a string's bytes, a list's items and their
// strings, a dict's entries.
void charge_operand(const Value& value);
// charge_operand() of a filter's, test's or method's value and each of its arguments.
void charge_operands(const Value& value, const Arguments& args);

// Throws BuiltinError for an integer result of `op` past 64 bits (Python's would be a big
// integer, which prism does not have).
[[noreturn]] void integer_overflow(std::string_view op);

// Throws BuiltinError when an operation would build a value of `bytes` (past limits::kValueBytes).
void check_value_size(size_t bytes, std::string_view what);

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
