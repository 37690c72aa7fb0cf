"""`prism serve`'s tools: a conversation with tools, an earlier call (its arguments sent as JSON
text, as OpenAI's clients do) and the tools' results reaches the model as transformers renders
it through Qwen 3's template (the prompt's token count against the committed rendering); an
answer without calls streams as without tools; tool_choice "none" leaves the tools out, and
"required" or a named function gets one call, streamed or not, its arguments valid against the
function's parameters (by the jsonschema package); a model whose template shows no tool calls,
and bad tools, get 400s. Usage: tools_test.py PRISM
QWEN_DIR LLAMA_DIR REFERENCE_JSON (tiny checkpoints beside their tokenizers, and the Qwen 3
tokenizer's reference renderings)."""
import json
import sys

import jsonschema
import openai
from tokenizers import Tokenizer

import serve_util
from serve_util import check

PRISM, QWEN, LLAMA, REFERENCE = sys.argv[1:5]
chat = next(c for c in json.load(open(REFERENCE))["chats"] if c["name"] == "tools")
tokenizer = Tokenizer.from_file(f"{QWEN}/tokenizer.json")

# The conversation up to the tools' results; the assistant's call with its arguments as text.
messages = json.loads(json.dumps(chat["messages"][:5]))
for call in messages[2]["tool_calls"]:
    call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    call["id"] = "call_1"
rendered = chat["rendered"]
start = "<|im_start|>assistant\n"
want_prompt = rendered[:rendered.rindex(start)] + start

proc, port = serve_util.start(PRISM, QWEN, "--parallel=2")
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
try:
    r = client.chat.completions.create(model="tiny", messages=messages, tools=chat["tools"],
                                       max_tokens=8, temperature=0)
    want = len(tokenizer.encode(want_prompt, add_special_tokens=False).ids)
    check("the conversation with tools = transformers' rendering", r.usage.prompt_tokens == want,
          f"{r.usage.prompt_tokens} tokens, want {want}")
    text = r.choices[0].message.content
    check("an answer without calls", r.choices[0].message.tool_calls is None and
          r.choices[0].finish_reason == "length" and text, str(r.choices[0]))
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=messages, tools=chat["tools"], max_tokens=8, temperature=0,
        stream=True) if c.choices)
    check("streamed with tools = not", streamed == text, f"{streamed!r} vs {text!r}")
    n = client.chat.completions.create(model="tiny", messages=messages, tools=chat["tools"],
                                       tool_choice="none", max_tokens=1, temperature=0)
    check("tool_choice none: the tools left out", n.usage.prompt_tokens < want,
          str(n.usage.prompt_tokens))

    # tool_choice "required", or one function by name: the answer is held to a call in the
    # template's format, its arguments to the function's parameters (the biases toward '"' and
    # '}' close the strings and objects early on these weights).
    more_tools = chat["tools"] + [{"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in more_tools}
    closing = {str(tokenizer.token_to_id('"')): 30, str(tokenizer.token_to_id("}")): 20}
    for choice, names in [("required", {"get_weather", "get_time"}),
                          ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})]:
        r = client.chat.completions.create(model="tiny", messages=messages[:2], tools=more_tools,
                                           tool_choice=choice, max_tokens=150, temperature=0,
                                           logit_bias=closing)
        calls = r.choices[0].message.tool_calls or []
        check(f"tool_choice {choice}: one call", r.choices[0].finish_reason == "tool_calls" and
              len(calls) == 1 and calls[0].function.name in names and
              isinstance(json.loads(calls[0].function.arguments), dict) and
              calls[0].id.startswith("call_") and r.choices[0].message.content is None,
              str(r.choices[0]))
        if calls:
            errors = list(jsonschema.Draft202012Validator(parameters[calls[0].function.name])
                          .iter_errors(json.loads(calls[0].function.arguments)))
            check(f"tool_choice {choice}: the arguments valid", not errors,
                  f"{calls[0].function.arguments} {errors}")
        chunks = list(client.chat.completions.create(
            model="tiny", messages=messages[:2], tools=more_tools, tool_choice=choice,
            max_tokens=150, temperature=0, logit_bias=closing, stream=True))
        streamed = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        check(f"tool_choice {choice} streamed: the same call in one chunk",
              finish == "tool_calls" and len(streamed) == 1 and streamed[0].index == 0 and
              (streamed[0].function.name, streamed[0].function.arguments) ==
              (calls[0].function.name, calls[0].function.arguments) and
              "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "",
              str(chunks[-3:]))

    # Qwen's vocabulary is padded past its tokenizer's (151936 rows, 151669 tokens): a row
    # with no token, picked, makes no text (as transformers decodes it) rather than an error.
    padded = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0,
        logit_bias={"151800": 100}, logprobs=True, top_logprobs=2)
    check("a padded row picked: no text, no error",
          padded.choices[0].message.content == "" and
          [e.token for e in padded.choices[0].logprobs.content] == [""] * 3,
          str(padded.choices[0]))
    scored = client.completions.create(model="tiny", prompt=[9707, 151800, 11], max_tokens=0,
                                       echo=True, logprobs=1)
    check("a padded row in a scored prompt", scored.choices[0].logprobs.tokens[1] == "" and
          scored.choices[0].logprobs.token_logprobs[1] is not None, str(scored.choices[0]))

    def error_of(**fields):
        try:
            client.chat.completions.create(model="tiny", max_tokens=1, **{
                "messages": [{"role": "user", "content": "hi"}], **fields})
        except openai.APIStatusError as e:
            return e.status_code, e.body.get("param")
        return None, None

    tool = chat["tools"][0]
    for fields, param in [({"tools": [{"type": "function"}]}, "tools"),
                          ({"tools": {"a": 1}}, "tools"),
                          ({"tool_choice": "required"}, "tool_choice"),
                          ({"tools": [tool], "tool_choice": {"type": "function",
                                                             "function": {"name": "x"}}},
                           "tool_choice"),
                          ({"tools": [tool], "tool_choice": "always"}, "tool_choice"),
                          ({"tools": [tool], "tool_choice": "required",
                            "response_format": {"type": "json_object"}}, "response_format"),
                          ({"tools": [{"type": "function", "function": {"name": "a b"}}]},
                           "tools"),
                          ({"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]},
                           "messages")]:
        check(f"bad {list(fields)}: 400", error_of(**fields) == (400, param),
              str(error_of(**fields)))
finally:
    proc.terminate()
    proc.wait(timeout=30)

proc, port = serve_util.start(PRISM, LLAMA)
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
try:
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                       tools=chat["tools"], max_tokens=1)
        status = None
    except openai.APIStatusError as e:
        status = e.status_code, e.body.get("param")
    check("tools for a template without tool calls: 400", status == (400, "tools"), str(status))
finally:
    proc.terminate()
    proc.wait(timeout=30)
serve_util.finish()
