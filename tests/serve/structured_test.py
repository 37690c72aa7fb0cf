"""`prism serve`'s structured outputs (response_format json_schema). Through the official OpenAI
client's `chat.completions.parse` with pydantic models (enums, literals, nested optional models,
bounds, patterns, datetimes, dates, UUIDs, IPv4 addresses): the strict schema the client makes
of them, and the answer read back into the model by pydantic. Schemas sent as they are (pydantic's
own, with optional fields; a recursive one; a list at the root; through /v1/completions): every
answer the sampled random weights finish is valid against its schema by the jsonschema package,
and none is left with no token to pick. Greedy streamed = not; schemas prism cannot hold to
get 400s. Usage: structured_test.py PRISM MODEL_DIR (the tiny Llama checkpoint beside the
Llama 3.1 tokenizer)."""
import datetime
import enum
import ipaddress
import json
import sys
import uuid
from typing import Literal, Optional

import jsonschema
import openai
import pydantic
from tokenizers import Tokenizer

import serve_util
from serve_util import check

PRISM, MODEL = sys.argv[1], sys.argv[2]
tokenizer = Tokenizer.from_file(f"{MODEL}/tokenizer.json")


class Mood(str, enum.Enum):
    calm = "calm"
    busy = "busy"


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog"]
    name: str = pydantic.Field(max_length=6)
    lives: int = pydantic.Field(ge=0, le=9)


class Report(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=8)
    code: str = pydantic.Field(pattern=r"^[A-Z]{3}-\d{2,4}$", max_length=7)
    days: list[pydantic.conint(gt=-10, lt=400)] = pydantic.Field(max_length=3)
    mood: Mood
    pet: Optional[Pet]
    ok: bool
    score: float = pydantic.Field(ge=-1, lt=2.5)
    when: datetime.datetime
    day: datetime.date
    ref: uuid.UUID
    host: ipaddress.IPv4Address


# Random weights rarely close what they open: biases toward the bytes that close strings,
# objects and lists (strings, lists and numbers have bounds, so every answer ends).
closing = {str(tokenizer.token_to_id(t)): b for t, b in [('"', 6), ("}", 5), ("]", 5)]}
messages = [{"role": "user", "content": "Report, as JSON."}]

proc, port = serve_util.start(PRISM, MODEL, "--parallel=4")
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
try:
    ended = 0
    for seed in range(6):
        try:
            r = client.chat.completions.parse(model="tiny", messages=messages,
                                              response_format=Report, max_tokens=300,
                                              temperature=1.0, seed=seed, logit_bias=closing)
        except openai.LengthFinishReasonError:
            continue
        ended += 1
        parsed = r.choices[0].message.parsed
        check(f"parse (seed {seed}): a Report, read back by pydantic",
              isinstance(parsed, Report) and r.choices[0].finish_reason == "stop",
              str(r.choices[0]))
    check("parse: most sampled answers end", ended >= 4, str(ended))

    def schema_format(schema, name="answer"):
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}

    tree = {"$ref": "#/$defs/node", "$defs": {"node": {
        "type": "object", "properties": {
            "v": {"type": "integer"}, "tag": {"enum": ["a", "b", None]},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}}}
    listed = {"type": "array", "minItems": 1, "maxItems": 3,
              "items": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "boolean"},
                                  {"type": "object", "properties": {"n": {"type": "number"}},
                                   "required": ["n"]}]}}
    schemas = [("pydantic's own (optional fields, $defs)", Report.model_json_schema()),
               ("recursive", tree), ("a list at the root", listed)]
    for name, schema in schemas:
        # (Formats checked too: date, date-time by rfc3339-validator, uuid, ipv4.)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        ended = 0
        for seed in range(6):
            r = client.chat.completions.create(model="tiny", messages=messages,
                                               response_format=schema_format(schema),
                                               max_tokens=300, temperature=1.0, seed=seed,
                                               logit_bias=closing)
            content, finish = r.choices[0].message.content, r.choices[0].finish_reason
            check(f"{name} (seed {seed}): ends or runs to the length", finish in ("stop", "length"),
                  str(r.choices[0]))
            if finish != "stop":
                continue
            ended += 1
            errors = list(validator.iter_errors(json.loads(content)))
            check(f"{name} (seed {seed}): valid", not errors, f"{content} {errors}")
        check(f"{name}: most sampled answers end", ended >= 4, str(ended))

    # Greedy: streamed = not, and the completions endpoint holds to it too.
    fmt = schema_format(tree)
    r = client.chat.completions.create(model="tiny", messages=messages, response_format=fmt,
                                       max_tokens=200, temperature=0, logit_bias=closing)
    text = r.choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=messages, response_format=fmt, max_tokens=200, temperature=0,
        logit_bias=closing, stream=True) if c.choices)
    check("greedy: valid", r.choices[0].finish_reason == "stop" and
          not list(jsonschema.Draft202012Validator(tree).iter_errors(json.loads(text))), text)
    check("greedy streamed = not", streamed == text, f"{streamed!r} {text!r}")
    c = client.completions.create(model="tiny", prompt="JSON:", max_tokens=200, temperature=0,
                                  logit_bias=closing, extra_body={"response_format": fmt})
    check("completions: valid", c.choices[0].finish_reason == "stop" and
          not list(jsonschema.Draft202012Validator(tree).iter_errors(
              json.loads(c.choices[0].text))), c.choices[0].text)

    def error_of(response_format):
        try:
            client.chat.completions.create(model="tiny", messages=messages, max_tokens=2,
                                           response_format=response_format)
        except openai.APIStatusError as e:
            return e.status_code, e.body.get("param"), e.body.get("message")
        return None, None, None

    for response_format, words in [
            ({"type": "json_schema", "json_schema": {"name": "x"}}, "needs"),
            (schema_format({"type": "string", "pattern": "^(a+"}), "'(' without ')'"),
            (schema_format({"type": "string", "pattern": r"(a)\1"}), "back references"),
            (schema_format({"properties": {"n": {"minimum": 0}}}),
             "at /properties/n: 'minimum' needs 'type'"),
            (schema_format({"properties": {"n": {"type": "integer", "multipleOf": 3}}}),
             "at /properties/n: 'multipleOf' is not supported"),
            (schema_format({"$ref": "https://example.com/s.json"}), "refer into the schema"),
            (schema_format({"$ref": "#/$defs/gone"}), "refers to nothing"),
            (schema_format({"type": "object", "required": ["a"]}), "does not declare"),
            ({"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}, "'name'"),
            ({"type": "xml"}, "json_schema")]:
        status, param, message = error_of(response_format)
        check(f"bad {json.dumps(response_format)[:60]}: 400 naming it",
              (status, param) == (400, "response_format") and words in (message or ""),
              f"{status} {param} {message}")
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    check("the server keeps serving", r.choices[0].finish_reason == "length", str(r))
finally:
    proc.terminate()
    proc.wait(timeout=30)
serve_util.finish()
