"""`prism serve --speculate=...`: while one generation runs alone, guesses are checked in one
step; greedy answers stay `prism llm`'s, streamed or not, and /metrics counts the guesses. Then
two clients at once (their tokens batched, no guesses) get what they get alone. Usage:
speculate_test.py PRISM MODEL_DIR (a checkpoint with its tokenizer) [SERVE_OPTION...]."""
import concurrent.futures
import re
import sys
import urllib.request

import openai

import serve_util
from serve_util import check

PRISM, MODEL, OPTIONS = sys.argv[1], sys.argv[2], sys.argv[3:]
proc, port = serve_util.start(PRISM, MODEL, "--parallel=2", *OPTIONS)
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)


def chat(prompt, stream):
    return serve_util.chat(client, prompt, stream, 40)


def metric(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return int(re.search(rf"^{name} (\d+)$", text, re.M).group(1))


try:
    prompts = ["how are you how are you how are you", "one two three one two three one two"]
    want = [serve_util.llm_text(PRISM, MODEL, p, 40) for p in prompts]
    alone = [chat(p, False) for p in prompts]
    check("greedy answers = prism llm's", alone == want, f"{alone} vs {want}")
    check("streamed = not", [chat(p, True) for p in prompts] == alone)
    guesses = metric("prism_speculation_guesses_total")
    kept = metric("prism_speculation_guesses_kept_total")
    check(f"guesses checked and counted ({kept} of {guesses} kept)",
          guesses > 0 and 0 <= kept <= guesses)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda p: chat(p, True), prompts))
    check("2 concurrent clients = alone", together == alone, f"{together} vs {alone}")
finally:
    proc.terminate()
    proc.wait(timeout=30)
serve_util.finish()
