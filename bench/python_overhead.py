"""What Python costs a decoding step: prism.llm.Model.generate_ids against `prism llm` on the
same model, same options, in one run (rounds alternate, each side first in every other one;
medians). Each side runs as a fresh process every round, loads the model, copies the weights
into memory before the first answer (--fast-start=false), decodes greedily from the same prompt
ids and times only the decode steps: the command's own statistics line, and in Python the time
of generate_ids(max_tokens=N) less that of max_tokens=1 (prefill and the first token), over
N-1.

Run: PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py
         [--model=build/bench/llama-1b-random] [--tokens=64] [--rounds=5] [--dtype=bf16]
(`build/bin/prism-bench llm` writes the Llama 3.2 1B-shaped random checkpoint it defaults to.)
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import prism

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = [128000, 791, 6864, 315, 9822, 374]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cli_decode(cli, model, tokens, dtype, seqlen):
    out = subprocess.run(
        [cli, "llm", f"--model={model}", "--prompt-ids=" + ",".join(map(str, PROMPT)),
         f"--max-tokens={tokens}", "--print-ids", f"--seqlen={seqlen}", f"--dtype={dtype}",
         "--fast-start=false"], check=True, capture_output=True, text=True)
    m = re.search(r"decode: (\d+) tok in ([\d.]+) ms", out.stderr)
    if not m:
        raise SystemExit(f"no decode statistics in: {out.stderr}")
    return int(m.group(1)) / (float(m.group(2)) / 1e3), [int(i) for i in out.stdout.split()]


def python_decode(model, tokens):
    t0 = time.perf_counter()
    model.generate_ids(ids=PROMPT, max_tokens=1)
    t1 = time.perf_counter()
    ids = model.generate_ids(ids=PROMPT, max_tokens=tokens)
    t2 = time.perf_counter()
    return (len(ids) - 1) / ((t2 - t1) - (t1 - t0)), ids


def python_side(model, tokens, dtype, seqlen):
    """python_decode in a fresh process, as the command runs in one."""
    code = (f"import json, sys; sys.path.insert(0, {HERE!r}); import python_overhead as b; "
            f"import prism; m = prism.llm.Model.load({model!r}, platform='cpu', "
            f"dtype={dtype!r}, seqlen={seqlen}); print(json.dumps(b.python_decode(m, {tokens})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    rate, ids = json.loads(out.stdout.strip().splitlines()[-1])
    return rate, ids


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=os.path.join(ROOT, "build", "bench", "llama-1b-random"))
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "bin", "prism"))
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dtype", default="bf16")
    a = p.parse_args()
    seqlen = len(PROMPT) + a.tokens + 8
    cli_rates, py_rates = [], []
    for r in range(a.rounds):
        # Each side goes first in every other round.
        sides = ["cli", "python"] if r % 2 == 0 else ["python", "cli"]
        ids = {}
        for side in sides:
            if side == "cli":
                rate, ids[side] = cli_decode(a.cli, a.model, a.tokens, a.dtype, seqlen)
                cli_rates.append(rate)
            else:
                rate, ids[side] = python_side(a.model, a.tokens, a.dtype, seqlen)
                py_rates.append(rate)
        if ids["python"] != ids["cli"]:
            raise SystemExit("Python and the command generated different ids")
    c, q = statistics.median(cli_rates), statistics.median(py_rates)
    print(f"{cpu_name()}, {os.cpu_count()} CPUs; {a.model}, {a.dtype}, {a.tokens} tokens, "
          f"medians of {a.rounds}")
    print(f"decode: prism llm {c:.2f} tok/s, Python {q:.2f} tok/s: Python at {q / c:.3f}x "
          f"({100 * (1 - q / c):+.1f} % overhead)")


if __name__ == "__main__":
    main()
