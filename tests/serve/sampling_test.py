"""`prism serve`'s log-probabilities and the sampling fields around them, through the official
OpenAI client: completions' logprobs against transformers' logits for the same prompt (the
checkpoint's reference.json), chat's logprobs streamed and not, frequency and presence
penalties and logit_bias checked step by step against the model's own log-probabilities,
scoring prompts (echo), several prompts in one request, JSON answers (response_format), and
bad values as 400s. Usage: sampling_test.py PRISM MODEL_DIR REFERENCE_JSON (the tiny Llama
checkpoint beside the Llama 3.1 tokenizer, and transformers' reference for it)."""
import json
import sys
from collections import Counter

import openai
from tokenizers import Tokenizer

import serve_util
from serve_util import check

PRISM, MODEL, REFERENCE = sys.argv[1], sys.argv[2], sys.argv[3]
reference = json.load(open(REFERENCE))
tokenizer = Tokenizer.from_file(f"{MODEL}/tokenizer.json")

proc, port = serve_util.start(PRISM, MODEL, "--parallel=2")
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)

# The prompt of reference.json ("The capital of France is" after BOS). transformers' logits
# of its first answer token, for the few ids it keeps: the five largest and three others.
first = {int(k): v for k, v in reference["first_logits"].items()}
top5 = sorted(first, key=lambda t: -first[t])[:5]
c = client.completions.create(model="tiny", prompt="The capital of France is", max_tokens=6,
                              temperature=0, logprobs=5)
lp = c.choices[0].logprobs
greedy = reference["greedy_ids"]
texts = [tokenizer.decode([t]) for t in greedy[:6]]
check("completion tokens = transformers' greedy ids", lp.tokens == texts, f"{lp.tokens} {texts}")
check("completion text = its tokens", "".join(lp.tokens) == c.choices[0].text,
      f"{lp.tokens} {c.choices[0].text!r}")
check("text_offset", lp.text_offset == [sum(len(t) for t in texts[:i]) for i in range(6)],
      str(lp.text_offset))
got = lp.top_logprobs[0]
check("first step's top 5 = transformers' 5 largest logits",
      list(got) == [tokenizer.decode([t]) for t in top5], f"{list(got)} {top5}")
# Log-probabilities differ by what the logits do (the log-sum-exp cancels).
diffs = [(got[tokenizer.decode([t])] - got[tokenizer.decode([top5[0]])]) -
         (first[t] - first[top5[0]]) for t in top5]
check("log-probability differences = transformers' logit differences (1e-4)",
      max(abs(d) for d in diffs) < 1e-4, str(diffs))
check("log-probabilities <= 0, the chosen one the largest (greedy)",
      all(v <= 0 for d in lp.top_logprobs for v in d.values()) and
      all(lp.token_logprobs[i] == max(d.values()) for i, d in enumerate(lp.top_logprobs)),
      str(lp.token_logprobs))
streamed = []
for chunk in client.completions.create(model="tiny", prompt="The capital of France is",
                                       max_tokens=6, temperature=0, logprobs=5, stream=True):
    if chunk.choices and chunk.choices[0].logprobs:
        streamed += list(zip(chunk.choices[0].logprobs.tokens,
                             chunk.choices[0].logprobs.token_logprobs))
# (The second request finds the prompt in its slot's cache and runs only its last token, so
# its logits may differ from the first's in the last bits.)


def same(a, b):
    """Lists of (token, log-probability) alike: the same tokens, their values within 1e-5."""
    return [t for t, _ in a] == [t for t, _ in b] and all(
        abs(x - y) < 1e-5 for (_, x), (_, y) in zip(a, b))


check("streamed completion logprobs = not",
      same(streamed, list(zip(lp.tokens, lp.token_logprobs))), f"{streamed} {lp.tokens}")

# Scoring a text, as evaluation harnesses do: the prompt as token ids, echoed with each token's
# log-probability given the ones before it, nothing generated. The prompt continued by the
# greedy answer scores each answer token as the generation did.
ids = reference["prompt_ids"] + greedy[:5]
e = client.completions.create(model="tiny", prompt=ids, max_tokens=0, echo=True, logprobs=1,
                              temperature=0)
elp = e.choices[0].logprobs
check("echo: the prompt's text and tokens", e.choices[0].text == "The capital of France is" +
      "".join(texts[:5]) and elp.tokens == [tokenizer.decode([t], skip_special_tokens=False) for t in ids] and
      e.usage.completion_tokens == 0, f"{e.choices[0].text!r} {elp.tokens}")
check("echo: the first token has no log-probability", elp.token_logprobs[0] is None and
      elp.top_logprobs[0] is None, str(elp.token_logprobs[:2]))
check("echo: the answer's tokens score as generated (1e-4), each the most likely",
      all(abs(a - b) < 1e-4 for a, b in zip(elp.token_logprobs[6:], lp.token_logprobs[:5])) and
      all(elp.token_logprobs[i] == max(elp.top_logprobs[i].values()) for i in range(6, 11)),
      f"{elp.token_logprobs[6:]} {lp.token_logprobs[:5]}")
check("echo: text_offset", elp.text_offset[6:] == [len("The capital of France is") + o
                                                    for o in lp.text_offset[:5]],
      str(elp.text_offset))
# Several prompts in one request, as a harness batches them: a choice each, in order, each
# what that prompt gets alone.
batch = [ids, reference["prompt_ids"], ids[:3]]
b = client.completions.create(model="tiny", prompt=batch, max_tokens=1, echo=True, logprobs=1,
                              temperature=0)
alone = [client.completions.create(model="tiny", prompt=p, max_tokens=1, echo=True, logprobs=1,
                                   temperature=0).choices[0] for p in batch]
check("several prompts: a choice each, each as alone",
      [x.index for x in b.choices] == [0, 1, 2] and
      [x.text for x in b.choices] == [x.text for x in alone] and
      all(x.logprobs.tokens == y.logprobs.tokens and
          all((u is None and v is None) or abs(u - v) < 1e-5 for u, v in
              zip(x.logprobs.token_logprobs, y.logprobs.token_logprobs))
          for x, y in zip(b.choices, alone)) and
      b.usage.prompt_tokens == sum(len(p) for p in batch) and b.usage.completion_tokens == 3,
      f"{[x.text for x in b.choices]} {[x.text for x in alone]} {b.usage}")
chunks = [x.choices[0].text for x in client.completions.create(
    model="tiny", prompt="The capital of France is", max_tokens=3, echo=True, temperature=0,
    stream=True) if x.choices]
check("echo streamed: the prompt first, then the answer",
      chunks[0] == "The capital of France is" and "".join(chunks[1:]) == "".join(texts[:3]),
      str(chunks))


def chat(stream=False, max_tokens=16, **fields):
    """The greedy reply to one message and its tokens' logprobs (content entries)."""
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    args = dict(model="tiny", messages=messages, max_tokens=max_tokens, temperature=0,
                logprobs=True, top_logprobs=20, **fields)
    if not stream:
        r = client.chat.completions.create(**args)
        return r.choices[0].message.content, r.choices[0].logprobs.content
    text, entries = "", []
    for chunk in client.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            entries += ch.logprobs.content if ch.logprobs and ch.logprobs.content else []
    return text, entries


text, entries = chat()
check("chat text = its tokens' bytes",
      b"".join(bytes(e.bytes) for e in entries).decode(errors="replace") == text, text)
check("chat top_logprobs: 20, most likely first, the chosen one first (greedy)",
      all(len(e.top_logprobs) == 20 and e.top_logprobs[0].token == e.token and
          e.top_logprobs[0].logprob == e.logprob and
          all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:]))
          for e in entries), str(entries[:1]))
stext, sentries = chat(stream=True)
check("streamed chat logprobs = not", stext == text and same(
    [(e.token, e.logprob) for e in sentries], [(e.token, e.logprob) for e in entries]),
      f"{stext!r} {text!r}")
# A stop string cuts the answer: the tokens that start after the cut are not listed.
stop_at = text[len(text) // 2:len(text) // 2 + 3]
ctext, centries = chat(stop=[stop_at])
cbytes = [bytes(e.bytes) for e in centries]
check("stop string: the listed tokens cover the answer, none starts after it",
      ctext == text[:text.find(stop_at)] and b"".join(cbytes).startswith(ctext.encode()) and
      len(b"".join(cbytes[:-1])) < len(ctext.encode()), f"{ctext!r} {cbytes}")
r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=2, temperature=0)
check("no logprobs unless asked", r.choices[0].logprobs is None, str(r.choices[0]))


def follows_penalties(entries, frequency, presence):
    """Whether each chosen token is the most likely of its step's top 20 once the penalties
    are taken from their log-probabilities (the model's own, before the penalties), counting
    the answer's tokens before it."""
    seen = Counter()
    for e in entries:
        def adjusted(x):
            n = seen[x.token]
            return x.logprob - n * frequency - (presence if n else 0)
        if any(adjusted(x) > adjusted(e) + 1e-4 for x in e.top_logprobs):
            return False
        seen[e.token] += 1
    return True


for frequency, presence in [(1.5, 0), (0, 2), (-2, 0)]:
    ptext, pentries = chat(max_tokens=24, frequency_penalty=frequency, presence_penalty=presence)
    check(f"frequency_penalty={frequency}, presence_penalty={presence}: each step's choice",
          follows_penalties(pentries, frequency, presence), ptext)
    if frequency < 0:
        check("a negative frequency penalty repeats",
              max(Counter(e.token for e in pentries).values()) >
              max(Counter(e.token for e in entries).values()), ptext)
    else:
        check("a positive penalty changes the greedy answer", ptext != text, ptext)
banned_ids = tokenizer.encode(entries[0].token, add_special_tokens=False).ids
check("the first token's text encodes as one token", len(banned_ids) == 1, str(banned_ids))
banned = banned_ids[0]
btext, bentries = chat(logit_bias={str(banned): -100})
check("logit_bias -100 bans a token", all(e.token != entries[0].token for e in bentries) and
      bentries[0].token == entries[0].top_logprobs[1].token, f"{btext!r} {banned}")
ftext, fentries = chat(max_tokens=4, logit_bias={"9906": 100})
check("logit_bias +100 forces one", [e.token for e in fentries] == [tokenizer.decode([9906])] * 4,
      ftext)

# response_format json_object: every answer is the start of a JSON object, and one that ends
# is one. The biases (toward '"' and '}') make these random weights close their objects.
json_object = {"type": "json_object"}
closing = {str(tokenizer.token_to_id('"')): 30, str(tokenizer.token_to_id("}")): 20}
jtext, _ = chat(max_tokens=40, response_format=json_object, logit_bias=closing)
r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "JSON"}],
                                   max_tokens=40, temperature=0, response_format=json_object,
                                   logit_bias=closing)
check("json_object: a JSON object, then the end", r.choices[0].finish_reason == "stop" and
      isinstance(json.loads(r.choices[0].message.content), dict), str(r.choices[0]))
sjtext, _ = chat(stream=True, max_tokens=40, response_format=json_object, logit_bias=closing)
check("json_object streamed = not", sjtext == jtext, f"{sjtext!r} {jtext!r}")
ended = 0
for seed in range(6):
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "JSON"}], max_tokens=40,
        temperature=1.0, seed=seed, response_format=json_object,
        logit_bias={k: v / 4 for k, v in closing.items()})
    content, finish = r.choices[0].message.content, r.choices[0].finish_reason
    if finish == "stop":
        ended += 1
        check(f"json_object sampled (seed {seed}): a JSON object",
              isinstance(json.loads(content), dict), content)
    else:
        check(f"json_object sampled (seed {seed}): not JSON yet at the length",
              content.lstrip().startswith("{"), content)
check("json_object sampled: some answers end", ended > 0, str(ended))


def error_of(**fields):
    try:
        client.chat.completions.create(model="tiny", max_tokens=2,
                                       messages=[{"role": "user", "content": "hi"}], **fields)
    except openai.APIStatusError as e:
        return e.status_code, e.body.get("param")
    return None, None


for fields, param in [({"top_logprobs": 3}, "top_logprobs"),
                      ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                      ({"frequency_penalty": 2.5}, "frequency_penalty"),
                      ({"presence_penalty": "a lot"}, "presence_penalty"),
                      ({"logit_bias": {"x": 1}}, "logit_bias"),
                      ({"logit_bias": {"5": 101}}, "logit_bias"),
                      ({"logit_bias": {"99999999": 1}}, "logit_bias"),
                      ({"response_format": {"type": "json_schema", "json_schema": {}}},
                       "response_format"),
                      ({"response_format": "json"}, "response_format")]:
    check(f"bad {fields}: 400", error_of(**fields) == (400, param), str(error_of(**fields)))
for fields, param in [({"logprobs": 6}, "logprobs"), ({"max_tokens": 0}, "max_tokens"),
                      ({"prompt": []}, "prompt"), ({"prompt": [1, "a"]}, "prompt"),
                      ({"prompt": [12, 99999999]}, "prompt"), ({"echo": "yes"}, "echo"),
                      ({"prompt": ["a", [1]]}, "prompt"), ({"prompt": [[1], []]}, "prompt"),
                      ({"prompt": ["a", "b"], "stream": True}, "prompt")]:
    try:
        client.completions.create(**{"model": "tiny", "prompt": "x", "max_tokens": 1, **fields})
        status = None
    except openai.APIStatusError as err:
        status = err.status_code, err.body.get("param")
    check(f"bad completion {fields}: 400", status == (400, param), str(status))
check("still serving", chat()[0] == text)

proc.terminate()
proc.wait(timeout=30)
serve_util.finish()
