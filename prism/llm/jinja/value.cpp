#include "prism/llm/jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "prism/core/error.h"
#include "prism/llm/jinja/builtins.h"

namespace prism::llm::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* Arguments::get(std::string_view name, size_t index) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::undefined(std::string description, int line, int column, bool prints_empty) {
  Value v;
  v.storage_ = Undefined{std::make_shared<UndefinedOrigin>(
      UndefinedOrigin{std::move(description), line, column, prints_empty})};
  return v;
}

const UndefinedOrigin* Value::undefined_origin() const {
  return is_undefined() ? std::get<Undefined>(storage_).origin.get() : nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(from_json(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.entries.emplace_back(key, from_json(item));
      return Value(std::move(dict));
    }
    default:
      return Value();
  }
}

bool Value::truthy() const {
  return std::visit(
      [](const auto& v) -> bool {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>)
          return false;
        else if constexpr (std::is_same_v<T, bool>)
          return v;
        else if constexpr (std::is_same_v<T, int64_t>)
          return v != 0;
        else if constexpr (std::is_same_v<T, double>)
          return v != 0.0;
        else if constexpr (std::is_same_v<T, std::string>)
          return !v.empty();
        else if constexpr (std::is_same_v<T, std::shared_ptr<List>>)
          return !v->empty();
        else if constexpr (std::is_same_v<T, std::shared_ptr<Dict>>)
          return !v->entries.empty();
        else
          return true;
      },
      storage_);
}

namespace {

// Python's repr() of a float: the shortest text that reads back the same, always with a point
// or an exponent.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", d);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string string_repr(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) out += '\\';
        out += c;
    }
  }
  out += quote;
  return out;
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Appends an integer's digits without allocating: a list's text may hold a million of them.
void append_int(std::string& out, int64_t n) {
  char digits[24];
  out.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
}

// Appends `v`'s JSON to `out`, or as much of it as fits `limit` bytes: false where it stopped
// there (as append_repr: a few characters of template make a list of millions of items, and
// an indent repeats once per level on every line). Throws BuiltinError past `items` items of
// lists and dicts.
bool append_json(std::string& out, const Value& v, int indent, int depth, size_t limit,
                 int64_t& items) {
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(std::min(static_cast<size_t>(indent) * static_cast<size_t>(level),
                        limit + 1 - std::min(limit + 1, out.size())),
               ' ');
  };
  const char* item_separator = indent < 0 ? ", " : ",";
  if (v.is_none() || v.is_undefined()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    append_int(out, v.as_int());
  } else if (v.is_float()) {
    double d = v.as_number();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : float_repr(d);
  } else if (v.is_string()) {
    append_json_string(out, v.as_string());
  } else if (v.is_list() || v.is_dict()) {
    const bool list = v.is_list();
    const size_t n = list ? v.as_list().size() : v.as_dict().entries.size();
    if (n == 0) {
      out += list ? "[]" : "{}";
      return out.size() <= limit;
    }
    out += list ? '[' : '{';
    for (size_t i = 0; i < n; ++i) {
      if (--items < 0) {
        throw BuiltinError(
            fmt::format("a value whose JSON holds more than the sandbox's limit of {} items",
                        limits::kPrintedItems));
      }
      if (i) out += item_separator;
      newline(depth + 1);
      if (list) {
        if (!append_json(out, v.as_list()[i], indent, depth + 1, limit, items)) return false;
      } else {
        append_json_string(out, v.as_dict().entries[i].first);
        out += ": ";
        if (!append_json(out, v.as_dict().entries[i].second, indent, depth + 1, limit, items))
          return false;
      }
      if (out.size() > limit) return false;
    }
    newline(depth);
    out += list ? ']' : '}';
  } else {
    out += "null";
  }
  return out.size() <= limit;
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

namespace {

// Appends `v`'s repr to `out`, or as much of it as fits `limit` bytes: false where it stopped
// there (a list of a million lists of a million numbers is a template's few characters).
// Throws BuiltinError past `items` items of lists and dicts.
bool append_repr(const Value& v, std::string& out, size_t limit, int64_t& items) {
  if (v.is_list() || v.is_dict()) {
    const bool list = v.is_list();
    out += list ? "[" : "{";
    const size_t n = list ? v.as_list().size() : v.as_dict().entries.size();
    for (size_t i = 0; i < n; ++i) {
      if (--items < 0) {
        throw BuiltinError(
            fmt::format("a value whose text holds more than the sandbox's limit of "
                        "{} items",
                        limits::kPrintedItems));
      }
      if (i) out += ", ";
      if (list) {
        if (!append_repr(v.as_list()[i], out, limit, items)) return false;
      } else {
        const auto& [key, value] = v.as_dict().entries[i];
        out += string_repr(key) + ": ";
        if (!append_repr(value, out, limit, items)) return false;
      }
      if (out.size() > limit) return false;
    }
    out += list ? "]" : "}";
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else if (v.is_none()) {
    out += "None";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "True" : "False";
  } else if (v.is_int()) {
    append_int(out, v.as_int());
  } else if (v.is_float()) {
    out += float_repr(v.as_number());
  } else if (v.is_string()) {
    out += string_repr(v.as_string());
  } else {
    out += "<function>";
  }
  return out.size() <= limit;
}

}  // namespace

std::string Value::repr() const {
  std::string out;
  int64_t items = limits::kPrintedItems;
  if (!append_repr(*this, out, limits::kValueBytes, items)) {
    throw BuiltinError(fmt::format("a {} whose text is longer than the sandbox's limit of {} bytes",
                                   type_name(), limits::kValueBytes));
  }
  return out;
}

void Value::wrong_type(const char* want) const {
  std::string shown;
  int64_t items = 60;  // each item takes at least a byte: the bytes' limit ends it first
  append_repr(*this, shown, 60, items);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  fail("template error: expected {}, got {} {}", want, type_name(), shown);
}

std::string Value::type_name() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return as_dict().is_namespace ? "namespace" : "dict";
  return "function";
}

std::string Value::to_json(int indent) const {
  std::string out;
  int64_t items = limits::kPrintedItems;
  if (!append_json(out, *this, indent, 0, limits::kValueBytes, items)) {
    throw BuiltinError(fmt::format("a {} whose JSON is longer than the sandbox's limit of {} bytes",
                                   type_name(), limits::kValueBytes));
  }
  return out;
}

bool operator==(const Value& a, const Value& b) {
  charge_work(sizeof(Value));
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  // Python: True == 1 and False == 0.
  if (a.is_bool() && b.is_number()) return Value(static_cast<int64_t>(a.as_bool())) == b;
  if (b.is_bool() && a.is_number()) return a == Value(static_cast<int64_t>(b.as_bool()));
  if (a.storage_.index() != b.storage_.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_bool()) return a.as_bool() == b.as_bool();
  if (a.is_string()) {
    charge_work(std::min(a.as_string().size(), b.as_string().size()));
    return a.as_string() == b.as_string();
  }
  if (a.is_list()) return a.as_list() == b.as_list();
  if (a.is_dict()) {
    const Dict &x = a.as_dict(), &y = b.as_dict();
    if (x.entries.size() != y.entries.size()) return false;
    for (const auto& [key, value] : x.entries) {
      const Value* other = y.find(key);
      if (!other || !(*other == value)) return false;
    }
    return true;
  }
  return &a.as_function() == &b.as_function();
}

}  // namespace prism::llm::jinja
