// The Jinja interpreter on the constructs chat templates use, and its errors. Expected outputs
// are what Jinja2 (with trim_blocks and lstrip_blocks, as transformers configures it) renders.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/llm/jinja/template.h"
#include "prism/llm/jinja/value.h"

namespace prism::llm::jinja {
namespace {

std::string render(std::string_view source, const char* context_json = "{}") {
  Value context = Value::from_json(nlohmann::ordered_json::parse(context_json));
  return Template(source, "test.jinja").render(context.as_dict());
}

std::string error_of(std::string_view source, const char* context_json = "{}") {
  try {
    render(source, context_json);
  } catch (const prism::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(render("plain"), "plain");
  EXPECT_EQ(render("{{ 'a' + 'b' }}{{ 1 + 2 }}{{ 7 // 2 }}{{ 7 / 2 }}{{ -7 % 3 }}"), "ab333.52");
  EXPECT_EQ(render("{{ x }} {{ y }} {{ z }} {{ n }}",
                   R"({"x": true, "y": null, "z": 1.0, "n": [1, "a"]})"),
            "True None 1.0 [1, 'a']");
  EXPECT_EQ(render("{{ 'x' ~ 1 ~ none }}"), "x1None");
  EXPECT_EQ(render("{# a comment #}ok"), "ok");
  EXPECT_EQ(render("{{ \"esc\\n\\t\\u00e9\" }}"), "esc\n\t\xc3\xa9");
}

TEST(Jinja, IfElifElse) {
  const char* t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(render(t, R"({"n": 3})"), "big");
  EXPECT_EQ(render(t, R"({"n": 2})"), "two");
  EXPECT_EQ(render(t, R"({"n": 1})"), "small");
  EXPECT_EQ(render("{{ 'y' if flag else 'n' }}", R"({"flag": false})"), "n");
  EXPECT_EQ(render("{% if not missing %}none{% endif %}"), "none");
  EXPECT_EQ(render("{{ a and b }} {{ a or b }}", R"({"a": 0, "b": "x"})"), "0 x");
}

TEST(Jinja, ForLoops) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
                   R"({"xs": ["a", "b"]})"),
            "102TrueFalse2,211FalseTrue2,");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for x in range(5) if x is odd %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(
      render("{% for x in range(5) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
      "012");
  EXPECT_EQ(
      render(
          "{% for x in range(4) %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
      "13");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.cycle('-', '+') }}{{ x }}{% endfor %}"), "-a+b");
  // Assignments inside a loop do not leak out of it.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
}

TEST(Jinja, SetNamespaceAndMacros) {
  EXPECT_EQ(
      render(
          "{% set ns = namespace(found=false, n=0) %}{% for x in [1, 2] %}"
          "{% set ns.found = true %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.found }}{{ ns.n }}"),
      "True3");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}in {{ 'side' }}{% endset %}[{{ block }}]"), "[in side]");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', punct='?') }}"),
            "Hi Ann! Hi Bob?");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello world' | "
                   "capitalize }}"),
            "x|AB|ab|Hello world");
  EXPECT_EQ(render("{{ [1, 2, 3] | length }}{{ 'héllo' | length }}{{ {'a': 1} | length }}"), "351");
  EXPECT_EQ(render("{{ missing | default('d') }}{{ '' | default('e', true) }}{{ 'x' | d('y') }}"),
            "dex");
  EXPECT_EQ(render("{{ [1, 2] | join(', ') }}|{{ 'a-b-c' | replace('-', '+') }}|{{ [3, 4] | first "
                   "}}{{ [3, 4] | last }}"),
            "1, 2|a+b+c|34");
  EXPECT_EQ(render("{{ 42 | string }}{{ '7' | int + 1 }}{{ 3.9 | int }}"), "4283");
  EXPECT_EQ(render("{% for k, v in {'a': 1} | items %}{{ k }}{{ v }}{% endfor %}"), "a1");
  const char* people =
      R"({"p": [{"n": "a", "ok": true, "r": "x"}, {"n": "b", "ok": false, "r": "y"}]})";
  EXPECT_EQ(render("{{ p | selectattr('ok') | map(attribute='n') | join }}", people), "a");
  EXPECT_EQ(render("{{ p | rejectattr('ok') | map(attribute='n') | join }}", people), "b");
  EXPECT_EQ(render("{{ p | selectattr('r', 'equalto', 'y') | map(attribute='n') | list }}", people),
            "['b']");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
  EXPECT_EQ(render("{{ d | tojson }}", R"({"d": {"b": [1, 2.5, null, true], "a": "é\"\n"}})"),
            R"({"b": [1, 2.5, null, true], "a": "é\"\n"})");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
}

TEST(Jinja, Tests) {
  const char* context = R"({"s": "x", "d": {}, "n": 1, "f": 1.5, "z": null, "l": [1]})";
  EXPECT_EQ(
      render("{{ s is defined }}{{ q is defined }}{{ q is not defined }}{{ z is none }}", context),
      "TrueFalseTrueTrue");
  EXPECT_EQ(
      render("{{ s is string }}{{ n is string }}{{ d is mapping }}{{ l is mapping }}", context),
      "TrueFalseTrueFalse");
  EXPECT_EQ(
      render("{{ l is iterable }}{{ n is iterable }}{{ n is number }}{{ f is number }}", context),
      "TrueFalseTrueTrue");
  EXPECT_EQ(render("{{ n is equalto 1 }}{{ n is equalto(2) }}{{ 4 is divisibleby 2 }}", context),
            "TrueFalseTrue");
  EXPECT_EQ(render("{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' not in {'k': 1} }}"),
            "TrueTrueFalse");
}

TEST(Jinja, SlicingAndStringMethods) {
  EXPECT_EQ(render("{{ [1, 2, 3][::-1] }}{{ [1, 2, 3][1:] }}{{ [1, 2, 3][-1] }}{{ 'héllo'[1:3] }}"),
            "[3, 2, 1][2, 3]3él");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}"), "TrueTrue");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b c']");
  EXPECT_EQ(
      render("[{{ '\n x \n'.strip() }}][{{ 'xxaxx'.lstrip('x') }}][{{ 'xxaxx'.rstrip('x') }}]"),
      "[x][axx][xxa]");
  EXPECT_EQ(render("{{ 'aXa'.replace('a', 'b') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"), "bXbABab");
  EXPECT_EQ(render("{{ m.content.split('</think>')[-1].lstrip('\\n') }}",
                   R"({"m": {"content": "<think>r</think>\n\nanswer"}})"),
            "answer");
  EXPECT_EQ(
      render("{{ d.get('a') }}{{ d.get('b', 0) }}{{ d.keys() | list }}", R"({"d": {"a": 1}})"),
      "10['a']");
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true %}\nb{% endif %}"), "ab");
  // trim_blocks drops the newline after a block tag; lstrip_blocks drops its indentation.
  EXPECT_EQ(render("{% for x in [1, 2] %}\n    {{ x }}\n{% endfor %}\n"), "    1\n    2\n");
  EXPECT_EQ(render("  {% if true %}\nx\n  {% endif %}\ny"), "x\ny");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");  // not after expressions
  EXPECT_EQ(render("{# c #}\nx"), "x");
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
}

TEST(Jinja, Builtins) {
  EXPECT_EQ(render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}"), "[0, 1, 2][1, 3, 5]");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
  EXPECT_EQ(error_of("{{ raise_exception('Only user and assistant roles') }}"),
            "test.jinja:1:4: raise_exception: Only user and assistant roles");
}

// As with Jinja2's Undefined (what transformers renders with): filters that read their input
// as text or iterate it see "" for a missing value; arithmetic and other filters on it are
// errors that name it.
// Found by fuzz/fuzz_jinja: integers past 64 bits ended the process (std::stoll's
// out_of_range); a literal is a syntax error, a string or float given to `int` its default.
TEST(Jinja, IntegersOutOfRange) {
  EXPECT_EQ(error_of("{{ 11111111111111111111111111 }}"),
            "test.jinja:1:4: template syntax error: integer literal 11111111111111111111111111 "
            "is out of range");
  EXPECT_EQ(error_of("{{ x.99999999999999999999 }}", R"({"x": [1]})"),
            "test.jinja:1:6: template syntax error: integer literal 99999999999999999999 is out "
            "of range");
  EXPECT_EQ(render("{{ '99999999999999999999' | int }} {{ '1e300' | int(7) }} {{ 1e300 | int }}"),
            "0 7 0");
  EXPECT_EQ(render("{{ '12' | int }} {{ 2.9 | int }} {{ '-3.5' | int }}"), "12 2 -3");
  // Floats past double's range are inf, as Python reads them.
  EXPECT_EQ(render("{{ 1e999 > 1e308 }}"), "True");
}

// Found by fuzz/fuzz_jinja: an escape with a non-hex digit ended the process (std::stoul).
TEST(Jinja, BadEscapesAreSyntaxErrors) {
  EXPECT_EQ(render(R"({{ "\u00e9\x41" }})"), "\u00e9A");
  EXPECT_EQ(error_of(R"({{ "\uote" }})"),
            "test.jinja:1:7: template syntax error: bad escape in string");
  EXPECT_EQ(error_of(R"({{ "\x4" }})"),
            "test.jinja:1:7: template syntax error: bad escape in string");
}

// Found by fuzz/fuzz_jinja: a filter or test given a value of the wrong type ended the process
// (std::bad_variant_access); it is a TypeError, as in Python.
TEST(Jinja, WrongTypesAreErrors) {
  EXPECT_EQ(error_of(R"({{ 6 is divisibleby(",") }})"),
            "template error: expected an int, got str ','");
  EXPECT_EQ(render("{{ 6 is divisibleby(3) }}"), "True");
}

// Found by fuzz/fuzz_jinja: unpacking a value that is not iterable into several names ended
// the process (an uncaught BuiltinError); it is a TypeError at the loop or the assignment.
TEST(Jinja, UnpackingWhatIsNotIterableIsAnError) {
  EXPECT_EQ(error_of("{% for a, b in range(1) %}{% endfor %}"),
            "test.jinja:1:1: 'int' object is not iterable");
  EXPECT_EQ(error_of("{% set a, b = 3 %}"), "test.jinja:1:1: 'int' object is not iterable");
  EXPECT_EQ(error_of("{% set a, b = nothing %}"), "test.jinja:1:15: undefined variable 'nothing'");
  EXPECT_EQ(render("{% for a, b in [[1, 2]] %}{{ a + b }}{% endfor %}"), "3");
}

TEST(Jinja, TextFiltersReadAMissingValueAsEmpty) {
  EXPECT_EQ(render("[{{ m['content'] | trim }}]{{ m.content | length }}{{ m.x | list }}",
                   R"({"m": {"role": "assistant"}})"),
            "[]0[]");
  EXPECT_EQ(render("{{ 'a' + m['content'] | upper + 'b' }}", R"({"m": {}})"), "ab");
  EXPECT_EQ(error_of("{{ m.content | round }}", R"({"m": {}})"),
            "test.jinja:1:5: dict has no attribute 'content'");
  EXPECT_EQ(error_of("{{ m.content + 'x' }}", R"({"m": {}})"),
            "test.jinja:1:5: dict has no attribute 'content'");
}

TEST(Jinja, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(error_of("line one\n{{ name }}"), "test.jinja:2:4: undefined variable 'name'");
  EXPECT_EQ(error_of("{% for x in items %}{% endfor %}"),
            "test.jinja:1:13: undefined variable 'items'");
  EXPECT_EQ(error_of("{{ user.name }}"), "test.jinja:1:4: undefined variable 'user'");
  EXPECT_EQ(error_of("{{ d.missing + 'x' }}", R"({"d": {}})"),
            "test.jinja:1:5: dict has no attribute 'missing'");
  EXPECT_EQ(error_of("{% if x %}\n  oops"),
            "test.jinja:2:7: template syntax error: 'if' at line 1 column 1 was never closed "
            "(expected 'endif')");
  EXPECT_EQ(error_of("{{ 1 + }}"), "test.jinja:1:8: template syntax error: unexpected '}}'");
  EXPECT_EQ(error_of("{% endfor %}"),
            "test.jinja:1:4: template syntax error: unexpected 'endfor' with no block open");
  EXPECT_EQ(error_of("{% frobnicate %}"),
            "test.jinja:1:4: template syntax error: unknown statement 'frobnicate'");
  EXPECT_EQ(error_of("{{ 'abc' }"),
            "test.jinja:1:1: template syntax error: this '{{' is never closed with '}}'");
  EXPECT_EQ(error_of("{{ x | nofilter }}", R"({"x": 1})"),
            "test.jinja:1:8: unknown filter 'nofilter'");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "test.jinja:1:8: unsupported operand types for +: 'str' and 'int'");
}

// Python's integers have no bound; prism's have 64 bits, and a result past them is an error,
// never a wrapped value. Found by fuzz/fuzz_jinja: `2 ** 510` overflowed (undefined behavior)
// and `1 ** 10 ** 18` looped 10^18 times.
TEST(Jinja, IntegerOverflowIsAnError) {
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 1 ** 1000000000000000000 }} {{ (-1) ** 999999999999999999 }} "
                   "{{ 0 ** 7 }} {{ 7 ** 0 }} {{ 2 ** -1 }}"),
            "4611686018427387904 1 -1 0 1 0.5");
  auto overflow = [](const char* op) {
    return fmt::format("integer overflow: the result of '{}' does not fit in 64 bits", op);
  };
  EXPECT_EQ(error_of("{{ 2 ** 63 }}"), "test.jinja:1:6: " + overflow("**"));
  EXPECT_EQ(error_of("{{ 2 ** 510 }}"), "test.jinja:1:6: " + overflow("**"));
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}"), "test.jinja:1:24: " + overflow("+"));
  EXPECT_EQ(error_of("{{ -9223372036854775807 - 2 }}"), "test.jinja:1:25: " + overflow("-"));
  EXPECT_EQ(error_of("{{ 4294967296 * 4294967296 }}"), "test.jinja:1:15: " + overflow("*"));
  const char* min = "(-9223372036854775807 - 1)";
  EXPECT_EQ(render(fmt::format("{{{{ {} % -1 }}}} {{{{ {} // 1 }}}}", min, min)),
            "0 -9223372036854775808");
  EXPECT_NE(error_of(fmt::format("{{{{ {} // -1 }}}}", min)).find(overflow("//")),
            std::string::npos);
  EXPECT_NE(error_of(fmt::format("{{{{ -{} }}}}", min)).find(overflow("-")), std::string::npos);
  EXPECT_NE(error_of(fmt::format("{{{{ {} | abs }}}}", min)).find(overflow("abs")),
            std::string::npos);
}

// range() at int64's ends and past the sandbox's 100000 items (jinja2's MAX_RANGE); slices with
// steps near 2^63.
TEST(Jinja, RangesAndSlicesAtTheEdges) {
  EXPECT_EQ(render("{{ range(10, 0, -3) | list }} {{ range(100000) | length }}"),
            "[10, 7, 4, 1] 100000");
  EXPECT_EQ(render("{{ range(9223372036854775800, 9223372036854775807, 5) | list }}"),
            "[9223372036854775800, 9223372036854775805]");
  EXPECT_EQ(error_of("{{ range(100001) }}"),
            "test.jinja:1:4: range() of 100001 items is past the sandbox's limit of 100000");
  EXPECT_EQ(error_of("{{ range(-9223372036854775807, 9223372036854775807) }}"),
            "test.jinja:1:4: range() of 9223372036854775807 items is past the sandbox's limit of "
            "100000");
  EXPECT_EQ(render("{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"),
            "b [3]");
}

// Chat templates come from model repositories; what would take all memory, all time or the
// whole stack ends with one error (the limits in prism/llm/jinja/builtins.h).
TEST(Jinja, SandboxBoundsMemory) {
  EXPECT_EQ(render("{{ 'ab' * 3 }}{{ [0] * 2 }}"), "ababab[0, 0]");
  EXPECT_EQ(error_of("{{ 'a' * 70000000 }}"),
            "test.jinja:1:8: repetition with '*' would build 70000000 bytes, past the sandbox's "
            "limit of 67108864");
  EXPECT_NE(error_of("{{ [1, 2] * 4611686018427387904 }}").find("past the sandbox's limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% set s = 'a' * 10000 %}{{ s | replace('a', s) }}").find("replace()"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'a\\nb' | indent(100000000) }}").find("indent"), std::string::npos);
  EXPECT_EQ(error_of("{{ [1] | tojson(indent=100000) }}"),
            "test.jinja:1:10: tojson(indent=100000) is past the sandbox's limit of 1024");
  // Doubling a string: each result is under the one-value limit until it is not.
  std::string doubled = error_of(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}");
  EXPECT_NE(doubled.find("'+' would build 134217728 bytes"), std::string::npos) << doubled;
  // A list whose items are all the same list, printed: its text past the limits is an error
  // when it gets there, not after building all of it (fuzz seed regression-043b05aea766).
  EXPECT_EQ(error_of("a{{[[ 4 ** 10 ]* 4 ** 10 ]*+37}}2"),
            "test.jinja:1:27: a value whose text holds more than the sandbox's limit of 1000000 "
            "items");
  // The same for tojson: its text stops at the limits, not after 37 million numbers of it, and
  // an indent repeated on every line of a deep value stops there too.
  EXPECT_EQ(error_of("{{ ([[4 ** 10] * 4 ** 10] * 37) | tojson }}"),
            "test.jinja:1:35: a value whose JSON holds more than the sandbox's limit of 1000000 "
            "items");
  EXPECT_EQ(error_of("{% set ns = namespace(v=[1] * 1000) %}{% for i in range(200) %}"
                     "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson(indent=1024) }}"),
            "test.jinja:1:109: a list whose JSON is longer than the sandbox's limit of 67108864 "
            "bytes");
  EXPECT_EQ(render("{{ [[1, 2], {'a': [3]}] | tojson(indent=2) }}"),
            "[\n  [\n    1,\n    2\n  ],\n  {\n    \"a\": [\n      3\n    ]\n  }\n]");
  EXPECT_EQ(error_of("{{ {'a': ['x' * 10000000] * 10} }}"),
            "test.jinja:1:4: a dict whose text is longer than the sandbox's limit of 67108864 "
            "bytes");
  EXPECT_EQ(render("{{ ([7] * 999999) | length }}"), "999999");
  // A list's size is its items' bytes: 60 million items would take gigabytes (fuzz seed
  // regression-33ae5ab92f1b).
  EXPECT_EQ(error_of("a{{[[ 4 *0 ]* 6 ** 10 ]*+606}}2"),
            fmt::format("test.jinja:1:13: repetition with '*' would build {} bytes, past the "
                        "sandbox's limit of 67108864",
                        60466176 * sizeof(Value)));
  // A string's characters are a value each: a long string's take gigabytes (fuzz seed
  // regression-af1f8c9827b3: joins of joins of a string, then map over its characters).
  EXPECT_EQ(render("{{ ('x' * 100000) | list | length }} {{ ('ab' * 100000)[-1] }}"), "100000 b");
  EXPECT_EQ(error_of("{{ ('x' * 3000000) | list | length }}"),
            fmt::format("test.jinja:1:22: iterating a string would build {} bytes, past the "
                        "sandbox's limit of 67108864",
                        3000000 * sizeof(Value)));
  EXPECT_EQ(error_of("{{ ('x' * 3000000)[5] }}"),
            fmt::format("test.jinja:1:19: a string's characters would build {} bytes, past the "
                        "sandbox's limit of 67108864",
                        3000000 * sizeof(std::string)));
  // Many values each under the limit: the render's total is bounded.
  EXPECT_EQ(error_of("{% set s = 'x' * 60000000 %}{% for i in range(30) %}{{ s }}{% endfor %}"),
            "test.jinja:1:53: the template built more than the sandbox's limit of 268435456 "
            "bytes");
}

TEST(Jinja, SandboxBoundsTimeAndDepth) {
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}"),
            "test.jinja:1:29: the template ran past the sandbox's limit of 2000000 steps");
  // Parse nesting: brackets, operator chains and blocks.
  std::string deep = std::string(200, '(') + "1" + std::string(200, ')');
  EXPECT_NE(error_of("{{ " + deep + " }}")
                .find("template syntax error: the template nests "
                      "deeper than the sandbox's limit of 128"),
            std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  EXPECT_NE(error_of("{{ " + chain + " }}").find("deeper than the sandbox's limit"),
            std::string::npos);
  std::string nots;
  for (int i = 0; i < 1000; ++i) nots += "not ";
  EXPECT_NE(error_of("{{ " + nots + "1 }}").find("deeper than"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 200; ++i) blocks += "{% if 1 %}";
  EXPECT_NE(error_of(blocks).find("deeper than"), std::string::npos);
  std::string shallow = "1";
  for (int i = 0; i < 100; ++i) shallow += " + 1";
  EXPECT_EQ(render("{{ " + shallow + " }}"), "101");
  // Run-time nesting: a macro that calls itself without end.
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                .find("nests calls and expressions past the sandbox's limit of 500 levels"),
            std::string::npos);
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ n }}{% endif %}{% endmacro %}"
                   "{{ f(5) }}"),
            "12345");
}

// Few steps that each read a lot: what the builtins read in one render is bounded too
// (RenderLimits::work_bytes), so each of these ends in an error within a second, not hours.
TEST(Jinja, SandboxBoundsWhatEachStepReads) {
  const std::string spent = "read more than the sandbox's limit of 536870912 bytes";
  // A search of a 30 MB string, 10000 times.
  EXPECT_NE(error_of("{% set s = 'x' * 30000000 %}{% for i in range(10000) %}"
                     "{% if 'y' in s %}{% endif %}{% endfor %}")
                .find(spent),
            std::string::npos);
  // Its length and a method on it, in a loop.
  EXPECT_NE(error_of("{% set s = 'x' * 30000000 %}{% for i in range(10000) %}"
                     "{{ s.count('y') }}{% endfor %}")
                .find(spent),
            std::string::npos);
  // The first character of a 1.5 MB string, 1000 times: each splits it into a value a character.
  EXPECT_NE(error_of("{% set s = 'x' * 1500000 %}{% for i in range(1000) %}{{ s | first }}"
                     "{% endfor %}")
                .find(spent),
            std::string::npos);
  // One `in` that compares a list of 4 shared 20 MB strings with 100000 lists that differ from
  // it only in their last item.
  EXPECT_NE(error_of("{% set s = 'x' * 20000000 %}{{ [s] * 4 in [[s] * 3 + ['y']] * 100000 }}")
                .find(spent),
            std::string::npos);
  // Python's sum() refuses strings: summing them copies the total at each item.
  EXPECT_EQ(error_of("{{ ('x' * 1000000) | list | sum(start='') }}"),
            "test.jinja:1:29: sum() can't sum strings, use join instead");
  EXPECT_EQ(render("{{ [[1], [2, 3]] | sum(start=[]) }} {{ [1, 2.5] | sum }}"), "[1, 2, 3] 3.5");
  // Joins of joins multiply a string's length: each is checked as it grows (fuzz seed
  // regression-join-growth), not after building gigabytes.
  EXPECT_NE(error_of("{{ ('x' * 1000) | join('y' * 1000) | join('z' * 1000) }}").find("join"),
            std::string::npos);
  EXPECT_NE(error_of("{{ ('y' * 1000).join('x' * 1000000) }}").find("join()"), std::string::npos);
  // The same work under the budget renders as before.
  EXPECT_EQ(render("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{% if 'y' in s %}"
                   "{% endif %}{% endfor %}{{ s | length }}"),
            "1000000");
}

// A caller may render with smaller budgets (the fuzz target does, to keep each input short
// under the sanitizers); the error names the limit it was given.
TEST(Jinja, RenderLimitsAreTheCallers) {
  const Template t("{% for i in range(100) %}{{ i in [1, 2, 3] }}{% endfor %}", "test.jinja");
  Dict context;
  EXPECT_EQ(t.render(context).size(), 100 * 4 + 97);
  try {
    t.render(context, RenderLimits{.steps = 50});
    ADD_FAILURE() << "no error";
  } catch (const prism::Error& e) {
    EXPECT_STREQ(e.what(),
                 "test.jinja:1:38: the template ran past the sandbox's limit of 50 steps");
  }
  try {
    t.render(context, RenderLimits{.work_bytes = 1000});
    ADD_FAILURE() << "no error";
  } catch (const prism::Error& e) {
    EXPECT_NE(std::string(e.what()).find("read more than the sandbox's limit of 1000 bytes"),
              std::string::npos)
        << e.what();
  }
}

// As in jinja2's ImmutableSandboxedEnvironment: lists do not change; namespace() holds state,
// and may not come to hold itself or nest values without end.
TEST(Jinja, SandboxKeepsValuesFinite) {
  EXPECT_EQ(error_of("{% set l = [1] %}{{ l.append(2) }}"),
            "test.jinja:1:22: access to attribute 'append' of 'list' object is unsafe");
  EXPECT_EQ(error_of("{{ [1].pop() }}"),
            "test.jinja:1:7: access to attribute 'pop' of 'list' object is unsafe");
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.me = ns %}"),
            "test.jinja:1:27: a namespace cannot hold itself, directly or through the values it "
            "holds");
  EXPECT_EQ(error_of("{% set a = namespace() %}{% set b = namespace(x=[a]) %}{% set a.y = b %}"),
            "test.jinja:1:56: a namespace cannot hold itself, directly or through the values it "
            "holds");
  EXPECT_EQ(
      error_of("{% set ns = namespace(x=0) %}{% for i in range(300) %}"
               "{% set ns.x = [ns.x] %}{% endfor %}"),
      "test.jinja:1:55: a value nests lists and dicts past the sandbox's limit of 256 levels");
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}"
                   "{% endfor %}{{ ns.x }}"),
            "[[[0]]]");
}

}  // namespace
}  // namespace prism::llm::jinja
