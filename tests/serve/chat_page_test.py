"""The chat page at `/` of `prism serve`, in headless Chromium (Debian's `chromium`): the test
types the API key and a message as a user would, presses Enter, and reads the answer the page
streams, which must be the model's greedy answer; a second message continues the conversation.
Chromium is driven through the DevTools protocol over a pipe (--remote-debugging-pipe), so no
port and no client library is needed. Usage: chat_page_test.py PRISM MODEL_DIR."""
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import serve_util
from serve_util import check

PRISM, MODEL = sys.argv[1], sys.argv[2]
KEY = "page-key"
TIMEOUT = 60  # seconds for any one wait


class Browser:
    """One headless Chromium and one page in it, spoken to over the DevTools pipe: JSON
    messages ended by a NUL byte, commands on the browser's fd 3, answers and events on fd 4."""

    def __init__(self):
        chromium = shutil.which("chromium")
        if not chromium:
            raise SystemExit("FAIL chromium is not installed (scripts/setup.sh installs it)")
        self.profile = tempfile.mkdtemp()
        to_browser, self.commands = os.pipe()
        self.events, from_browser = os.pipe()

        def child_fds():  # the pipe ends at 3 and 4, whatever numbers they have here
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-extensions", f"--user-data-dir={self.profile}",
             "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.buffer = b""
        self.next_id = 0
        self.session = None

    def call(self, method, session=True, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise SystemExit(f"FAIL {method}: {reply['error']}")
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.events], [], [], left)[0]:
                raise SystemExit(f"FAIL no answer from chromium to {method}")
            data = os.read(self.events, 1 << 16)
            if not data:
                raise SystemExit(f"FAIL chromium exited (during {method})")
            self.buffer += data

    def open(self, url):
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]

    def js(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise SystemExit(f"FAIL {expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, what):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.02)
        raise SystemExit(f"FAIL waiting for {what}: {expression}")

    def type(self, selector, text):
        """Focuses the element and types the text into it, as a keyboard's input would."""
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def press_enter(self):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                      windowsVirtualKeyCode=13, nativeVirtualKeyCode=13,
                      **({"text": "\r"} if kind == "keyDown" else {}))

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def api_answer(port, messages):
    """The server's greedy answer to a conversation, through the API, not streamed."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps({"messages": messages, "max_tokens": 12, "temperature": 0}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


# Every change the page makes to its answers, recorded as it happens.
RECORD = """
window.answers = [];
new MutationObserver(() => {
  const all = document.querySelectorAll('#log .msg.assistant, #log .msg.error');
  if (all.length) window.answers.push(all[all.length - 1].textContent);
}).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
"""
SETTLED = ("document.querySelectorAll('#log .msg').length == {n} && "
           "!document.getElementById('send').disabled")
MESSAGES = "[...document.querySelectorAll('#log .msg')].map(e => [e.className, e.textContent])"

proc, port = serve_util.start(PRISM, MODEL, f"--api-key={KEY}")
browser = Browser()
try:
    browser.open(f"http://127.0.0.1:{port}/")
    browser.wait_for("document.readyState == 'complete' && !!document.getElementById('model')",
                     "the page to load")
    browser.wait_for("performance.getEntriesByType('resource').some(e => "
                     "e.name.endsWith('/v1/models') && e.responseStatus == 401)",
                     "the page's first request for the model, refused without the key")
    check("without the key, no model is shown", browser.js(
        "document.getElementById('model').textContent") == "")
    browser.type("#key", KEY)
    browser.js("document.getElementById('input').focus()")  # leaving the field applies the key
    browser.wait_for("document.getElementById('model').textContent == 'tiny'", "the model's name")
    check("with the key, the page names the model", True)
    # Greedy and short, so that the answer can be compared (the page's settings).
    browser.js("document.getElementById('temperature').value = '0';"
               "document.getElementById('max-tokens').value = '12'")
    browser.js(RECORD)

    first = "Tell me about the sea."
    browser.type("#input", first)
    browser.press_enter()
    browser.wait_for(SETTLED.format(n=2), "the first answer")
    want = serve_util.llm_text(PRISM, MODEL, first, 12)
    shown = browser.js(MESSAGES)
    check("the typed message is shown, then the answer = prism llm's",
          shown == [["msg user", first], ["msg assistant", want]], f"{shown} vs {want!r}")
    check("the input is cleared", browser.js("document.getElementById('input').value") == "")
    answers = browser.js("window.answers")
    check("the answer arrived through the stream", bool(answers) and answers[-1] == want and
          all(want.startswith(a) for a in answers), str(answers))
    print(f"   ({len(answers)} updates of the answer seen)")

    second = "And about rivers?"
    browser.type("#input", second)
    browser.press_enter()
    browser.wait_for(SETTLED.format(n=4), "the second answer")
    want2 = api_answer(port, [{"role": "user", "content": first},
                              {"role": "assistant", "content": want},
                              {"role": "user", "content": second}])
    shown = browser.js(MESSAGES)
    check("a second message continues the conversation", shown[2:] ==
          [["msg user", second], ["msg assistant", want2]], f"{shown[2:]} vs {want2!r}")

    browser.js("document.getElementById('key').value = 'wrong'")
    browser.type("#input", "Hello?")
    browser.press_enter()
    browser.wait_for(SETTLED.format(n=6), "the error")
    last = browser.js(MESSAGES)[-1]
    check("a wrong key shows the server's error", last[0] == "msg error" and
          "API key" in last[1], str(last))
finally:
    browser.close()
    proc.terminate()
    proc.wait(timeout=30)
serve_util.finish()
