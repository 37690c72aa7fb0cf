"""Templates for the Jinja fixture, tests/data/tokenizers/jinja_cases.json: each case is a
template and the variables it is rendered with. tools/make_tokenizer_fixtures.py renders them
with Jinja2 in the environment transformers renders chat templates in (jinja_environment
below); prism's Jinja interpreter must print the same.
"""
import json
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}, with which chat templates mark the assistant's
    text for transformers (return_assistant_tokens_mask); it renders as its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def jinja_environment():
    """A Jinja2 environment set up as transformers sets up the one apply_chat_template renders
    with (transformers/utils/chat_template_utils.py): sandboxed and immutable, `trim_blocks` and
    `lstrip_blocks` on, the loop controls (`break`, `continue`) and `{% generation %}`, a
    `tojson` filter that is Python's json.dumps (non-ASCII kept, no HTML escaping, `indent=`
    and friends), and the globals raise_exception, strftime_now and namespace."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["namespace"] = jinja2.utils.Namespace
    return env


def render_jinja_case(case):
    """(rendered text, None), or with a description of the disagreement where transformers'
    own template compiler (a private function, checked when it is there) renders otherwise."""
    rendered = jinja_environment().from_string(case["template"]).render(**case["context"])
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return rendered, None
    theirs = _compile_jinja_template(case["template"]).render(**case["context"])
    if theirs != rendered:
        return rendered, f"{case['name']}: jinja2 {rendered!r}, transformers {theirs!r}"
    return rendered, None


_MESSAGES = [
    {"role": "system", "content": "  Be brief.\n"},
    {"role": "user", "content": "Hi — «ça va»? 🦙"},
    {
        "role": "assistant",
        "content": "<think>\nhm\n</think>\n\nFine.",
        "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "y": [True, None, "é"]}}}],
    },
    {"role": "user", "content": "Bye"},
]

JINJA_CASES = [
    {
        "name": "loop variables",
        "template": "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}",
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "nested loops and else",
        "template": "{% for a in xs %}{% set outer = loop.index %}{% for b in ys %}{{ outer }}{{ b }},{% else %}none{% endfor %};{% endfor %}{% for z in [] %}x{% else %}empty{% endfor %}",
        "context": {"xs": [1, 2], "ys": ["a", "b"]},
    },
    {
        "name": "loop filter",
        "template": '{% for x in xs if x > 1 %}{{ x }}{{ "," if not loop.last }}{% endfor %}',
        "context": {"xs": [3, 1, 2, 0, 5]},
    },
    {
        "name": "dict iteration",
        "template": "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d | items %}{{ v }}{% endfor %}",
        "context": {"d": {"zeta": 1, "alpha": 2, "mid": 3}},
    },
    {
        "name": "namespace",
        "template": '{% set ns = namespace(count=0, last="") %}{% for m in messages %}{% if m.role == "user" %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.content %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.last }}',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "macros",
        "template": '{% macro tag(name, body="", close=true) %}<{{ name }}>{{ body }}{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag("a") }}{{ tag("b", "x") }}{{ tag("c", body="y", close=false) }}',
        "context": {},
    },
    {
        "name": "whitespace control",
        "template": 'start\n{%- for m in messages %}\n  {{- m.role }}\n{%- endfor %}\nend  {{- "!" -}}  \n\n done',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "trim and lstrip blocks",
        "template": "<list>\n  {% for m in messages %}\n    <item>{{ m.role }}</item>\n  {% endfor %}\n</list>\n{# comment #}\n{% if true %}\n  yes\n{% endif %}\n",
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "string filters",
        "template": '[{{ s | trim }}][{{ s | upper }}][{{ s | lower }}][{{ "hello world" | capitalize }}][{{ s | replace("o", "0") }}][{{ s | length }}][{{ 42 | string }}{{ "7" | int + 1 }}]',
        "context": {"s": "  Foo Bar ö  "},
    },
    {
        "name": "list filters",
        "template": '{{ xs | join(", ") }}|{{ xs | first }}|{{ xs | last }}|{{ xs | length }}|{{ missing | default("dflt") }}|{{ "" | default("empty", true) }}',
        "context": {"xs": ["a", "b", "c"]},
    },
    {
        "name": "selectattr, rejectattr, map",
        "template": '{{ messages | selectattr("role", "equalto", "user") | map(attribute="content") | join(" / ") }}|{{ messages | rejectattr("role", "equalto", "user") | map(attribute="role") | join(",") }}|{{ messages | selectattr("tool_calls") | list | length }}',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "tests",
        "template": '{% for v in [s, n, d, l, z] %}{{ "S" if v is string else "s" }}{{ "N" if v is number else "n" }}{{ "M" if v is mapping else "m" }}{{ "I" if v is iterable and v is not mapping else "i" }}{{ "0" if v is none else "1" }} {% endfor %}{{ "D" if s is defined else "d" }}{{ "U" if nothing is defined else "u" }}{{ "E" if n == 3 else "e" }}',
        "context": {"s": "x", "n": 3, "d": {"a": 1}, "l": [1], "z": None},
    },
    {
        "name": "slicing and indexing",
        "template": "{{ xs[1:] | join }}|{{ xs[:-1] | join }}|{{ xs[::-1] | join }}|{{ xs[-1] }}|{{ s[1:4] }}|{{ s[::-1] }}|{{ s[0] }}{{ xs[0] }}",
        "context": {"xs": ["a", "b", "c", "d"], "s": "héllo"},
    },
    {
        "name": "string methods",
        "template": '{{ "Y" if s.startswith("<think>") else "N" }}{{ "Y" if s.endswith("Fine.") else "N" }}|{{ s.split("</think>")[-1].lstrip("\\n") }}|{{ s.split("</think>")[0].rstrip("\\n").split("<think>")[-1].lstrip("\\n") }}|{{ " x ".strip() }}|{{ "a-b-c".replace("-", "+") }}|{{ "Ab".upper() }}{{ "Ab".lower() }}|{{ "a b  c".split() | join(",") }}',
        "context": {"s": "<think>\nhm\n</think>\n\nFine."},
    },
    {
        "name": "tojson",
        "template": '{{ messages[2].tool_calls[0].function.arguments | tojson }}|{{ {"k": [1, 2, {"x": "ü\\"q"}]} | tojson }}|{{ xs | tojson(indent=2) }}',
        "context": {"messages": _MESSAGES, "xs": [1, {"a": "b"}]},
    },
    {
        "name": "operators",
        "template": '{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ "a" ~ 1 ~ "b" }} {{ "x" + "y" }} {{ ([1] + [2]) | length }} {{ 2 ** 10 }} {{ "yes" if 1 < 2 and not 3 < 2 or false else "no" }} {{ "in" if "b" in ["a", "b"] else "out" }} {{ "k" if "z" not in {"a": 1} else "-" }}',
        "context": {},
    },
    {
        "name": "attribute and subscript",
        "template": '{{ messages[0]["role"] }} {{ messages[1].role }} {{ messages[0].content | trim }} {{ "T" if messages[2].tool_calls is defined else "F" }}{{ "T" if messages[1].tool_calls is defined else "F" }}{{ "N" if messages[2].reasoning is not defined else "-" }}',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "set and scoping",
        "template": "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% set a, b = [3, 4] %}{{ a + b }}",
        "context": {},
    },
    {
        "name": "range and arithmetic",
        "template": "{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}|{{ range(5) | length }}",
        "context": {},
    },
    {
        "name": "escapes and literals",
        "template": "{{ \"tab:\\t|newline:\\n|quote:\\\"|single:'\" }}{{ 'single \"quoted\"' }}",
        "context": {},
    },
    {
        "name": "chat-like",
        "template": "{{- bos_token }}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n        {{- '<|system|>\\n' + message['content'] | trim + '\\n' }}\n    {%- elif message['role'] == 'user' %}\n        {{- '<|user|>\\n' + message['content'] + '\\n' }}\n    {%- else %}\n        {{- '<|assistant|>\\n' + message['content'].split('</think>')[-1] | trim + eos_token + '\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|assistant|>\\n' }}\n{%- endif %}",
        "context": {"messages": _MESSAGES, "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True},
    },
    {
        "name": "if elif else chains",
        "template": "{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one{% elif n % 2 == 0 %}even{% else %}other{% endif %} {% endfor %}",
        "context": {},
    },
    # Beyond the first version of this fixture: what Python's Jinja2 does its own way.
    {
        "name": "printing values",
        "template": '{{ none }}|{{ true }}|{{ false }}|{{ z }}|{{ 1.0 }}|{{ 2.50 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ -0.5 }}|{{ [1, "a", none, true, 2.5] }}|{{ {"k": "v", "n": none} }}|{{ ["it\'s", \'say "hi"\'] }}|{{ [] }}{{ {} }}',
        "context": {"z": None},
    },
    {
        "name": "capitalize and title",
        "template": '{{ "hELLO wORLD" | capitalize }}|{{ "hello wORLD-x (y) [z] <w>" | title }}|{{ "they\'re bill\'s" | title }}|{{ "aBC dEF".capitalize() }}|{{ "they\'re bill\'s".title() }}',
        "context": {},
    },
    {
        "name": "tests with arguments",
        "template": '{{ 6 is divisibleby(3) }}|{{ 7 is divisibleby 2 }}|{{ 3 is equalto 3 }}|{{ 3 is eq(4) }}|{{ 5 is gt 3 }}|{{ 2 is le(2) }}|{{ "a" is in ["a", "b"] }}|{{ 3 is odd }}|{{ 4 is even }}|{{ [1, 2, 3, 4] | select("odd") | join(",") }}|{{ [1, 2, 3, 4] | reject("divisibleby", 2) | join(",") }}|{{ messages | selectattr("role", "in", ["system", "assistant"]) | map(attribute="role") | join(",") }}|{{ "ABC" is upper }}{{ "abc" is lower }}',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "type tests",
        "template": '{% for v in [s, n, f, d, l, z, t] %}{{ v is iterable }},{{ v is sequence }},{{ v is mapping }},{{ v is string }},{{ v is number }},{{ v is integer }},{{ v is float }},{{ v is boolean }},{{ v is none }};{% endfor %}',
        "context": {"s": "x", "n": 3, "f": 1.5, "d": {"a": 1}, "l": [1], "z": None, "t": True},
    },
    {
        "name": "loop scopes and controls",
        "template": '{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}|{{ x }}|{% for i in [1, 2, 3] %}{% if i > 1 %}{{ y | default("-") }}{% endif %}{% set y = i %}{{ y }}{% endfor %}|{% for a in [1, 2, 3, 4, 5] %}{% if a == 2 %}{% continue %}{% endif %}{% if a == 5 %}{% break %}{% endif %}{{ a }}{{ loop.previtem | default("^") }}{{ loop.nextitem | default("$") }}{{ loop.cycle("x", "y") }} {% endfor %}|{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}',
        "context": {},
    },
    {
        "name": "more filters",
        "template": '{{ [3, 1, 2] | sort | join }}|{{ ["b", "A", "c"] | sort | join }}|{{ [3, 1, 2] | sort(reverse=true) | join }}|{{ [3, 1, 2] | max }}{{ [3, 1, 2] | min }}{{ [1, 2, 3] | sum }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 7 | round }}|{{ [1, 1, 2, "a", "A"] | unique | join(",") }}|{{ {"b": 1, "a": 2} | dictsort | map("first") | join }}|{{ "x\ny" | indent(2) }}|{{ "x\ny" | indent(2, true) }}|{{ [1, 2] | reverse | join }}|{{ "abc" | reverse }}|{{ "3.5" | float }}|{{ 3 | float }}|{{ "12" | int + "3" | int }}|{{ "x" | int }}|{{ [[1, 2], [3]] | map("length") | join }}|{{ messages | map(attribute="role") | unique | list | length }}|{{ "a" | d("b") }}{{ missing | d("b") }}|{{ [1, 2] | first }}{{ "xyz" | last }}',
        "context": {"messages": _MESSAGES},
    },
    {
        "name": "string and collection methods",
        "template": '{{ "a,b,,c".split(",") | length }}|{{ "  x  ".lstrip() }}.|{{ "xxhixx".strip("x") }}|{{ "Hello".find("l") }}{{ "Hello".find("z") }}|{{ "Hello".count("l") }}|{{ "-".join(["a", "b"]) }}|{{ "a\nb\r\nc".splitlines() | length }}|{{ "123".isdigit() }}{{ "abc".isalpha() }}{{ " ".isspace() }}|{{ "Hello".replace("l", "L", 1) }}|{{ "a b c".split(" ", 1) | join("|") }}|{{ "abc".startswith(("x", "a")) }}|{{ d.get("a") }}{{ d.get("z", "none") }}{{ d.get("z") }}|{{ d.keys() | list | join }}|{{ d.values() | sum }}|{{ "a" in d }}|{{ d.items() | list | length }}|{{ [1, 2, 3].index(2) }}{{ [1, 2, 2].count(2) }}',
        "context": {"d": {"a": 1, "b": 2}},
    },
    {
        "name": "block forms",
        "template": 'a\n  {%+ if true %}x{% endif %}\n  {% if true %}y{% endif %}\nz|{% raw %}{{ not rendered }}{% endraw %}|{% set body %}Hello {{ name }}{% endset %}[{{ body }}]|{% generation %}gen {{ name }}{% endgeneration %}|{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }},{{ m(1, b=3) }},{{ m(a=5) }}',
        "context": {"name": "X"},
    },
]
