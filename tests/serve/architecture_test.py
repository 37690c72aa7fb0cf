"""`prism serve` on another architecture than Llama's (a hybrid one keeps recurrent and
convolution states per slot), or a GGUF file: the greedy answer equals `prism llm`'s, and 4
concurrent streaming clients each get what they get alone, and a scored prompt (echo) gives
its answer tokens the log-probabilities their generation did. Usage: architecture_test.py PRISM
MODEL (a checkpoint directory or a .gguf file)."""
import concurrent.futures
import sys

import openai

import serve_util
from serve_util import check

PRISM, MODEL = sys.argv[1], sys.argv[2]
proc, port = serve_util.start(PRISM, MODEL, "--parallel=4")
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)


def chat(prompt, stream):
    return serve_util.chat(client, prompt, stream, 10)


try:
    prompts = ["Tell me about the sea.", "What is rain?", "Name a color.", "Count to three."]
    want = serve_util.llm_text(PRISM, MODEL, prompts[0], 10)
    alone = [chat(p, False) for p in prompts]
    check("chat = prism llm --prompt", alone[0] == want, f"{alone[0]!r} vs {want!r}")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: chat(p, True), prompts))
    check("4 concurrent streaming clients = alone", together == alone, f"{together} vs {alone}")
    # Scoring (echo with log-probabilities, every prompt token's logits kept): a prompt
    # continued by its greedy answer scores each answer token as the most likely, and as
    # generating it did.
    c = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6,
                                  temperature=0, logprobs=3)
    generated = c.choices[0].logprobs
    e = client.completions.create(model="tiny", prompt="Once upon a time" + c.choices[0].text,
                                  max_tokens=0, echo=True, logprobs=3, temperature=0)
    scored = e.choices[0].logprobs
    n = len(generated.tokens)
    check("echo scores the answer as generated", scored.tokens[-n:] == generated.tokens and all(
        abs(a - b) < 1e-3 for a, b in zip(scored.token_logprobs[-n:], generated.token_logprobs))
        and all(v == max(d.values()) for v, d in zip(scored.token_logprobs[-n:],
                                                     scored.top_logprobs[-n:])),
        f"{scored.tokens[-n:]} {generated.tokens} {scored.token_logprobs[-n:]} "
        f"{generated.token_logprobs}")
finally:
    proc.terminate()
    proc.wait(timeout=30)
serve_util.finish()
