#include "prism/llm/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "prism/core/error.h"

namespace prism::llm {

namespace {

using Json = nlohmann::ordered_json;
using Kind = JsonSchema::Node::Kind;

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Where a frame is, per kind of node.
enum Phase : uint8_t {
  // object and map: before '{', after it (a key or '}'), after ',' (a key), in a key's text
  // (object: property y, its byte z next), before ':', before the value, after the value.
  o_start = 0,
  o_first,
  o_key,
  o_key_text,
  o_colon,
  o_value,
  o_after,
  // array: before '[', after it (an item or ']'), after ',' (an item), after an item.
  a_start = 0,
  a_first,
  a_next,
  a_after,
  // string: before '"', in its text, after a backslash, in \uXXXX.
  s_start = 0,
  s_text,
  s_escape,
  s_hex,
  // number: before it, then where in it (after '-', after a leading 0, in the integer digits,
  // after '.', in the fraction, after 'e', after the exponent's sign, in the exponent).
  n_start = 0,
  n_minus,
  n_zero,
  n_integer,
  n_dot,
  n_fraction,
  n_e,
  n_e_sign,
  n_exponent,
};

bool number_may_end(uint8_t phase) {
  return phase == n_zero || phase == n_integer || phase == n_fraction || phase == n_exponent;
}

bool bounded(const JsonSchema::Node& n) {
  return n.integer && (n.low != INT64_MIN || n.high != INT64_MAX);
}

// An integer's digits so far (`magnitude`, `negative` or not): whether some value in
// [low, high] starts with them, with at most `more` digits after them (none after a leading
// 0), or (more < 0) whether they are one as they stand.
bool integer_reachable(const JsonSchema::Node& n, bool negative, uint64_t magnitude, int more) {
  using Wide = __int128;
  Wide scale = 1;
  for (int k = 0; k <= std::max(more, 0); ++k) {
    Wide a = Wide(magnitude) * scale, b = a + scale - 1;
    if (negative) std::tie(a, b) = std::pair(-b, -a);
    if (a <= n.high && b >= n.low) return true;
    if (more < 0 || magnitude == 0 || a > Wide(UINT64_MAX) * 10 || -a > Wide(UINT64_MAX) * 10) {
      break;
    }
    scale *= 10;
  }
  return false;
}

// A number with bounds (not an integer) is written without an exponent, in at most
// kSignificant significant digits: decimals that short compare with the bounds (doubles
// written in their shortest form) as doubles do, so a text the grammar takes is within the
// bounds for any validator.
constexpr int kSignificant = 15;

bool decimal_bounded(const JsonSchema::Node& n) {
  return !n.integer && (n.below.present || n.above.present);
}

using Wide = __int128;
constexpr Wide kHuge = Wide(1000000000000000000) * 1000000000000;  // 1e30, past any J below

Wide power_of_ten(int e) {  // 10^e, clamped at kHuge
  Wide p = 1;
  for (int i = 0; i < e && p < kHuge; ++i) p *= 10;
  return std::min(p, kHuge);
}

// The smallest integer j with j >= b * 10^f (j > where `open`), clamped to +-kHuge.
Wide ceil_scaled(const JsonSchema::Node::Bound& b, int f, bool negative, bool open) {
  const int e = b.e + f;
  Wide q = 0;
  bool exact = true;
  if (b.k == 0) {
    q = 0;
  } else if (e >= 0) {
    const Wide p = power_of_ten(e);
    q = p >= kHuge || Wide(b.k) >= kHuge / p ? kHuge : Wide(b.k) * p;
  } else if (-e > 30) {
    exact = b.k == 0;
  } else {
    const Wide d = power_of_ten(-e);
    q = Wide(b.k) / d;
    exact = Wide(b.k) % d == 0;
  }
  // The value is +-(q + a fraction, none where exact).
  if (!negative) return q + (!exact || open ? 1 : 0);
  return -q + (exact && open ? 1 : 0);
}

// The largest integer j with j <= b * 10^f (j < where `open`).
Wide floor_scaled(const JsonSchema::Node::Bound& b, int f, bool negative, bool open) {
  return -ceil_scaled(b, f, !negative, open);
}

// Whether some value +-J / 10^f, J in [first, last], is within the number's bounds.
bool grid_within(const JsonSchema::Node& n, bool negative, Wide first, Wide last, int f) {
  Wide low = first, high = last;
  const JsonSchema::Node::Bound &below = n.below, &above = n.above;
  if (!negative) {  // J / 10^f >= below, <= above
    if (below.present) low = std::max(low, ceil_scaled(below, f, below.negative, below.open));
    if (above.present) high = std::min(high, floor_scaled(above, f, above.negative, above.open));
  } else {  // -J / 10^f >= below: J <= -below; <= above: J >= -above
    if (below.present) high = std::min(high, floor_scaled(below, f, !below.negative, below.open));
    if (above.present) low = std::max(low, ceil_scaled(above, f, !above.negative, above.open));
  }
  return low <= high;
}

int digits_of(uint64_t v) {
  int d = 0;
  for (; v > 0; v /= 10) ++d;
  return d;
}

// Whether a bounded number whose fraction so far is `fraction` zeros (after "0."), with `bytes`
// left, can still reach its bounds with a first nonzero digit z zeros on and up to
// kSignificant digits from it (zeros before it are not significant).
bool zeros_reachable(const JsonSchema::Node& n, bool negative, int fraction, int bytes) {
  for (int z = 0; z < bytes; ++z) {
    const int k = std::min(bytes - z, kSignificant);
    if (grid_within(n, negative, power_of_ten(k - 1), power_of_ten(k) - 1, fraction + z + k)) {
      return true;
    }
  }
  return false;
}

// Whether a bounded number whose text so far is at `phase` (its digits' value `value`, `fraction`
// of them after the point, `length` bytes) can still become, or (`now`) is, a value within
// its bounds.
bool decimal_reachable(const JsonSchema::Node& n, uint8_t phase, bool negative, uint64_t value,
                       int fraction, uint32_t length, bool now) {
  if (now) return grid_within(n, negative, Wide(value), Wide(value), fraction);
  const int bytes = static_cast<int>(JsonSchema::kMaxNumber) - static_cast<int>(length);
  const int significant = kSignificant - digits_of(value);
  const int more = std::min(bytes, significant);  // digits that may still come
  switch (phase) {
    case n_start:
    case n_minus:  // the first digit still to come: 0 (then a fraction) or another
      for (uint64_t d = 0; d <= 9; ++d) {
        if (decimal_reachable(n, d == 0 ? n_zero : n_integer, negative, d, 0, length + 1, false)) {
          return true;
        }
      }
      return false;
    case n_zero:  // "0": 0 itself, or a fraction after a point
      return grid_within(n, negative, 0, 0, 0) ||
             (bytes >= 2 && zeros_reachable(n, negative, 0, bytes - 1));
    case n_integer:
      // m more integer digits, then as many fraction digits as fit (all significant).
      for (int m = 0; m <= more; ++m) {
        const int f = std::max(std::min(bytes - m - 1, significant - m), 0);
        const Wide scale = power_of_ten(m + f);
        if (grid_within(n, negative, Wide(value) * scale, Wide(value + 1) * scale - 1, f)) {
          return true;
        }
      }
      return false;
    case n_dot:
    case n_fraction: {
      if (value == 0) {  // only zeros after "0." so far: 0 itself, or a first digit further on
        const bool zero = phase == n_fraction || bytes >= 1;
        return (zero && grid_within(n, negative, 0, 0, fraction + (phase == n_dot))) ||
               zeros_reachable(n, negative, fraction, bytes);
      }
      const int k = std::max(more, 0);
      if (phase == n_dot && k == 0) return false;  // a digit must come
      const Wide scale = power_of_ten(k);
      return grid_within(n, negative, Wide(value) * scale, Wide(value + 1) * scale - 1,
                         fraction + k);
    }
    default:
      return false;
  }
}

// The pattern a string of a `format` is held to, for the formats whose texts a pattern says
// exactly as validators check them (RFC 3339's date, time and date-time, days within their
// months and February 29 in leap years alone, hours to 23 and seconds to 59; UUIDs; IPv4
// addresses; e-mail addresses as local@domain in plain ASCII); empty for another (an
// annotation, as JSON Schema has formats by default).
std::string format_pattern(std::string_view format) {
  const std::string year = "([1-9]\\d{3}|0[1-9]\\d{2}|00[1-9]\\d|000[1-9])";
  const std::string leap =
      "(\\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
  const std::string day_of_month =
      "((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2["
      "0-8]))";
  const std::string date = "(" + year + "-" + day_of_month + "|" + leap + "-02-29)";
  const std::string time =
      "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "T" + time + "$";
  if (format == "uuid") {
    return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  }
  if (format == "ipv4") return "^(" + octet + "\\.){3}" + octet + "$";
  if (format == "email") {
    return "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
           "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$";
  }
  return "";
}

// The bounds keywords, which the grammar holds integers to.
constexpr std::string_view kBounds[] = {"minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum"};

// Keywords that assert what the grammar cannot hold an answer to: refused, not ignored.
constexpr std::string_view kUnsupported[] = {"patternProperties",
                                             "multipleOf",
                                             "not",
                                             "if",
                                             "then",
                                             "else",
                                             "dependentRequired",
                                             "dependentSchemas",
                                             "dependencies",
                                             "propertyNames",
                                             "minProperties",
                                             "maxProperties",
                                             "uniqueItems",
                                             "contains",
                                             "minContains",
                                             "maxContains",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "additionalItems",
                                             "prefixItems",
                                             "$dynamicRef",
                                             "$recursiveRef"};
// Keywords that assert what the grammar holds to (beside $ref, anyOf, oneOf, allOf only
// annotations may come).
constexpr std::string_view kAssertions[] = {
    "type",  "properties", "required", "additionalProperties",
    "items", "minItems",   "maxItems", "enum",
    "const", "anyOf",      "oneOf",    "allOf",
    "$ref",  "minLength",  "maxLength"};

}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler(JsonSchema& out, const Json& root) : out_(out), root_(root) {}

  uint32_t compile(const Json& s, const std::string& where) {
    const uint32_t id = add();
    JsonSchema::Node n = nested([&] { return build(s, where); });
    out_.nodes_[id] = std::move(n);
    return id;
  }

  // Each node's depth (the fewest frames its shortest value needs), to a fixed point.
  void measure() {
    for (bool changed = true; changed;) {
      changed = false;
      for (JsonSchema::Node& n : out_.nodes_) {
        const uint32_t d = depth_of(n);
        if (d < n.depth) {
          n.depth = d;
          changed = true;
        }
      }
    }
  }

  // A string of any text (also a map's keys).
  uint32_t string() {
    if (string_ == UINT32_MAX) string_ = add({Kind::string});
    return string_;
  }

 private:
  // build() one level deeper (bounded: the compiler recurses as schemas nest).
  template <typename F>
  JsonSchema::Node nested(F build) {
    if (++nesting_ > JsonSchema::kMaxNesting) {
      fail("json_schema: schemas nest more than {} levels deep", JsonSchema::kMaxNesting);
    }
    JsonSchema::Node n = build();
    --nesting_;
    return n;
  }

  [[noreturn]] static void bad(const std::string& where, const std::string& what) {
    fail("json_schema: at {}: {}", where.empty() ? "the root" : where, what);
  }

  uint32_t add() {
    if (out_.nodes_.size() >= JsonSchema::kMaxNodes) {
      fail("json_schema: the schema is too large (more than {} nodes)", JsonSchema::kMaxNodes);
    }
    out_.nodes_.push_back({JsonSchema::Node::Kind::one_of});
    return static_cast<uint32_t>(out_.nodes_.size() - 1);
  }

  uint32_t add(JsonSchema::Node n) {
    const uint32_t id = add();
    out_.nodes_[id] = std::move(n);
    return id;
  }

  static JsonSchema::Node one_of(std::vector<uint32_t> alternatives) {
    JsonSchema::Node n{Kind::one_of};
    n.alternatives = std::move(alternatives);
    return n;
  }

  // Any JSON value (a schema of true, or of annotations alone).
  uint32_t any() {
    if (any_ != UINT32_MAX) return any_;
    any_ = add();
    JsonSchema::Node map{Kind::map}, array{Kind::array}, literal{Kind::literal};
    map.child = any_;
    array.child = any_;
    literal.texts = {"true", "false", "null"};
    out_.nodes_[any_] = one_of({add(std::move(map)), add(std::move(array)), string(),
                                add({Kind::number}), add(std::move(literal))});
    return any_;
  }

  uint32_t count(const Json& s, const char* key, const std::string& where, uint32_t otherwise) {
    if (!s.contains(key)) return otherwise;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      bad(where, fmt::format("'{}' must be a non-negative integer", key));
    }
    return static_cast<uint32_t>(std::min<int64_t>(v.get<int64_t>(), UINT32_MAX - 1));
  }

  // A node for a schema holding to one type (`type` a string, or one of a list's).
  JsonSchema::Node typed(const Json& s, const std::string& type, const std::string& where) {
    JsonSchema::Node n{Kind::literal};
    if (type == "object") {
      const Json none = Json::object();
      const Json& properties = s.contains("properties") ? s["properties"] : none;
      if (!properties.is_object()) bad(where, "'properties' must be an object");
      std::vector<std::string> required;
      if (s.contains("required")) {
        if (!s["required"].is_array()) bad(where, "'required' must be a list of names");
        for (const Json& name : s["required"]) {
          if (!name.is_string()) bad(where, "'required' must be a list of names");
          if (!properties.contains(name.get<std::string>())) {
            bad(where, fmt::format("'required' names '{}', which 'properties' does not declare",
                                   name.get<std::string>()));
          }
          required.push_back(name.get<std::string>());
        }
      }
      const Json additional = s.value("additionalProperties", Json(true));
      if (!additional.is_boolean() && !additional.is_object()) {
        bad(where, "'additionalProperties' must be a schema");
      }
      if (properties.empty() && additional != Json(false)) {
        // A map: keys of any text, each value of the `additionalProperties` schema.
        n.kind = Kind::map;
        n.child =
            additional.is_object() ? compile(additional, where + "/additionalProperties") : any();
        return n;
      }
      // Declared properties alone, in order (additionalProperties narrowed to false).
      n.kind = Kind::object;
      for (const auto& [name, schema] : properties.items()) {
        const bool is_required =
            std::find(required.begin(), required.end(), name) != required.end();
        if (schema == Json(false) && !is_required) continue;  // a property that may not come
        const uint32_t node = compile(schema, where + "/properties/" + name);
        n.properties.push_back({Json(name).dump(), node, is_required});
      }
      n.required_from.assign(n.properties.size() + 1, static_cast<uint32_t>(n.properties.size()));
      for (size_t i = n.properties.size(); i-- > 0;) {
        n.required_from[i] =
            n.properties[i].required ? static_cast<uint32_t>(i) : n.required_from[i + 1];
      }
      return n;
    }
    if (type == "array") {
      n.kind = Kind::array;
      if (s.contains("items") && !s["items"].is_object() && !s["items"].is_boolean()) {
        bad(where, "'items' must be a schema (lists of schemas are not supported)");
      }
      const bool no_items = s.contains("items") && s["items"] == Json(false);
      n.child = s.contains("items") && !no_items ? compile(s["items"], where + "/items") : any();
      n.min = count(s, "minItems", where, 0);
      n.max = no_items ? 0 : count(s, "maxItems", where, UINT32_MAX);
      if (n.min > n.max) bad(where, "'minItems' is more than 'maxItems'");
      return n;
    }
    if (type == "string") {
      n.kind = Kind::string;
      n.min = count(s, "minLength", where, 0);
      n.max = count(s, "maxLength", where, UINT32_MAX);
      if (n.min > n.max) bad(where, "'minLength' is more than 'maxLength'");
      // A pattern, or where there is none, the one of a format prism knows.
      std::string pattern;
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) bad(where, "'pattern' must be a string");
        pattern = s["pattern"].get<std::string>();
      } else if (s.contains("format") && s["format"].is_string()) {
        pattern = format_pattern(s["format"].get<std::string>());
      }
      if (!pattern.empty()) {
        try {
          n.pattern = AsciiPattern::compile(pattern);
          // With lengths: a character only where some match of a length within them goes
          // on from it. Lengths up to min + the DFA's states tell (a longer match has a cycle
          // to leave out), so the table stops there, or at max.
          if (n.min > 0 || n.max != UINT32_MAX) {
            if (n.min > 4096) bad(where, "a 'minLength' over 4096 beside 'pattern'");
            const size_t states = n.pattern->states();
            n.lengths = n.pattern->lengths(std::min<size_t>(n.max, n.min + states));
            if (!n.lengths.any(n.pattern->start(), n.min, n.max)) {
              bad(where,
                  "no string of the pattern has a length within 'minLength' and "
                  "'maxLength'");
            }
          }
        } catch (const Error& e) {
          bad(where, e.what());
        }
      }
      return n;
    }
    if (type == "number" || type == "integer") {
      n.kind = Kind::number;
      n.integer = type == "integer";
      if (n.integer) {
        bound(s, n, where);
      } else {
        decimal_bounds(s, n, where);
      }
      return n;
    }
    if (type == "boolean") {
      n.texts = {"true", "false"};
      return n;
    }
    if (type == "null") {
      n.texts = {"null"};
      return n;
    }
    bad(where, fmt::format("unknown type '{}'", type));
  }

  // An integer's minimum, maximum, exclusiveMinimum and exclusiveMaximum (numbers; draft 4's
  // boolean exclusive ones too), as inclusive integer bounds.
  static void bound(const Json& s, JsonSchema::Node& n, const std::string& where) {
    auto value = [&](const char* key) {
      if (!s[key].is_number()) bad(where, fmt::format("'{}' must be a number", key));
      return s[key].get<double>();
    };
    auto clamp = [](double v) {
      return v <= -9.2e18 ? INT64_MIN : v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(v);
    };
    const bool draft4_low = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean();
    const bool draft4_high = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean();
    if (s.contains("minimum")) {
      const double m = value("minimum");
      const bool open = draft4_low && s["exclusiveMinimum"].get<bool>();
      n.low = std::max(n.low, clamp(open ? std::floor(m) + 1 : std::ceil(m)));
    }
    if (s.contains("maximum")) {
      const double m = value("maximum");
      const bool open = draft4_high && s["exclusiveMaximum"].get<bool>();
      n.high = std::min(n.high, clamp(open ? std::ceil(m) - 1 : std::floor(m)));
    }
    if (s.contains("exclusiveMinimum") && !draft4_low) {
      n.low = std::max(n.low, clamp(std::floor(value("exclusiveMinimum")) + 1));
    }
    if (s.contains("exclusiveMaximum") && !draft4_high) {
      n.high = std::min(n.high, clamp(std::ceil(value("exclusiveMaximum")) - 1));
    }
    if (n.low > n.high) bad(where, "no integer is within the bounds");
  }

  // A number's bounds, as decimals (a double's shortest form); a bound no text of kSignificant
  // digits in kMaxNumber bytes can meet is refused.
  static void decimal_bounds(const Json& s, JsonSchema::Node& n, const std::string& where) {
    auto decimal = [&](const char* key, bool open) {
      if (!s[key].is_number()) bad(where, fmt::format("'{}' must be a number", key));
      const std::string text = fmt::format("{}", s[key].get<double>());
      JsonSchema::Node::Bound b;
      b.present = true;
      b.open = open;
      size_t i = 0;
      if (text[i] == '-') {
        b.negative = true;
        ++i;
      }
      int fraction = 0, exponent = 0;
      bool point = false;
      for (; i < text.size() && text[i] != 'e'; ++i) {
        if (text[i] == '.') {
          point = true;
          continue;
        }
        b.k = b.k * 10 + static_cast<uint64_t>(text[i] - '0');
        fraction += point;
      }
      if (i < text.size()) exponent = std::stoi(text.substr(i + 1));
      b.e = exponent - fraction;
      if (b.k == 0) b.negative = false;
      return b;
    };
    auto tighter = [](JsonSchema::Node::Bound& to, JsonSchema::Node::Bound b, bool lower) {
      // (Both present: keep one; a value must be within both, and the grammar's check of one
      // at a time is exact only for the tighter.)
      if (!to.present) {
        to = b;
        return;
      }
      const long double x = (b.negative ? -1.0L : 1.0L) * b.k * std::pow(10.0L, b.e);
      const long double y = (to.negative ? -1.0L : 1.0L) * to.k * std::pow(10.0L, to.e);
      if (lower ? (x > y || (x == y && b.open)) : (x < y || (x == y && b.open))) to = b;
    };
    const bool draft4_low = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean();
    const bool draft4_high = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean();
    if (s.contains("minimum")) {
      tighter(n.below, decimal("minimum", draft4_low && s["exclusiveMinimum"].get<bool>()), true);
    }
    if (s.contains("maximum")) {
      tighter(n.above, decimal("maximum", draft4_high && s["exclusiveMaximum"].get<bool>()), false);
    }
    if (s.contains("exclusiveMinimum") && !draft4_low) {
      tighter(n.below, decimal("exclusiveMinimum", true), true);
    }
    if (s.contains("exclusiveMaximum") && !draft4_high) {
      tighter(n.above, decimal("exclusiveMaximum", true), false);
    }
    if (decimal_bounded(n) && !decimal_reachable(n, n_start, false, 0, 0, 0, false) &&
        !decimal_reachable(n, n_minus, true, 0, 0, 1, false)) {
      bad(where, fmt::format("no number within the bounds is written in {} significant digits "
                             "and {} bytes",
                             kSignificant, JsonSchema::kMaxNumber));
    }
  }

  static bool has_type(const Json& v, const std::string& type) {
    if (type == "integer") return v.is_number_integer() || v.is_number_unsigned();
    if (type == "number") return v.is_number();
    if (type == "string") return v.is_string();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "array") return v.is_array();
    if (type == "object") return v.is_object();
    return false;
  }

  JsonSchema::Node build(const Json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(where, "the schema false takes no value");
      return one_of({any()});
    }
    if (!s.is_object()) bad(where, "a schema must be an object or a boolean");
    for (const std::string_view key : kUnsupported) {
      if (s.contains(key)) bad(where, fmt::format("'{}' is not supported", key));
    }
    // $ref, anyOf, oneOf and allOf stand alone (with annotations beside them).
    for (const char* alone : {"$ref", "anyOf", "oneOf", "allOf"}) {
      if (!s.contains(alone)) continue;
      for (const std::string_view key : kAssertions) {
        if (key != alone && s.contains(key)) {
          bad(where, fmt::format("'{}' beside '{}' is not supported", key, alone));
        }
      }
    }
    if (s.contains("$ref")) return one_of({resolve(s["$ref"], where)});
    for (const char* list : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(list)) continue;
      const Json& schemas = s[list];
      if (!schemas.is_array() || schemas.empty()) {
        bad(where, fmt::format("'{}' must be a non-empty list of schemas", list));
      }
      if (std::string_view(list) == "allOf" && schemas.size() > 1) {
        bad(where, "'allOf' of more than one schema is not supported");
      }
      if (schemas.size() > JsonSchema::kMaxThreads) {
        bad(where, fmt::format("'{}' of more than {} schemas is not supported", list,
                               JsonSchema::kMaxThreads));
      }
      // oneOf as anyOf: the texts an answer may take are those of its alternatives.
      std::vector<uint32_t> alternatives;
      for (size_t i = 0; i < schemas.size(); ++i) {
        alternatives.push_back(compile(schemas[i], fmt::format("{}/{}/{}", where, list, i)));
      }
      return one_of(std::move(alternatives));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& one : t) {
          if (!one.is_string()) bad(where, "'type' must be a name or a list of names");
          types.push_back(one.get<std::string>());
        }
      } else {
        bad(where, "'type' must be a name or a list of names");
      }
    }
    if (s.contains("enum") || s.contains("const")) {
      for (const std::string_view key : kBounds) {
        if (s.contains(key))
          bad(where, fmt::format("'{}' beside 'enum' or 'const' is not supported", key));
      }
      JsonSchema::Node n{Kind::literal};
      const Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
      if (!values.is_array() || values.empty()) bad(where, "'enum' must be a non-empty list");
      for (const Json& v : values) {
        const bool typed_ok =
            types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& type) {
              return has_type(v, type);
            });
        const std::string text = v.dump();
        if (typed_ok && std::find(n.texts.begin(), n.texts.end(), text) == n.texts.end()) {
          n.texts.push_back(text);
        }
      }
      if (n.texts.empty()) bad(where, "no value of 'enum' or 'const' has the schema's type");
      return n;
    }
    // Bounds hold a number (with no type: what they apply to is not said).
    for (const std::string_view key : kBounds) {
      if (s.contains(key) && std::find(types.begin(), types.end(), "integer") == types.end() &&
          std::find(types.begin(), types.end(), "number") == types.end()) {
        bad(where, fmt::format("'{}' needs 'type' 'number' or 'integer'", key));
      }
    }
    if (types.empty()) {
      // No type: what the keywords present apply to, else any value.
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
        types.push_back("array");
      } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
        types.push_back("string");
      } else {
        return one_of({any()});
      }
    }
    if (types.size() == 1) return typed(s, types[0], where);
    std::vector<uint32_t> alternatives;
    for (const std::string& type : types) {
      if (type == "number" && std::find(types.begin(), types.end(), "integer") != types.end()) {
        continue;  // integers are numbers: one alternative, not two alike
      }
      alternatives.push_back(add(typed(s, type, where)));
    }
    return one_of(std::move(alternatives));
  }

  // A local reference: "#" or "#/json/pointer" into the schema (the same node each time, so
  // that a schema may refer to itself).
  uint32_t resolve(const Json& ref, const std::string& where) {
    if (!ref.is_string() || !ref.get<std::string>().starts_with("#")) {
      bad(where, "'$ref' must refer into the schema itself (\"#/...\")");
    }
    const std::string pointer = ref.get<std::string>().substr(1);
    if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const Json* target = nullptr;
    try {
      target = &root_.at(Json::json_pointer(pointer));
    } catch (const nlohmann::json::exception&) {
      bad(where, fmt::format("'$ref' {} refers to nothing in the schema", ref.dump()));
    }
    const uint32_t id = add();
    refs_[pointer] = id;
    JsonSchema::Node n = nested([&] { return build(*target, pointer); });
    out_.nodes_[id] = std::move(n);
    return id;
  }

  uint32_t depth_of(const JsonSchema::Node& n) const {
    auto plus = [](uint32_t a, uint32_t b) { return a == UINT32_MAX ? a : a + b; };
    const auto& nodes = out_.nodes_;
    switch (n.kind) {
      case Kind::object: {
        uint32_t d = 0;
        for (const auto& p : n.properties) {
          if (p.required) d = std::max(d, nodes[p.node].depth);
        }
        return plus(d, 1);
      }
      case Kind::array:
        return n.min == 0 ? 1 : plus(nodes[n.child].depth, 1);
      case Kind::one_of: {
        uint32_t d = UINT32_MAX;
        for (const uint32_t a : n.alternatives) d = std::min(d, nodes[a].depth);
        return d;
      }
      default:
        return 1;
    }
  }

  JsonSchema& out_;
  const Json& root_;
  std::map<std::string, uint32_t> refs_;
  uint32_t any_ = UINT32_MAX, string_ = UINT32_MAX;
  size_t nesting_ = 0;
};

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::ordered_json& schema) {
  std::shared_ptr<JsonSchema> g(new JsonSchema());
  SchemaCompiler compiler(*g, schema);
  g->root_ = compiler.compile(schema, "");
  for (Node& n : g->nodes_) {  // a literal's texts sorted (as bytes), each once
    std::sort(n.texts.begin(), n.texts.end());
    n.texts.erase(std::unique(n.texts.begin(), n.texts.end()), n.texts.end());
  }
  g->string_ = compiler.string();
  compiler.measure();
  // Alternatives that lead back to their union without a container between would be entered
  // forever.
  std::vector<uint8_t> mark(g->nodes_.size(), 0);  // 1: on the path, 2: done
  auto visit = [&](auto& self, uint32_t id) -> void {
    if (mark[id] == 2 || g->nodes_[id].kind != Node::Kind::one_of) return;
    if (mark[id] == 1)
      fail("json_schema: a schema refers to itself with no object or list between");
    mark[id] = 1;
    for (const uint32_t a : g->nodes_[id].alternatives) self(self, a);
    mark[id] = 2;
  };
  for (uint32_t id = 0; id < g->nodes_.size(); ++id) visit(visit, id);
  if (g->nodes_[g->root_].depth > kMaxDepth) {
    fail("json_schema: the schema has no value of at most {} levels", kMaxDepth);
  }
  return g;
}

bool JsonSchema::fits(const Thread& t, uint32_t node) const {
  const uint32_t d = nodes_[node].depth;
  return d != UINT32_MAX && t.stack.size() + d <= kMaxDepth;
}

// Opens `node` on top of the thread: a frame, or for a union or a choice of texts, a thread
// for each alternative.
void JsonSchema::enter(Thread t, uint32_t node, std::vector<Thread>& out) const {
  if (!fits(t, node)) return;
  const Node& n = nodes_[node];
  if (n.kind == Node::Kind::one_of) {
    for (const uint32_t a : n.alternatives) enter(t, a, out);
    return;
  }
  Frame f;
  f.node = node;
  if (n.kind == Node::Kind::literal) f.z = static_cast<uint32_t>(n.texts.size());
  t.stack.push_back(f);
  out.push_back(std::move(t));
}

JsonSchema::State JsonSchema::start() const {
  State s;
  enter({}, root_, s.threads);
  return s;
}

bool JsonSchema::feed(State& s, char c) const {
  State next = s;
  if (!advance(next, c)) return false;
  s = std::move(next);
  return true;
}

bool JsonSchema::advance(State& s, char c) const {
  std::vector<Thread> next;
  next.reserve(s.threads.size());
  for (Thread& t : s.threads) step(std::move(t), c, next);
  if (next.empty()) return false;
  if (next.size() > 1) {
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    if (next.size() > kMaxThreads) next.resize(kMaxThreads);
  }
  s.threads = std::move(next);
  return true;
}

bool JsonSchema::feed(State& s, std::string_view bytes) const {
  for (const char c : bytes) {
    if (!advance(s, c)) return false;
  }
  return true;
}

bool JsonSchema::complete(const State& s) const {
  for (const Thread& t : s.threads) {
    if (t.stack.empty()) return true;
    if (t.stack.size() != 1) continue;
    const Frame& f = t.stack[0];
    const Node& n = nodes_[f.node];
    const uint64_t value = uint64_t{f.z} << 32 | f.y;
    if ((n.kind == Node::Kind::number && number_may_end(f.phase) &&
         (!bounded(n) || integer_reachable(n, f.a != 0, value, -1)) &&
         (!decimal_bounded(n) || decimal_reachable(n, f.phase, f.a != 0, value, f.b, f.x, true))) ||
        (n.kind == Node::Kind::literal && n.texts[f.x].size() == f.y)) {
      return true;
    }
  }
  return false;
}

bool JsonSchema::in_plain_string(const State& s) const {
  for (const Thread& t : s.threads) {
    if (t.stack.empty()) continue;
    const Frame& f = t.stack.back();
    const Node& n = nodes_[f.node];
    if (n.kind == Node::Kind::string && n.max == UINT32_MAX && !n.pattern && f.phase == s_text &&
        f.a == 0 && (f.z >> 8) == 0) {
      return true;
    }
  }
  return false;
}

// Feeds `c` to one thread, which leaves none, one or (at a key's opening quote, or a value
// that is a union) several threads in `out`.
void JsonSchema::step(Thread t, char c, std::vector<Thread>& out) const {
  if (t.stack.empty()) return;  // nothing may follow the value
  Frame& f = t.stack.back();
  const Node& n = nodes_[f.node];
  const auto byte = static_cast<unsigned char>(c);
  // Whitespace where JSON allows it between tokens, as pretty-printers write it (so that a
  // constrained model cannot spin on blanks): one space, or a line break and an indent of up
  // to kMaxIndent spaces or tabs. The frame stays as it is.
  auto blank = [&] {
    if (c == ' ' && t.blanks == 0) {
      t.blanks = 1;
    } else if (c == '\n' && t.blanks == 0) {
      t.blanks = 2;
    } else if ((c == ' ' || c == '\t') && t.blanks >= 2 && t.blanks < 2 + kMaxIndent) {
      ++t.blanks;
    } else {
      return;
    }
    out.push_back(std::move(t));
  };
  auto keep = [&] {
    t.blanks = 0;
    out.push_back(std::move(t));
  };
  auto pop = [&] {
    t.stack.pop_back();
    keep();
  };
  // c starts a value of `node`, on top of this frame.
  auto push_and_feed = [&](uint32_t node) {
    std::vector<Thread> entered;
    enter(std::move(t), node, entered);
    for (Thread& e : entered) step(std::move(e), c, out);
  };

  switch (n.kind) {
    case Node::Kind::object:
    case Node::Kind::map: {
      // An object's frame: property x is the first that may come next (those before it came
      // or were passed over); a key may come where one that fits does, '}' where no required
      // one is left. A map's: a key of any text where its value fits.
      const bool map = n.kind == Node::Kind::map;
      const auto props = static_cast<uint32_t>(n.properties.size());
      auto may_close = [&] { return map || n.required_from[f.x] == props; };
      // The first property from `from` on that may come next and whose key has the bytes of
      // property y's key before `at`, then c (from x up to the first required one, whose
      // value fits); props if none. (Keys are JSON texts, quotes and all, so none is the
      // start of another: a key's bytes so far are those of the first that has them.)
      auto next_key = [&](uint32_t from, uint32_t at) {
        for (uint32_t q = from; q < props; ++q) {
          const std::string& key = n.properties[q].key;
          if (fits(t, n.properties[q].node) && key.size() > at && key[at] == c &&
              (at == 0 || key.compare(0, at, n.properties[f.y].key, 0, at) == 0)) {
            return q;
          }
          if (n.properties[q].required) break;
        }
        return props;
      };
      auto may_continue = [&] {
        if (map) return fits(t, n.child);
        for (uint32_t q = f.x; q < props; ++q) {
          if (fits(t, n.properties[q].node)) return true;
          if (n.properties[q].required) break;
        }
        return false;
      };
      switch (f.phase) {
        case o_start:
          if (c == '{') {
            f.phase = o_first;
            return keep();
          }
          return blank();
        case o_first:
        case o_key:
          if (c == '"') {
            if (map) {
              if (!fits(t, n.child)) return;
              f.phase = o_colon;
              Frame key;
              key.node = string_;
              key.phase = s_text;
              t.stack.push_back(key);
              return keep();
            }
            const uint32_t q = next_key(f.x, 0);
            if (q == props) return;
            f.phase = o_key_text;
            f.y = q;
            f.z = 1;  // the key's opening quote came
            return keep();
          }
          if (c == '}' && f.phase == o_first && may_close()) return pop();
          return blank();
        case o_key_text: {
          const uint32_t q = next_key(f.y, f.z);
          if (q == props) return;
          f.y = q;
          if (++f.z == n.properties[q].key.size()) {
            f.phase = o_colon;
            f.x = q + 1;
          }
          return keep();
        }
        case o_colon:
          if (c == ':') {
            f.phase = o_value;
            return keep();
          }
          return blank();
        case o_value:
          if (is_blank(c)) return blank();
          f.phase = o_after;
          return push_and_feed(map ? n.child : n.properties[f.x - 1].node);
        case o_after:
          if (c == ',' && may_continue()) {
            f.phase = o_key;
            return keep();
          }
          if (c == '}' && may_close()) return pop();
          return blank();
      }
      return;
    }
    case Node::Kind::array:
      // Items so far: x.
      switch (f.phase) {
        case a_start:
          if (c == '[') {
            f.phase = a_first;
            return keep();
          }
          return blank();
        case a_first:
          if (c == ']' && n.min == 0) return pop();
          if (is_blank(c)) return blank();
          if (n.max == 0 || !fits(t, n.child)) return;
          f.x = 1;
          f.phase = a_after;
          return push_and_feed(n.child);
        case a_next:
          if (is_blank(c)) return blank();
          ++f.x;
          f.phase = a_after;
          return push_and_feed(n.child);
        case a_after:
          if (c == ',' && f.x < n.max && fits(t, n.child)) {
            f.phase = a_next;
            return keep();
          }
          if (c == ']' && f.x >= n.min) return pop();
          return blank();
      }
      return;
    case Node::Kind::string: {
      // Characters so far: x; a UTF-8 character's bytes to go: a, the range of the next: b to
      // c; a \u escape's value so far: y, its digits to go: z's low byte; after a high
      // surrogate's escape (its low one must come): z's bit 8.
      const bool want_low = (f.z >> 8) != 0;
      switch (f.phase) {
        case s_start:
          if (c == '"') {
            f.phase = s_text;
            return keep();
          }
          return blank();
        case s_text:
          if (n.pattern) {  // printable ASCII alone, each character a step of the pattern's DFA
            if (c == '"') {
              if (!n.pattern->accepting(f.y) || f.x < n.min) return;
              return pop();
            }
            const int32_t next = n.pattern->next(f.y, c);
            if (next == AsciiPattern::kRefused || f.x >= n.max) return;
            if (!n.lengths.bits.empty() &&
                !n.lengths.any(static_cast<uint32_t>(next), n.min > f.x + 1 ? n.min - f.x - 1 : 0,
                               n.max - f.x - 1)) {
              return;
            }
            f.y = static_cast<uint32_t>(next);
            ++f.x;
            return keep();
          }
          if (want_low && c != '\\') return;
          if (f.a > 0) {  // RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF
            if (byte < f.b || byte > f.c) return;
            --f.a;
            f.b = 0x80;
            f.c = 0xBF;
            return keep();
          }
          if (byte >= 0x80) {
            if (f.x >= n.max) return;
            f.b = 0x80;
            f.c = 0xBF;
            if (byte >= 0xC2 && byte <= 0xDF) {
              f.a = 1;
            } else if (byte >= 0xE0 && byte <= 0xEF) {
              f.a = 2;
              if (byte == 0xE0) f.b = 0xA0;
              if (byte == 0xED) f.c = 0x9F;
            } else if (byte >= 0xF0 && byte <= 0xF4) {
              f.a = 3;
              if (byte == 0xF0) f.b = 0x90;
              if (byte == 0xF4) f.c = 0x8F;
            } else {
              return;  // a continuation byte, C0, C1, F5-FF
            }
            ++f.x;
            return keep();
          }
          if (c == '"') {
            if (f.x < n.min) return;
            return pop();
          }
          if (c == '\\') {
            if (!want_low) {  // (a surrogate pair is one character)
              if (f.x >= n.max) return;
              ++f.x;
            }
            f.phase = s_escape;
            return keep();
          }
          if (byte < 0x20 || f.x >= n.max) return;  // control characters must be escaped
          ++f.x;
          return keep();
        case s_escape:
          if (c == 'u') {
            f.phase = s_hex;
            f.y = 0;
            f.z = (f.z & 0x100) | 4;
            return keep();
          }
          if (want_low || std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) {
            return;
          }
          f.phase = s_text;
          return keep();
        case s_hex: {
          if (!is_hex(c)) return;
          f.y = f.y * 16 + static_cast<uint32_t>(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
          const uint32_t left = (f.z & 0xFF) - 1;
          f.z = (f.z & 0x100) | left;
          // A low surrogate (DC00-DFFF) must come after a high one and nowhere else: said by
          // the first two digits, so that no prefix taken is left without a way on.
          if (left == 3 && want_low && f.y != 0xD) return;
          if (left == 2 && (f.y >= 0xDC && f.y <= 0xDF) != want_low) return;
          if (left > 0) return keep();
          // UTF-16 surrogates come in pairs: a high one, then a low one.
          const bool high = f.y >= 0xD800 && f.y <= 0xDBFF;
          const bool low = f.y >= 0xDC00 && f.y <= 0xDFFF;
          if (low != want_low) return;
          f.z = high ? 0x100 : 0;
          f.phase = s_text;
          return keep();
        }
      }
      return;
    }
    case Node::Kind::number: {
      // Bytes so far: x; an integer's sign: a, its digits' value: z and y (high and low
      // halves). A byte that leaves the number unable to end needs room for one more; an
      // integer's digit, some value within its bounds that starts with the digits.
      const bool bounded = prism::llm::bounded(n);
      auto go = [&](Phase to) {
        if (f.x + 1 + (number_may_end(to) ? 0 : 1) > kMaxNumber) return;
        ++f.x;
        f.phase = to;
        keep();
      };
      auto magnitude = [&] { return uint64_t{f.z} << 32 | f.y; };
      // A bounded number's digit or point: its digits' value so far (z and y) and how many
      // are after the point (b).
      const bool decimal = decimal_bounded(n);
      auto go_decimal = [&](Phase to, uint64_t value, int fraction) {
        if (digits_of(value) > kSignificant ||
            !decimal_reachable(n, to, f.a != 0, value, fraction, f.x + 1, false)) {
          return;
        }
        f.y = static_cast<uint32_t>(value);
        f.z = static_cast<uint32_t>(value >> 32);
        f.b = static_cast<uint8_t>(fraction);
        go(to);
      };
      const auto d = static_cast<uint64_t>(c - '0');
      auto go_digit = [&](Phase to) {
        if (bounded) {
          const uint64_t m = magnitude();
          if (m > (UINT64_MAX - 9) / 10) return;
          const uint64_t next = m * 10 + static_cast<uint64_t>(c - '0');
          const int more =
              to == n_zero ? 0 : static_cast<int>(kMaxNumber) - static_cast<int>(f.x) - 1;
          if (!integer_reachable(n, f.a != 0, next, more)) return;
          f.y = static_cast<uint32_t>(next);
          f.z = static_cast<uint32_t>(next >> 32);
        }
        go(to);
      };
      const bool digit = is_digit(c);
      const bool fraction_ok = !n.integer;
      switch (f.phase) {
        case n_start:
          if (c == '-') {
            if (bounded && n.low > 0) return;  // (-0 is 0)
            if (decimal && !decimal_reachable(n, n_minus, true, 0, 0, f.x + 1, false)) return;
            f.a = 1;
            return go(n_minus);
          }
          if (digit && decimal) return go_decimal(c == '0' ? n_zero : n_integer, d, 0);
          if (digit) return go_digit(c == '0' ? n_zero : n_integer);
          return blank();
        case n_minus:
          if (digit && decimal) return go_decimal(c == '0' ? n_zero : n_integer, d, 0);
          if (digit) return go_digit(c == '0' ? n_zero : n_integer);
          return;
        case n_zero:
        case n_integer:
          if (digit && f.phase == n_integer && decimal) {
            return go_decimal(n_integer, magnitude() * 10 + d, 0);
          }
          if (digit && f.phase == n_integer) return go_digit(n_integer);
          if (c == '.' && decimal) return go_decimal(n_dot, magnitude(), 0);
          if (c == '.' && fraction_ok) return go(n_dot);
          if ((c == 'e' || c == 'E') && fraction_ok && !decimal) return go(n_e);
          break;
        case n_dot:
          if (digit && decimal) return go_decimal(n_fraction, magnitude() * 10 + d, 1);
          if (digit) return go(n_fraction);
          return;
        case n_fraction:
          if (digit && decimal) return go_decimal(n_fraction, magnitude() * 10 + d, f.b + 1);
          if (digit) return go(n_fraction);
          if ((c == 'e' || c == 'E') && !decimal) return go(n_e);
          break;
        case n_e:
          if (c == '+' || c == '-') return go(n_e_sign);
          if (digit) return go(n_exponent);
          return;
        case n_e_sign:
          if (digit) return go(n_exponent);
          return;
        case n_exponent:
          if (digit) return go(n_exponent);
          break;
      }
      // The number has ended before c, which is its container's.
      if (!number_may_end(f.phase) ||
          (bounded && !integer_reachable(n, f.a != 0, magnitude(), -1)) ||
          (decimal && !decimal_reachable(n, f.phase, f.a != 0, magnitude(), f.b, f.x, true))) {
        return;
      }
      t.stack.pop_back();
      return step(std::move(t), c, out);
    }
    case Node::Kind::literal: {
      // The texts x to z (sorted) have the bytes so far, y of them; a text that is whole
      // (the shortest, first) ends the value where c does not go on with another.
      if (f.y == 0 && is_blank(c)) return blank();
      const std::vector<std::string>& texts = n.texts;
      const bool whole = texts[f.x].size() == f.y;
      if (whole) {
        Thread ended = t;
        ended.stack.pop_back();
        step(std::move(ended), c, out);
      }
      const auto at = [&](const std::string& text) {
        return static_cast<unsigned char>(text[f.y]);
      };
      const auto first = texts.begin() + f.x + (whole ? 1 : 0), last = texts.begin() + f.z;
      const auto lo =
          std::partition_point(first, last, [&](const auto& x) { return at(x) < byte; });
      const auto hi = std::partition_point(lo, last, [&](const auto& x) { return at(x) == byte; });
      if (lo == hi) return;
      f.x = static_cast<uint32_t>(lo - texts.begin());
      f.z = static_cast<uint32_t>(hi - texts.begin());
      if (++f.y == texts[f.x].size() && f.z - f.x == 1) return pop();
      return keep();
    }
    case Node::Kind::one_of:
      return;  // (never on a stack: entered as its alternatives)
  }
}

}  // namespace prism::llm
