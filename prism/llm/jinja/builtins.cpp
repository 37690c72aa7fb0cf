// Operators and the str/list/dict methods of the Jinja interpreter, with Python's semantics.
// Filters, tests and global functions are in filters.cpp.
#include "prism/llm/jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "prism/llm/unicode.h"

namespace prism::llm::jinja {

const Value& require_defined(const Value& value) {
  if (value.is_undefined()) {
    const UndefinedOrigin* origin = value.undefined_origin();
    throw BuiltinError(origin ? origin->description : "undefined value");
  }
  return value;
}

void check_value_size(size_t bytes, std::string_view what) {
  if (bytes > limits::kValueBytes) {
    throw BuiltinError(fmt::format("{} would build {} bytes, past the sandbox's limit of {}", what,
                                   bytes, limits::kValueBytes));
  }
}

namespace {
thread_local WorkBudget* t_work_budget = nullptr;
}  // namespace

WorkBudget::WorkBudget(int64_t bytes) : limit_(bytes), left_(bytes), previous_(t_work_budget) {
  t_work_budget = this;
}
WorkBudget::~WorkBudget() { t_work_budget = previous_; }

void charge_work(size_t bytes) {
  WorkBudget* budget = t_work_budget;
  if (!budget) return;
  budget->left_ -= static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX / 2));
  if (budget->left_ < 0) {
    throw BuiltinError(
        fmt::format("the template's filters, tests and operators read more than "
                    "the sandbox's limit of {} bytes",
                    budget->limit_));
  }
}

void charge_operand(const Value& value) {
  if (value.is_string()) {
    charge_work(value.as_string().size());
  } else if (value.is_list()) {
    size_t bytes = 0;
    for (const Value& item : value.as_list())
      bytes += sizeof(Value) + (item.is_string() ? item.as_string().size() : 0);
    charge_work(bytes);
  } else if (value.is_dict()) {
    charge_work(value.as_dict().entries.size() * sizeof(Value));
  }
}

void charge_operands(const Value& value, const Arguments& args) {
  charge_operand(value);
  for (const Value& v : args.positional) charge_operand(v);
  for (const auto& [key, v] : args.keyword) charge_operand(v);
}

void integer_overflow(std::string_view op) {
  throw BuiltinError(
      fmt::format("integer overflow: the result of '{}' does not fit in 64 bits", op));
}

namespace {

int64_t checked_add(int64_t a, int64_t b, std::string_view op) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) integer_overflow(op);
  return r;
}
int64_t checked_sub(int64_t a, int64_t b, std::string_view op) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) integer_overflow(op);
  return r;
}
int64_t checked_mul(int64_t a, int64_t b, std::string_view op) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) integer_overflow(op);
  return r;
}

// base ** exponent for exponent >= 0: 0, 1 and -1 directly; any other base overflows within 63
// multiplications, so the loop is short whatever the exponent.
int64_t integer_power(int64_t base, int64_t exponent) {
  if (exponent == 0 || base == 1) return 1;
  if (base == 0) return 0;
  if (base == -1) return exponent % 2 == 0 ? 1 : -1;
  int64_t result = 1;
  for (int64_t k = 0; k < exponent; ++k) result = checked_mul(result, base, "**");
  return result;
}

// A string's characters, each a string of its own: a string's worth of bytes each (the bytes
// bound their count), so a long string's characters are checked against the one-value limit.
std::vector<std::string> characters(const std::string& s) {
  check_value_size(s.size() * sizeof(std::string), "a string's characters");
  charge_work(s.size() * sizeof(std::string));
  std::vector<std::string> chars;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t begin = pos;
    pos += static_cast<size_t>(unicode::sequence_length(static_cast<unsigned char>(s[pos])));
    chars.push_back(s.substr(begin, pos - begin));
  }
  return chars;
}

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw BuiltinError(fmt::format("unsupported operand types for {}: '{}' and '{}'", op,
                                 a.type_name(), b.type_name()));
}

int64_t as_integer(const Value& v) {
  return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int();
}
bool is_numeric(const Value& v) { return v.is_number() || v.is_bool(); }
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

int compare(const Value& a, const Value& b, std::string_view op) {
  charge_work(sizeof(Value));
  if (is_numeric(a) && is_numeric(b)) {
    if (is_integral(a) && is_integral(b)) {
      int64_t x = as_integer(a), y = as_integer(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    double x = is_integral(a) ? static_cast<double>(as_integer(a)) : a.as_number();
    double y = is_integral(b) ? static_cast<double>(as_integer(b)) : b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    charge_work(std::min(a.as_string().size(), b.as_string().size()));
    return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  }
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (int c = compare(x[i], y[i], op)) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw BuiltinError(
      fmt::format("'{}' not supported between '{}' and '{}'", op, a.type_name(), b.type_name()));
}

// Python's str.strip family: `chars` empty means whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto in_set = [&](const std::string& c) {
    if (!chars || chars->is_none()) {
      size_t pos = 0;
      return unicode::is_whitespace(unicode::next_code_point(c, pos));
    }
    return chars->as_string().find(c) != std::string::npos;
  };
  auto chars_of = characters(s);
  size_t begin = 0, end = chars_of.size();
  while (left && begin < end && in_set(chars_of[begin])) ++begin;
  while (right && end > begin && in_set(chars_of[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += chars_of[i];
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between characters (and at both ends).
    auto chars = characters(s);
    for (size_t i = 0; i < chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      out += chars[i];
      check_value_size(out.size(), "replace()");
    }
    if (count < 0 || static_cast<int64_t>(chars.size()) < count) out += to;
    return out;
  }
  size_t last = 0, pos;
  int64_t done = 0;
  while ((count < 0 || done < count) && (pos = s.find(from, last)) != std::string::npos) {
    out.append(s, last, pos - last);
    out += to;
    check_value_size(out.size(), "replace()");
    last = pos + from.size();
    ++done;
  }
  out.append(s, last);
  return out;
}

List split(const std::string& s, const Value* separator, int64_t max_split) {
  List parts;
  if (!separator || separator->is_none()) {
    // Runs of whitespace separate; leading and trailing whitespace give no empty parts.
    auto chars = characters(s);
    std::string current;
    bool in_word = false;
    int64_t splits = 0;
    for (size_t i = 0; i < chars.size(); ++i) {
      size_t pos = 0;
      bool space = unicode::is_whitespace(unicode::next_code_point(chars[i], pos));
      if (space && in_word && (max_split < 0 || splits < max_split)) {
        parts.push_back(Value(current));
        current.clear();
        in_word = false;
        ++splits;
      } else if (!space || in_word) {
        if (!in_word && !space) in_word = true;
        current += chars[i];
      }
    }
    if (in_word) parts.push_back(Value(strip(current, nullptr, false, true)));
    return parts;
  }
  const std::string& sep = separator->as_string();
  if (sep.empty()) throw BuiltinError("split(): empty separator");
  size_t last = 0, pos;
  int64_t splits = 0;
  while ((max_split < 0 || splits < max_split) && (pos = s.find(sep, last)) != std::string::npos) {
    parts.push_back(Value(s.substr(last, pos - last)));
    last = pos + sep.size();
    ++splits;
  }
  parts.push_back(Value(s.substr(last)));
  return parts;
}

const std::string& string_argument(const Arguments& args, std::string_view name, size_t index,
                                   std::string_view method) {
  const Value* v = args.get(name, index);
  if (!v || !v->is_string()) {
    throw BuiltinError(fmt::format("{}() expects a string for '{}'", method, name));
  }
  return v->as_string();
}

int64_t int_argument(const Arguments& args, std::string_view name, size_t index, int64_t fallback) {
  const Value* v = args.get(name, index);
  if (!v || v->is_none()) return fallback;
  if (!is_integral(*v)) throw BuiltinError(fmt::format("'{}' must be an integer", name));
  return as_integer(*v);
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string())
      throw BuiltinError("startswith/endswith expect a string or a tuple of strings");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& v : affix.as_list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(affix);
}

}  // namespace

std::string capitalize(const std::string& s) {
  auto chars = characters(s);
  std::string out;
  for (size_t i = 0; i < chars.size(); ++i) {
    out += i == 0 ? unicode::to_upper(chars[i]) : unicode::to_lower(chars[i]);
  }
  return out;
}

std::string title_case(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (const std::string& c : characters(s)) {
    size_t pos = 0;
    bool alpha = unicode::is_alphanumeric(unicode::next_code_point(c, pos));
    out += alpha ? (previous_cased ? unicode::to_lower(c) : unicode::to_upper(c)) : c;
    previous_cased = alpha;
  }
  return out;
}

std::string title_filter(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const std::string& c : characters(s)) {
    size_t pos = 0;
    char32_t code_point = unicode::next_code_point(c, pos);
    out += word_start ? unicode::to_upper(c) : unicode::to_lower(c);
    word_start = code_point == '-' || code_point == '(' || code_point == '{' || code_point == '[' ||
                 code_point == '<' || unicode::is_whitespace(code_point);
  }
  return out;
}

Value binary_operation(std::string_view op, const Value& a, const Value& b) {
  charge_operand(a);
  charge_operand(b);
  if (op == "<") return Value(compare(a, b, op) < 0);
  if (op == ">") return Value(compare(a, b, op) > 0);
  if (op == "<=") return Value(compare(a, b, op) <= 0);
  if (op == ">=") return Value(compare(a, b, op) >= 0);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (op == "~") {
    std::string left = a.str(), right = b.str();
    check_value_size(left.size() + right.size(), "'~'");
    return Value(left + right);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_value_size(a.as_string().size() + b.as_string().size(), "'+'");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      check_value_size((a.as_list().size() + b.as_list().size()) * sizeof(Value), "'+'");
      List joined = a.as_list();
      joined.insert(joined.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(joined));
    }
  }
  if (op == "*") {
    const Value* sequence = a.is_string() || a.is_list()   ? &a
                            : b.is_string() || b.is_list() ? &b
                                                           : nullptr;
    const Value& times = sequence == &a ? b : a;
    if (sequence && is_integral(times)) {
      int64_t n = std::max<int64_t>(0, as_integer(times));
      // A list's bytes are its items' (each a Value, whatever it holds).
      size_t unit = sequence->is_string() ? sequence->as_string().size()
                                          : sequence->as_list().size() * sizeof(Value);
      size_t bytes = 0;
      if (__builtin_mul_overflow(static_cast<size_t>(n), unit, &bytes)) bytes = SIZE_MAX;
      check_value_size(bytes, "repetition with '*'");
      if (sequence->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += sequence->as_string();
        return Value(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), sequence->as_list().begin(), sequence->as_list().end());
      return Value(std::move(out));
    }
  }
  if (!is_numeric(a) || !is_numeric(b)) unsupported(op, a, b);
  bool integral = is_integral(a) && is_integral(b);
  double x = is_integral(a) ? static_cast<double>(as_integer(a)) : a.as_number();
  double y = is_integral(b) ? static_cast<double>(as_integer(b)) : b.as_number();
  if (op == "/") {
    if (y == 0) throw BuiltinError("division by zero");
    return Value(x / y);
  }
  if (integral) {
    int64_t i = as_integer(a), j = as_integer(b);
    if (op == "+") return Value(checked_add(i, j, op));
    if (op == "-") return Value(checked_sub(i, j, op));
    if (op == "*") return Value(checked_mul(i, j, op));
    if (op == "//" || op == "%") {
      if (j == 0) throw BuiltinError("integer division or modulo by zero");
      if (j == -1) return Value(op == "//" ? checked_sub(0, i, op) : int64_t{0});
      int64_t q = i / j, r = i % j;
      if (r != 0 && ((r < 0) != (j < 0))) {
        --q;
        r += j;
      }
      return Value(op == "//" ? q : r);
    }
    if (op == "**") return j >= 0 ? Value(integer_power(i, j)) : Value(std::pow(x, y));
  }
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "//") {
    if (y == 0) throw BuiltinError("float floor division by zero");
    return Value(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) throw BuiltinError("float modulo");
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") return Value(std::pow(x, y));
  throw BuiltinError(fmt::format("unknown operator '{}'", op));
}

bool contains(const Value& container, const Value& item) {
  charge_operand(container);
  charge_operand(item);
  if (container.is_string()) {
    if (!item.is_string()) {
      throw BuiltinError(
          fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (v == item) return true;
    }
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
  throw BuiltinError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

List iterate(const Value& value) {
  charge_operand(value);
  if (value.is_list()) return value.as_list();
  if (value.is_dict()) {
    List keys;
    for (const auto& entry : value.as_dict().entries) keys.push_back(Value(entry.first));
    return keys;
  }
  if (value.is_string()) {
    check_value_size(value.as_string().size() * sizeof(Value), "iterating a string");
    charge_work(value.as_string().size() * sizeof(Value));
    List chars;
    for (auto& c : characters(value.as_string())) chars.push_back(Value(std::move(c)));
    return chars;
  }
  throw BuiltinError(fmt::format("'{}' object is not iterable", value.type_name()));
}

Value subscript(const Value& object, const Value& index) {
  if (object.is_dict()) {
    if (!index.is_string())
      return Value::undefined(fmt::format("dict has no key {}", index.repr()));
    const Value* found = object.as_dict().find(index.as_string());
    return found ? *found : Value::undefined(fmt::format("dict has no key {}", index.repr()));
  }
  if (object.is_list() || object.is_string()) {
    if (!is_integral(index)) {
      throw BuiltinError(fmt::format("{} indices must be integers, not {}", object.type_name(),
                                     index.type_name()));
    }
    int64_t i = as_integer(index);
    if (object.is_list()) {
      const List& list = object.as_list();
      int64_t n = static_cast<int64_t>(list.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return list[static_cast<size_t>(i)];
    }
    auto chars = characters(object.as_string());
    int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value(chars[static_cast<size_t>(i)]);
  }
  throw BuiltinError(fmt::format("'{}' object is not subscriptable", object.type_name()));
}

Value slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!is_integral(*v)) throw BuiltinError("slice indices must be integers or none");
    return as_integer(*v);
  };
  int64_t s = bound(step).value_or(1);
  if (s == 0) throw BuiltinError("slice step cannot be zero");
  List items;
  std::vector<std::string> chars;
  int64_t n;
  if (object.is_list()) {
    n = static_cast<int64_t>(object.as_list().size());
  } else if (object.is_string()) {
    chars = characters(object.as_string());
    n = static_cast<int64_t>(chars.size());
  } else {
    throw BuiltinError(fmt::format("'{}' object is not subscriptable", object.type_name()));
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t begin = clamp(bound(start), s > 0 ? 0 : n - 1);
  int64_t end = clamp(bound(stop), s > 0 ? n : -1);
  std::string text;
  // Stop before the step would pass the end: `i += s` may not overflow (s can be near 2^63).
  for (int64_t i = begin; s > 0 ? i < end : i > end;) {
    if (object.is_list()) {
      items.push_back(object.as_list()[static_cast<size_t>(i)]);
    } else {
      text += chars[static_cast<size_t>(i)];
    }
    if (s > 0 ? end - i <= s : end - i >= s) break;
    i += s;
  }
  return object.is_list() ? Value(std::move(items)) : Value(std::move(text));
}

bool call_method(const Value& object, std::string_view name, const Arguments& args, Value& result) {
  charge_operands(object, args);
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "startswith" || name == "endswith") {
      const Value* affix = args.get("prefix", 0);
      if (!affix) throw BuiltinError(fmt::format("{}() takes one argument", name));
      result = Value(affix_matches(s, *affix, name == "startswith"));
    } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
      result = Value(strip(s, args.get("chars", 0), name != "rstrip", name != "lstrip"));
    } else if (name == "split") {
      result = Value(split(s, args.get("sep", 0), int_argument(args, "maxsplit", 1, -1)));
    } else if (name == "replace") {
      result = Value(replace_all(s, string_argument(args, "old", 0, name),
                                 string_argument(args, "new", 1, name),
                                 int_argument(args, "count", 2, -1)));
    } else if (name == "upper") {
      result = Value(unicode::to_upper(s));
    } else if (name == "lower") {
      result = Value(unicode::to_lower(s));
    } else if (name == "capitalize") {
      result = Value(capitalize(s));
    } else if (name == "title") {
      result = Value(title_case(s));
    } else if (name == "find") {
      size_t pos = s.find(string_argument(args, "sub", 0, name));
      result = Value(pos == std::string::npos
                         ? int64_t{-1}
                         : static_cast<int64_t>(characters(s.substr(0, pos)).size()));
    } else if (name == "count") {
      const std::string& sub = string_argument(args, "sub", 0, name);
      int64_t n = 0;
      for (size_t pos = s.find(sub); !sub.empty() && pos != std::string::npos;
           pos = s.find(sub, pos + sub.size()))
        ++n;
      result = Value(n);
    } else if (name == "join") {
      const Value* items = args.get("iterable", 0);
      if (!items) throw BuiltinError("join() takes one argument");
      std::string out;
      List list = iterate(*items);
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += s;
        if (!list[i].is_string()) throw BuiltinError("join(): sequence items must be strings");
        out += list[i].as_string();
        check_value_size(out.size(), "join()");
      }
      result = Value(std::move(out));
    } else if (name == "splitlines") {
      List lines;
      size_t last = 0, pos;
      while ((pos = s.find('\n', last)) != std::string::npos) {
        lines.push_back(Value(s.substr(last, pos - last)));
        last = pos + 1;
      }
      if (last < s.size()) lines.push_back(Value(s.substr(last)));
      result = Value(std::move(lines));
    } else if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
      bool all = !s.empty();
      size_t pos = 0;
      while (all && pos < s.size()) {
        char32_t c = unicode::next_code_point(s, pos);
        if (name == "isdigit") all = unicode::is_numeric(c);
        if (name == "isalpha") all = unicode::is_alphanumeric(c) && !unicode::is_numeric(c);
        if (name == "isspace") all = unicode::is_whitespace(c);
        if (name == "isalnum") all = unicode::is_alphanumeric(c);
      }
      result = Value(all);
    } else {
      return false;
    }
    return true;
  }
  if (object.is_dict()) {
    const Dict& dict = object.as_dict();
    if (name == "items") {
      List items;
      for (const auto& [k, v] : dict.entries) items.push_back(Value(List{Value(k), v}));
      result = Value(std::move(items));
    } else if (name == "keys") {
      List keys;
      for (const auto& entry : dict.entries) keys.push_back(Value(entry.first));
      result = Value(std::move(keys));
    } else if (name == "values") {
      List values;
      for (const auto& entry : dict.entries) values.push_back(entry.second);
      result = Value(std::move(values));
    } else if (name == "get") {
      const Value* key = args.get("key", 0);
      const Value* fallback = args.get("default", 1);
      const Value* found = key && key->is_string() ? dict.find(key->as_string()) : nullptr;
      result = found ? *found : fallback ? *fallback : Value(None{});
    } else {
      return false;
    }
    return true;
  }
  if (object.is_list()) {
    const List& list = object.as_list();
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
        name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
      // transformers renders chat templates in jinja2's ImmutableSandboxedEnvironment, which
      // refuses methods that change a list; so does prism (namespace() holds changing state).
      throw BuiltinError(fmt::format("access to attribute '{}' of 'list' object is unsafe", name));
    } else if (name == "index") {
      const Value* item = args.get("value", 0);
      for (size_t i = 0; item && i < list.size(); ++i) {
        if (list[i] == *item) {
          result = Value(i);
          return true;
        }
      }
      throw BuiltinError("list.index(x): x not in list");
    } else if (name == "count") {
      const Value* item = args.get("value", 0);
      int64_t n = 0;
      for (const Value& v : list) n += item && v == *item;
      result = Value(n);
    } else {
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace prism::llm::jinja
