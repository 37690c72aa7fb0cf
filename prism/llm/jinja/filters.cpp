// Filters, tests and global functions of the Jinja interpreter.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <vector>

#include "prism/llm/jinja/builtins.h"
#include "prism/llm/unicode.h"

namespace prism::llm::jinja {

namespace {

const Value* argument(const Arguments& args, std::string_view name, size_t index) {
  return args.get(name, index);
}

std::string string_of(const Value* v, std::string_view fallback = "") {
  return v ? v->str() : std::string(fallback);
}

bool bool_of(const Value* v, bool fallback) { return v ? v->truthy() : fallback; }

// Follows a dotted attribute path ("function.name") through dicts; undefined when missing.
Value attribute_of(const Value& item, const std::string& path) {
  Value current = item;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t dot = path.find('.', begin);
    std::string key =
        path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (current.is_dict()) {
      const Value* found = current.as_dict().find(key);
      current = found ? *found : Value::undefined(fmt::format("no attribute '{}'", key));
    } else if (int64_t index = 0;
               current.is_list() && !key.empty() &&
               std::all_of(key.begin(), key.end(), ::isdigit) &&
               std::from_chars(key.data(), key.data() + key.size(), index).ec == std::errc()) {
      current = subscript(current, Value(index));
    } else {
      return Value::undefined(fmt::format("no attribute '{}'", key));
    }
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return current;
}

// Arguments after the first `skip` positional ones, for a test or filter named by the caller.
Arguments rest(const Arguments& args, size_t skip) {
  Arguments out;
  for (size_t i = skip; i < args.positional.size(); ++i)
    out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

List select_items(const Value& value, const Arguments& args, bool by_attribute, bool keep) {
  List out;
  const Value* attribute_name = by_attribute ? argument(args, "attribute", 0) : nullptr;
  if (by_attribute && !attribute_name)
    throw BuiltinError("selectattr/rejectattr need an attribute name");
  size_t test_index = by_attribute ? 1 : 0;
  const Value* test = args.positional.size() > test_index ? &args.positional[test_index] : nullptr;
  Arguments test_args = rest(args, test_index + 1);
  for (const Value& item : iterate(value)) {
    Value subject = by_attribute ? attribute_of(item, attribute_name->str()) : item;
    bool passed = test ? apply_test(test->str(), subject, test_args) : subject.truthy();
    if (passed == keep) out.push_back(item);
  }
  return out;
}

std::string indent(const std::string& text, const Value* width, bool first, bool blank) {
  int64_t spaces = width && !width->is_string() ? width->as_int() : 4;
  if (spaces < 0) spaces = 0;  // Python's " " * -1 is ""
  check_value_size(static_cast<size_t>(std::min<int64_t>(spaces, INT64_MAX / 2)), "indent");
  std::string pad = width && width->is_string() ? width->as_string()
                                                : std::string(static_cast<size_t>(spaces), ' ');
  std::string out;
  size_t line_start = 0;
  bool first_line = true;
  while (line_start <= text.size()) {
    size_t newline = text.find('\n', line_start);
    std::string line = text.substr(
        line_start, newline == std::string::npos ? std::string::npos : newline - line_start);
    bool is_blank = line.find_first_not_of(" \t\r") == std::string::npos;
    if ((first_line ? first : true) && (blank || !is_blank)) out += pad;
    out += line;
    check_value_size(out.size(), "indent");
    if (newline == std::string::npos) break;
    out += '\n';
    line_start = newline + 1;
    first_line = false;
  }
  return out;
}

// Python's round(x, digits) of a float: to nearest, ties to even, on the exact binary value
// (which printf's fixed notation rounds the same way), so round(2.5) is 2.0, round(2.675, 2) 2.67.
double python_round(double x, int64_t digits) {
  if (!std::isfinite(x) || digits > 400) return x;
  if (digits < 0) {
    double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  int precision = static_cast<int>(digits);
  std::vector<char> text(std::snprintf(nullptr, 0, "%.*f", precision, x) + 1);
  std::snprintf(text.data(), text.size(), "%.*f", precision, x);
  return std::strtod(text.data(), nullptr);
}

Value round_value(const Value& value, const Arguments& args) {
  int64_t precision = 0;
  if (const Value* p = argument(args, "precision", 0)) precision = p->as_int();
  std::string method = string_of(argument(args, "method", 1), "common");
  if (method == "common") {
    // Python's round() leaves an integer an integer.
    return value.is_int() && precision >= 0 ? value
                                            : Value(python_round(value.as_number(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = value.as_number() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

// The key Jinja2's sort, unique, dictsort, min and max compare by: strings lower-cased unless
// `case_sensitive` is true.
Value comparison_key(const Value& value, bool case_sensitive) {
  if (case_sensitive || !value.is_string()) return value;
  return Value(unicode::to_lower(value.as_string()));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

Value apply_filter(std::string_view name, const Value& value, const Arguments& args) {
  charge_operands(value, args);
  if (name == "default" || name == "d") {
    bool boolean = bool_of(argument(args, "boolean", 1), false);
    bool use_fallback = value.is_undefined() || (boolean && !value.truthy());
    if (!use_fallback) return value;
    const Value* fallback = argument(args, "default_value", 0);
    return fallback ? *fallback : Value(std::string());
  }
  if (name == "trim") {
    Value result;
    call_method(value.is_string() ? value : Value(value.str()), "strip", rest(args, 0), result);
    return result;
  }
  if (name == "tojson") {
    const Value* indent_width = argument(args, "indent", 0);
    int64_t width = indent_width && !indent_width->is_none() ? indent_width->as_int() : -1;
    if (width > limits::kJsonIndent) {
      throw BuiltinError(fmt::format("tojson(indent={}) is past the sandbox's limit of {}", width,
                                     limits::kJsonIndent));
    }
    std::string json = value.to_json(static_cast<int>(std::max<int64_t>(width, -1)));
    check_value_size(json.size(), "tojson");
    return Value(std::move(json));
  }
  if (name == "length" || name == "count") {
    if (value.is_string()) {
      size_t n = 0;
      for (char c : value.as_string()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      return Value(n);
    }
    if (value.is_list()) return Value(value.as_list().size());
    if (value.is_dict()) return Value(value.as_dict().entries.size());
    throw BuiltinError(fmt::format("object of type '{}' has no len()", value.type_name()));
  }
  if (name == "upper") return Value(unicode::to_upper(value.str()));
  if (name == "lower") return Value(unicode::to_lower(value.str()));
  if (name == "capitalize") return Value(capitalize(value.str()));
  if (name == "title") return Value(title_filter(value.str()));
  if (name == "string") return Value(value.str());
  if (name == "safe") return value;
  if (name == "list") return value.is_list() ? value : Value(iterate(value));
  if (name == "escape" || name == "e") return Value(html_escape(value.str()));
  if (name == "items") {
    if (!value.is_dict())
      throw BuiltinError(fmt::format("items: expected a dict, got {}", value.type_name()));
    Value result;
    call_method(value, "items", Arguments{}, result);
    return result;
  }
  if (name == "join") {
    std::string separator = string_of(argument(args, "d", 0));
    const Value* attribute = argument(args, "attribute", 1);
    std::string out;
    List items = iterate(value);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += separator;
      out += (attribute ? attribute_of(items[i], attribute->str()) : items[i]).str();
      check_value_size(out.size(), "join");
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    Value result;
    call_method(Value(value.str()), "replace", args, result);
    return result;
  }
  if (name == "first" || name == "last") {
    List items = iterate(value);
    if (items.empty()) return Value::undefined(fmt::format("{}: the sequence is empty", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (value.is_string()) {
      Value step(int64_t{-1});
      return slice(value, nullptr, nullptr, &step);
    }
    List items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "selectattr") return Value(select_items(value, args, true, true));
  if (name == "rejectattr") return Value(select_items(value, args, true, false));
  if (name == "select") return Value(select_items(value, args, false, true));
  if (name == "reject") return Value(select_items(value, args, false, false));
  if (name == "map") {
    List out;
    const Value* attribute = argument(args, "attribute", 999);
    for (const Value& item : iterate(value)) {
      if (attribute) {
        Value mapped = attribute_of(item, attribute->str());
        if (mapped.is_undefined()) {
          const Value* fallback = argument(args, "default", 999);
          mapped = fallback ? *fallback : mapped;
        }
        out.push_back(std::move(mapped));
      } else {
        if (args.positional.empty()) throw BuiltinError("map needs a filter name or attribute=");
        out.push_back(apply_filter(args.positional[0].str(), item, rest(args, 1)));
      }
    }
    return Value(std::move(out));
  }
  if (name == "int") {
    const Value* fallback = argument(args, "default", 0);
    if (value.is_int()) return value;
    if (value.is_bool()) return Value(static_cast<int64_t>(value.as_bool()));
    // A float in int64's range, truncated (inf, NaN and larger magnitudes have no int64).
    auto truncated = [](double d) -> std::optional<int64_t> {
      if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) return std::nullopt;
      return static_cast<int64_t>(d);
    };
    std::optional<int64_t> result;
    if (value.is_float()) result = truncated(value.as_number());
    if (value.is_string()) {
      try {
        size_t used = 0;
        std::string s = value.as_string();
        int64_t parsed = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(parsed);
        result = truncated(std::stod(s));
      } catch (const std::exception&) {  // not a number, or out of range
      }
    }
    if (result) return Value(*result);
    return fallback ? *fallback : Value(int64_t{0});
  }
  if (name == "float") {
    if (value.is_number()) return Value(value.as_number());
    if (value.is_string()) {
      try {
        return Value(std::stod(value.as_string()));
      } catch (const std::exception&) {
      }
    }
    const Value* fallback = argument(args, "default", 0);
    return fallback ? *fallback : Value(0.0);
  }
  if (name == "abs") {
    if (value.is_int()) {
      if (value.as_int() == INT64_MIN) integer_overflow("abs");
      return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    }
    return Value(std::fabs(value.as_number()));
  }
  if (name == "round") return round_value(value, args);
  if (name == "indent") {
    return Value(indent(value.str(), argument(args, "width", 0),
                        bool_of(argument(args, "first", 1), false),
                        bool_of(argument(args, "blank", 2), false)));
  }
  if (name == "unique") {
    bool case_sensitive = bool_of(argument(args, "case_sensitive", 0), false);
    const Value* attribute = argument(args, "attribute", 1);
    List out, seen;
    for (const Value& item : iterate(value)) {
      Value key =
          comparison_key(attribute ? attribute_of(item, attribute->str()) : item, case_sensitive);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(std::move(key));
      out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "sort") {
    List items = iterate(value);
    bool reverse = bool_of(argument(args, "reverse", 0), false);
    bool case_sensitive = bool_of(argument(args, "case_sensitive", 1), false);
    const Value* attribute = argument(args, "attribute", 2);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value x =
          comparison_key(attribute ? attribute_of(a, attribute->str()) : a, case_sensitive);
      const Value y =
          comparison_key(attribute ? attribute_of(b, attribute->str()) : b, case_sensitive);
      return binary_operation(reverse ? ">" : "<", x, y).as_bool();
    });
    return Value(std::move(items));
  }
  if (name == "dictsort") {
    if (!value.is_dict()) throw BuiltinError("dictsort: expected a dict");
    bool case_sensitive = bool_of(argument(args, "case_sensitive", 0), false);
    Value result;
    call_method(value, "items", Arguments{}, result);
    List items = result.as_list();
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return binary_operation("<", comparison_key(a.as_list()[0], case_sensitive),
                              comparison_key(b.as_list()[0], case_sensitive))
          .as_bool();
    });
    return Value(std::move(items));
  }
  if (name == "sum" || name == "min" || name == "max") {
    List items = iterate(value);
    if (name == "sum") {
      Value total = argument(args, "start", 1) ? *argument(args, "start", 1) : Value(int64_t{0});
      // As Python's sum(): strings are joined, not summed (each '+' would copy the total).
      if (total.is_string()) throw BuiltinError("sum() can't sum strings, use join instead");
      for (const Value& item : items) total = binary_operation("+", total, item);
      return total;
    }
    if (items.empty()) return Value::undefined(fmt::format("{}: the sequence is empty", name));
    bool case_sensitive = bool_of(argument(args, "case_sensitive", 0), false);
    const Value* attribute = argument(args, "attribute", 1);
    auto key = [&](const Value& item) {
      return comparison_key(attribute ? attribute_of(item, attribute->str()) : item,
                            case_sensitive);
    };
    Value best = items[0];
    for (const Value& item : items) {
      if (binary_operation(name == "min" ? "<" : ">", key(item), key(best)).as_bool()) best = item;
    }
    return best;
  }
  throw BuiltinError(fmt::format("unknown filter '{}'", name));
}

bool apply_test(std::string_view name, const Value& value, const Arguments& args) {
  charge_operands(value, args);
  const Value* other = argument(args, "value", 0);
  auto need_other = [&]() -> const Value& {
    if (!other) throw BuiltinError(fmt::format("test '{}' needs an argument", name));
    return *other;
  };
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") return value.is_list() || value.is_dict() || value.is_string();
  if (name == "sequence") return value.is_list() || value.is_dict() || value.is_string();
  if (name == "number") return value.is_number() || value.is_bool();  // Python's bool is a number
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "callable") return value.is_function();
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return value == need_other();
  if (name == "ne" || name == "!=") return !(value == need_other());
  if (name == "lt" || name == "lessthan" || name == "<")
    return binary_operation("<", value, need_other()).as_bool();
  if (name == "gt" || name == "greaterthan" || name == ">")
    return binary_operation(">", value, need_other()).as_bool();
  if (name == "le" || name == "<=") return binary_operation("<=", value, need_other()).as_bool();
  if (name == "ge" || name == ">=") return binary_operation(">=", value, need_other()).as_bool();
  if (name == "in") return contains(need_other(), value);
  if (name == "odd" || name == "even") {
    if (!value.is_int()) throw BuiltinError(fmt::format("test '{}' needs an integer", name));
    return (value.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    int64_t d = need_other().as_int();
    return d != 0 && value.is_int() && value.as_int() % d == 0;
  }
  if (name == "lower")
    return value.is_string() && unicode::to_lower(value.as_string()) == value.as_string();
  if (name == "upper")
    return value.is_string() && unicode::to_upper(value.as_string()) == value.as_string();
  throw BuiltinError(fmt::format("unknown test '{}'", name));
}

void add_global_functions(Dict& globals) {
  globals.set(
      "range", Value(Function([](const Arguments& args) -> Value {
        std::vector<int64_t> bounds;
        for (const Value& v : args.positional) {
          if (!v.is_int()) throw BuiltinError("range() takes integers");
          bounds.push_back(v.as_int());
        }
        int64_t start = 0, stop = 0, step = 1;
        if (bounds.size() == 1) {
          stop = bounds[0];
        } else if (bounds.size() == 2 || bounds.size() == 3) {
          start = bounds[0];
          stop = bounds[1];
          if (bounds.size() == 3) step = bounds[2];
        } else {
          throw BuiltinError("range() takes 1 to 3 arguments");
        }
        if (step == 0) throw BuiltinError("range() step must not be zero");
        // The length in 128 bits: start, stop and step may be anywhere in int64.
        __int128 span = static_cast<__int128>(stop) - start;
        __int128 length = 0;
        if (step > 0 && span > 0) length = (span + step - 1) / step;
        if (step < 0 && span < 0)
          length = (-span + (-static_cast<__int128>(step)) - 1) / (-static_cast<__int128>(step));
        if (length > limits::kRange) {
          throw BuiltinError(fmt::format(
              "range() of {} items is past the sandbox's limit of {}",
              static_cast<long long>(std::min<__int128>(length, INT64_MAX)), limits::kRange));
        }
        List out;
        out.reserve(static_cast<size_t>(length));
        for (__int128 k = 0; k < length; ++k) {
          out.push_back(Value(static_cast<int64_t>(start + k * step)));
        }
        return Value(std::move(out));
      })));
  globals.set("namespace", Value(Function([](const Arguments& args) -> Value {
                Dict ns;
                ns.is_namespace = true;
                for (const Value& v : args.positional) {
                  if (v.is_dict()) {
                    for (const auto& [k, x] : v.as_dict().entries) ns.set(k, x);
                  }
                }
                for (const auto& [k, v] : args.keyword) ns.set(k, v);
                return Value(std::move(ns));
              })));
  globals.set("dict", Value(Function([](const Arguments& args) -> Value {
                Dict d;
                for (const auto& [k, v] : args.keyword) d.set(k, v);
                return Value(std::move(d));
              })));
  globals.set(
      "raise_exception", Value(Function([](const Arguments& args) -> Value {
        throw BuiltinError(fmt::format("raise_exception: {}",
                                       args.positional.empty() ? "" : args.positional[0].str()));
      })));
  globals.set("strftime_now", Value(Function([](const Arguments& args) -> Value {
                if (args.positional.empty() || !args.positional[0].is_string()) {
                  throw BuiltinError("strftime_now() takes a format string");
                }
                std::time_t now = std::time(nullptr);
                std::tm local{};
                localtime_r(&now, &local);
                char buffer[256];
                size_t n = std::strftime(buffer, sizeof(buffer),
                                         args.positional[0].as_string().c_str(), &local);
                return Value(std::string(buffer, n));
              })));
}

}  // namespace prism::llm::jinja
