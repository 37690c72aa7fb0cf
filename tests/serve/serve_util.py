"""What the tests of `prism serve` share: starting the server on a free port, a greedy chat
reply through the openai client, the answer `prism llm` gives for a prompt, and the pass/fail
tally."""
import re
import subprocess
import sys
import threading

failures = []


def check(name, ok, detail=""):
    print(("ok " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(name)


def finish():
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


def start(prism, model, *extra):
    """Starts `prism serve` on a port of the system's choosing; returns (process, port)."""
    proc = subprocess.Popen([prism, "serve", f"--model={model}", "--model-id=tiny", "--port=0",
                             "--seqlen=256", *extra], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
    raise SystemExit("FAIL the server did not start")


def chat(client, prompt, stream, max_tokens):
    """The greedy reply of the server behind `client` (an openai.OpenAI) to one user message,
    streamed or not."""
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        r = client.chat.completions.create(model="tiny", messages=messages,
                                           max_tokens=max_tokens, temperature=0)
        return r.choices[0].message.content
    return "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=max_tokens, temperature=0, stream=True)
        if c.choices)


def llm_text(prism, model, prompt, max_tokens):
    """`prism llm`'s greedy answer to one user message, without the trailing newline."""
    out = subprocess.run([prism, "llm", f"--model={model}", f"--prompt={prompt}",
                          f"--max-tokens={max_tokens}", "--seqlen=256"],
                         capture_output=True, text=True, check=True).stdout
    return out[:-1] if out.endswith("\n") else out
