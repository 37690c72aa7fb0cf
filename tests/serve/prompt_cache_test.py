"""`prism serve`'s prompt cache: a request takes the slot whose last conversation shares the
longest start with its prompt and prefills only the rest. Two servers on the same model, one
with the cache (the default) and one without (--prompt-cache=false), must give the same greedy
answers to the same conversations: a request repeated, a chat's second and third turns (the
whole conversation sent again, as chat clients do), and conversations that share only their
start, from several clients at once, and a request beside a running one, which copies the
running conversation's start into its fresh slot. The cached server says in each answer's usage how many
prompt tokens it took from a slot (OpenAI's usage.prompt_tokens_details.cached_tokens) and
counts them in its metrics. Usage: prompt_cache_test.py PRISM MODEL [--reuses-any-start]
(a model of KV caches alone goes back to any point of a slot's conversation, so a repeated
request and a turn that rewrites the last answer's tokens reuse most of the prompt; a model
with recurrent states only reuses a conversation its prompt continues whole)."""
import concurrent.futures
import re
import sys
import urllib.request

import openai

import serve_util
from serve_util import check

PRISM, MODEL = sys.argv[1], sys.argv[2]
ANY_START = "--reuses-any-start" in sys.argv[3:]
TOKENS = 8

cached_proc, cached_port = serve_util.start(PRISM, MODEL, "--parallel=2")
plain_proc, plain_port = serve_util.start(PRISM, MODEL, "--parallel=2", "--prompt-cache=false")


def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)


cached, plain = client(cached_port), client(plain_port)


def ask(c, messages, stream=False):
    """The greedy answer and the usage of one request."""
    if not stream:
        r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=TOKENS,
                                      temperature=0)
        return r.choices[0].message.content, r.usage
    text, usage = "", None
    for chunk in c.chat.completions.create(model="tiny", messages=messages, max_tokens=TOKENS,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        text += "".join(x.delta.content or "" for x in chunk.choices)
    return text, usage


def cached_tokens(usage):
    details = usage.prompt_tokens_details
    return details.cached_tokens if details else None


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


try:
    first = [{"role": "user", "content": "Tell me about the sea."}]
    a1, u1 = ask(cached, first)
    check("a fresh server's first answer = without the cache", a1 == ask(plain, first)[0])
    check("a fresh slot reuses nothing", cached_tokens(u1) == 0, str(u1))

    # The same request again (streamed): all of its prompt but the last token from the slot.
    again, u = ask(cached, first, stream=True)
    check("a repeated request = the first answer", again == a1, f"{again!r} vs {a1!r}")
    if ANY_START:
        check("a repeated request reuses its prompt", cached_tokens(u) == u.prompt_tokens - 1,
              str(u))

    # A chat: each turn sends the whole conversation again.
    conversation = list(first)
    answer = a1
    for turn, question in enumerate(["And the rain?", "Count to three."], start=2):
        before = u.prompt_tokens
        conversation += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": question}]
        answer, u = ask(cached, conversation)

        want = ask(plain, conversation)[0]
        check(f"turn {turn} = without the cache", answer == want, f"{answer!r} vs {want!r}")
        if ANY_START:
            check(f"turn {turn} reuses the earlier turns' prompt",
                  before <= cached_tokens(u) < u.prompt_tokens, f"{before}: {u}")
        else:
            check(f"turn {turn}'s cached tokens within its prompt",
                  0 <= cached_tokens(u) < u.prompt_tokens, str(u))

    # Conversations sharing their start (a system prompt) from 4 clients at once, twice over
    # 2 slots: the same answers as without the cache.
    system = {"role": "system", "content": "You answer in one short sentence, kindly."}
    questions = ["Name a color.", "What is salt?", "Why is the sky blue?", "Say hello."]
    conversations = [[system, {"role": "user", "content": q}] for q in questions] * 2
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda m: ask(cached, m, stream=True)[0], conversations))
        want = list(pool.map(lambda m: ask(plain, m)[0], conversations))
    check("4 clients sharing a system prompt = without the cache", got == want,
          str([(a, b) for a, b in zip(got, want) if a != b][:2]))

    # A request while another runs: it starts in the other slot, fresh, and copies the running
    # conversation's start (Engine::share) instead of prefilling it.
    share_proc, share_port = serve_util.start(PRISM, MODEL, "--parallel=2")
    try:
        sharing = client(share_port)
        story = [system, {"role": "user", "content": "Tell me a long story."}]
        stream = sharing.chat.completions.create(model="tiny", messages=story, max_tokens=160,
                                                 temperature=0, stream=True)
        chunks = iter(stream)
        told = next(chunks).choices[0].delta.content or ""
        beside = [system, {"role": "user", "content": "Name a color."}]
        answer, u = ask(sharing, beside)
        told += "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        check("a request beside a running one = without the cache",
              answer == ask(plain, beside)[0])
        if ANY_START:
            check("it copies the running conversation's start", cached_tokens(u) > 0, str(u))
        want = plain.chat.completions.create(model="tiny", messages=story, max_tokens=160,
                                             temperature=0).choices[0].message.content
        check("and the running one goes on unchanged", told == want, f"{told!r} vs {want!r}")
    finally:
        share_proc.terminate()
        share_proc.wait(timeout=30)

    reused = metric(cached_port, "prism_prompt_tokens_cached_total")
    check("the metrics count the cached tokens", reused is not None and
          (reused > 0 or not ANY_START), str(reused))
    check("nothing cached without the cache",
          metric(plain_port, "prism_prompt_tokens_cached_total") == 0)
finally:
    for proc in (cached_proc, plain_proc):
        proc.terminate()
        proc.wait(timeout=30)
serve_util.finish()
