#include "prism/serve/chat_page.h"

namespace prism::serve {

std::string_view chat_page() {
  return R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>prism</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 0 auto; padding: 1rem; }
  #log { display: flex; flex-direction: column; gap: .75rem; margin-bottom: 1rem; }
  .msg { white-space: pre-wrap; padding: .5rem .75rem; border-radius: .5rem; }
  .user { background: #e8f0fe; align-self: flex-end; }
  .assistant { background: #f1f3f4; }
  .error { background: #fce8e6; }
  form { display: flex; gap: .5rem; }
  textarea { flex: 1; font: inherit; min-height: 3rem; }
  header { display: flex; justify-content: space-between; align-items: baseline; gap: 1rem; }
  #key { width: 12rem; }
  #settings { display: flex; gap: 1rem; margin-bottom: .75rem; font-size: .9rem; }
  #settings input { width: 5rem; }
</style>
</head>
<body>
<header>
  <h1>prism</h1>
  <span><span id="model"></span> <input id="key" type="password" placeholder="API key (if set)"></span>
</header>
<div id="settings">
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max-tokens" type="number" min="1" placeholder="no limit"></label>
</div>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message" autofocus></textarea>
  <button id="send" type="submit">Send</button>
  <button id="reset" type="button">New chat</button>
</form>
<script>
const log = document.getElementById("log");
const input = document.getElementById("input");
const key = document.getElementById("key");
const temperature = document.getElementById("temperature");
const maxTokens = document.getElementById("max-tokens");
let messages = [];
let model = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  if (key.value) h["Authorization"] = "Bearer " + key.value;
  return h;
}

function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  div.scrollIntoView();
  return div;
}

async function loadModel() {
  const r = await fetch("/v1/models", { headers: headers() });
  if (!r.ok) return;
  model = (await r.json()).data[0].id;
  document.getElementById("model").textContent = model;
}

async function send(text) {
  messages.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  let answer = "";
  try {
    const body = { model, messages, stream: true };
    if (temperature.value !== "") body.temperature = Number(temperature.value);
    if (maxTokens.value !== "") body.max_tokens = Number(maxTokens.value);
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
    });
    if (!r.ok) {
      const e = await r.json();
      throw new Error(e.error ? e.error.message : r.statusText);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        for (const c of chunk.choices) answer += (c.delta && c.delta.content) || "";
        out.textContent = answer;
      }
    }
    messages.push({ role: "assistant", content: answer });
  } catch (e) {
    out.className = "msg error";
    out.textContent = String(e.message || e);
    messages.pop();
  }
}

document.getElementById("form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  document.getElementById("send").disabled = true;
  await send(text);
  document.getElementById("send").disabled = false;
  input.focus();
});
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    document.getElementById("form").requestSubmit();
  }
});
document.getElementById("reset").addEventListener("click", () => {
  messages = [];
  log.textContent = "";
});
key.addEventListener("change", loadModel);
loadModel();
</script>
</body>
</html>
)PAGE";
}

}  // namespace prism::serve
