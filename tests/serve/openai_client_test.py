"""`prism serve` through the official OpenAI client: the answers `prism llm` gives, streamed
and not, the same answer for every one of 16 concurrent clients as alone, bad requests as
OpenAI-style 4xx errors while the server keeps serving, and SIGTERM finishing the running
request. Usage: openai_client_test.py PRISM MODEL_DIR (a checkpoint with its tokenizer)."""
import concurrent.futures
import json
import re
import signal
import sys
import time
import urllib.error
import urllib.request

import openai

import serve_util
from serve_util import check

PRISM, MODEL = sys.argv[1], sys.argv[2]
KEY = "test-key"


def start(*extra):
    return serve_util.start(PRISM, MODEL, "--parallel=4", f"--api-key={KEY}", "--max-body=4096",
                            *extra)


def llm_text(prompt, max_tokens):
    return serve_util.llm_text(PRISM, MODEL, prompt, max_tokens)


def raw(port, path, body, key=KEY):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


proc, port = start()
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)

# Greedy answers equal prism llm's for the same conversation, streamed or not.
prompts = [f"Tell me about {w}." for w in
           ["France", "the sea", "cats", "prime numbers", "rain", "jazz", "bread", "Mars",
            "glass", "tea", "maps", "owls", "salt", "clocks", "wind", "paper"]]
want = llm_text(prompts[0], 12)


def chat(prompt, stream=False):
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                           temperature=0)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish, usage


text, finish, usage = chat(prompts[0])
check("chat = prism llm --prompt", text == want, f"{text!r} vs {want!r}")
check("chat finish_reason and usage", finish == "length" and usage.completion_tokens == 12 and
      usage.total_tokens == usage.prompt_tokens + 12, f"{finish} {usage}")
stext, sfinish, susage = chat(prompts[0], stream=True)
check("streamed chat = chat", (stext, sfinish) == (text, finish), f"{stext!r} {sfinish}")
check("streamed usage", susage is not None and susage.completion_tokens == 12, str(susage))

c = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8,
                              temperature=0)
streamed = "".join(x.choices[0].text for x in client.completions.create(
    model="tiny", prompt="Once upon a time", max_tokens=8, temperature=0, stream=True)
    if x.choices)
check("completion streamed = not", streamed == c.choices[0].text and
      c.usage.completion_tokens == 8, f"{streamed!r} vs {c.choices[0].text!r}")
page = urllib.request.urlopen(f"http://127.0.0.1:{port}/").read().decode()
check("the chat page", page.startswith("<!doctype html>") and "/v1/chat/completions" in page and
      "getReader" in page, page[:200])
models = client.models.list()
check("models", [m.id for m in models.data] == ["tiny"], str(models))

# Stop strings end the answer before them.
stop_at = text[len(text) // 2:len(text) // 2 + 2]
r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompts[0]}],
                                   max_tokens=12, temperature=0, stop=[stop_at])
check("stop string", r.choices[0].message.content == text[:text.find(stop_at)] and
      r.choices[0].finish_reason == "stop", f"{r.choices[0].message.content!r} ({stop_at!r})")

# 16 concurrent streaming clients get what each gets alone.
alone = [chat(p)[0] for p in prompts]
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    together = list(pool.map(lambda p: chat(p, stream=True)[0], prompts))
check("16 concurrent clients = alone", together == alone,
      str([(a, b) for a, b in zip(alone, together) if a != b][:2]))

# Bad requests: OpenAI-style errors, and the server goes on.
def error_of(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        return e.status_code, e.body
    return None, None


status, body = error_of(lambda: openai.OpenAI(
    base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list())
check("wrong key: 401", status == 401 and body["code"] == "invalid_api_key", f"{status} {body}")
status, body = error_of(lambda: client.chat.completions.create(
    model="other", messages=[{"role": "user", "content": "hi"}]))
check("unknown model: 404", status == 404 and body["code"] == "model_not_found", f"{status} {body}")
status, body = error_of(lambda: client.chat.completions.create(
    model="tiny", messages=[{"role": "user", "content": "word " * 400}]))
check("prompt longer than the context: 400", status == 400 and
      body["code"] == "context_length_exceeded", f"{status} {body}")
status, body = raw(port, "/v1/chat/completions", b"{not json")
check("malformed JSON: 400", status == 400 and "not valid JSON" in body["error"]["message"],
      f"{status} {body}")
status, body = raw(port, "/v1/chat/completions",
                   json.dumps({"messages": [{"role": "user", "content": "hi"}],
                               "temperature": "hot"}).encode())
check("wrong type: 400", status == 400 and body["error"]["param"] == "temperature",
      f"{status} {body}")
status, body = raw(port, "/v1/completions", json.dumps({"prompt": "x" * 5000}).encode())
check("oversized body: 413", status == 413 and "larger than 4096" in body["error"]["message"],
      f"{status} {body}")
check("still serving after the errors", chat(prompts[0])[0] == want)

# A client that goes away mid-stream: its generation stops (the metrics count it), its slot
# serves the next request.
stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                        max_tokens=200, temperature=0, stream=True)
next(iter(stream))
stream.close()
cancelled = 0
for _ in range(100):
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    cancelled = int(re.search(r"^prism_cancelled_total (\d+)", metrics, re.M).group(1))
    if cancelled:
        break
    time.sleep(0.05)
check("a client gone mid-stream cancels its generation", cancelled == 1, metrics[:600])
for _ in range(100):
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    if re.search(r"^prism_batch_size 0$", metrics, re.M):
        break
    time.sleep(0.05)
check("and frees its slot", re.search(r"^prism_batch_size 0$", metrics, re.M) and
      re.search(r"^prism_slots 4$", metrics, re.M), metrics)
check("and the server goes on", chat(prompts[1])[0] == alone[1])
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
check("metrics", "prism_generated_tokens_total" in metrics and
      'prism_requests_total{status="401"} 1' in metrics and
      "prism_time_to_first_token_seconds_count" in metrics, metrics[:300])

# SIGTERM while an answer streams (its first chunk is in): the answer still arrives whole,
# then the server stops.
stream = client.chat.completions.create(model="tiny",
                                        messages=[{"role": "user", "content": prompts[2]}],
                                        max_tokens=12, temperature=0, stream=True)
chunks = iter(stream)
next(chunks)
proc.send_signal(signal.SIGTERM)
rest = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check("SIGTERM: the running answer finishes", rest == alone[2], f"{rest!r} vs {alone[2]!r}")
code = proc.wait(timeout=30)
check("SIGTERM: exits 0", code == 0, str(code))

serve_util.finish()
