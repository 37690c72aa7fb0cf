// Templates for the Jinja fixture (tools/make_tokenizer_fixtures.mjs renders them with
// @huggingface/jinja, the engine transformers.js uses). They avoid what that engine does
// differently from Jinja2 in Python, which transformers uses and prism follows: printing none
// and booleans ("" and "true" for "None" and "True"), `capitalize` (Python lowercases the rest),
// `is iterable` on a dict (true in Python), and tests with arguments (not parsed).

const messages = [
  { role: 'system', content: '  Be brief.\n' },
  { role: 'user', content: 'Hi — «ça va»? 🦙' },
  { role: 'assistant', content: '<think>\nhm\n</think>\n\nFine.', tool_calls: [{ function: { name: 'f', arguments: { x: 1, y: [true, null, 'é'] } } }] },
  { role: 'user', content: 'Bye' },
];

export const JINJA_CASES = [
  {
    name: 'loop variables',
    template: '{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}',
    context: { messages },
  },
  {
    name: 'nested loops and else',
    template: '{% for a in xs %}{% set outer = loop.index %}{% for b in ys %}{{ outer }}{{ b }},{% else %}none{% endfor %};{% endfor %}{% for z in [] %}x{% else %}empty{% endfor %}',
    context: { xs: [1, 2], ys: ['a', 'b'] },
  },
  {
    name: 'loop filter',
    template: '{% for x in xs if x > 1 %}{{ x }}{{ "," if not loop.last }}{% endfor %}',
    context: { xs: [3, 1, 2, 0, 5] },
  },
  {
    name: 'dict iteration',
    template: '{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d | items %}{{ v }}{% endfor %}',
    context: { d: { zeta: 1, alpha: 2, mid: 3 } },
  },
  {
    name: 'namespace',
    template: '{% set ns = namespace(count=0, last="") %}{% for m in messages %}{% if m.role == "user" %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.content %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.last }}',
    context: { messages },
  },
  {
    name: 'macros',
    template: '{% macro tag(name, body="", close=true) %}<{{ name }}>{{ body }}{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag("a") }}{{ tag("b", "x") }}{{ tag("c", body="y", close=false) }}',
    context: {},
  },
  {
    name: 'whitespace control',
    template: 'start\n{%- for m in messages %}\n  {{- m.role }}\n{%- endfor %}\nend  {{- "!" -}}  \n\n done',
    context: { messages },
  },
  {
    name: 'trim and lstrip blocks',
    template: '<list>\n  {% for m in messages %}\n    <item>{{ m.role }}</item>\n  {% endfor %}\n</list>\n{# comment #}\n{% if true %}\n  yes\n{% endif %}\n',
    context: { messages },
  },
  {
    name: 'string filters',
    template: '[{{ s | trim }}][{{ s | upper }}][{{ s | lower }}][{{ "hello world" | capitalize }}][{{ s | replace("o", "0") }}][{{ s | length }}][{{ 42 | string }}{{ "7" | int + 1 }}]',
    context: { s: '  Foo Bar ö  ' },
  },
  {
    name: 'list filters',
    template: '{{ xs | join(", ") }}|{{ xs | first }}|{{ xs | last }}|{{ xs | length }}|{{ missing | default("dflt") }}|{{ "" | default("empty", true) }}',
    context: { xs: ['a', 'b', 'c'] },
  },
  {
    name: 'selectattr, rejectattr, map',
    template: '{{ messages | selectattr("role", "equalto", "user") | map(attribute="content") | join(" / ") }}|{{ messages | rejectattr("role", "equalto", "user") | map(attribute="role") | join(",") }}|{{ messages | selectattr("tool_calls") | list | length }}',
    context: { messages },
  },
  {
    name: 'tests',
    template: '{% for v in [s, n, d, l, z] %}{{ "S" if v is string else "s" }}{{ "N" if v is number else "n" }}{{ "M" if v is mapping else "m" }}{{ "I" if v is iterable and v is not mapping else "i" }}{{ "0" if v is none else "1" }} {% endfor %}{{ "D" if s is defined else "d" }}{{ "U" if nothing is defined else "u" }}{{ "E" if n == 3 else "e" }}',
    context: { s: 'x', n: 3, d: { a: 1 }, l: [1], z: null },
  },
  {
    name: 'slicing and indexing',
    template: '{{ xs[1:] | join }}|{{ xs[:-1] | join }}|{{ xs[::-1] | join }}|{{ xs[-1] }}|{{ s[1:4] }}|{{ s[::-1] }}|{{ s[0] }}{{ xs[0] }}',
    context: { xs: ['a', 'b', 'c', 'd'], s: 'héllo' },
  },
  {
    name: 'string methods',
    template: '{{ "Y" if s.startswith("<think>") else "N" }}{{ "Y" if s.endswith("Fine.") else "N" }}|{{ s.split("</think>")[-1].lstrip("\\n") }}|{{ s.split("</think>")[0].rstrip("\\n").split("<think>")[-1].lstrip("\\n") }}|{{ " x ".strip() }}|{{ "a-b-c".replace("-", "+") }}|{{ "Ab".upper() }}{{ "Ab".lower() }}|{{ "a b  c".split() | join(",") }}',
    context: { s: '<think>\nhm\n</think>\n\nFine.' },
  },
  {
    name: 'tojson',
    template: '{{ messages[2].tool_calls[0].function.arguments | tojson }}|{{ {"k": [1, 2, {"x": "ü\\"q"}]} | tojson }}|{{ xs | tojson(indent=2) }}',
    context: { messages, xs: [1, { a: 'b' }] },
  },
  {
    name: 'operators',
    template: '{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ "a" ~ 1 ~ "b" }} {{ "x" + "y" }} {{ ([1] + [2]) | length }} {{ 2 ** 10 }} {{ "yes" if 1 < 2 and not 3 < 2 or false else "no" }} {{ "in" if "b" in ["a", "b"] else "out" }} {{ "k" if "z" not in {"a": 1} else "-" }}',
    context: {},
  },
  {
    name: 'attribute and subscript',
    template: '{{ messages[0]["role"] }} {{ messages[1].role }} {{ messages[0].content | trim }} {{ "T" if messages[2].tool_calls is defined else "F" }}{{ "T" if messages[1].tool_calls is defined else "F" }}{{ "N" if messages[2].reasoning is not defined else "-" }}',
    context: { messages },
  },
  {
    name: 'set and scoping',
    template: '{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% set a, b = [3, 4] %}{{ a + b }}',
    context: {},
  },
  {
    name: 'range and arithmetic',
    template: '{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}|{{ range(5) | length }}',
    context: {},
  },
  {
    name: 'escapes and literals',
    template: '{{ "tab:\\t|newline:\\n|quote:\\"|single:\'" }}{{ \'single "quoted"\' }}',
    context: {},
  },
  {
    name: 'chat-like',
    template: "{{- bos_token }}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n        {{- '<|system|>\\n' + message['content'] | trim + '\\n' }}\n    {%- elif message['role'] == 'user' %}\n        {{- '<|user|>\\n' + message['content'] + '\\n' }}\n    {%- else %}\n        {{- '<|assistant|>\\n' + message['content'].split('</think>')[-1] | trim + eos_token + '\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|assistant|>\\n' }}\n{%- endif %}",
    context: { messages, bos_token: '<s>', eos_token: '</s>', add_generation_prompt: true },
  },
  {
    name: 'if elif else chains',
    template: '{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one{% elif n % 2 == 0 %}even{% else %}other{% endif %} {% endfor %}',
    context: {},
  },
];
