#include "serve/chat_page.h"

namespace medtune::serve {

const std::string& chat_page_html() {
  static const std::string html = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>medtune chat</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
header{background:#1d3557;color:#fff;padding:10px 18px}
header h1{font-size:18px;margin:0}
#note{background:#fff4d6;border:1px solid #e0b84f;padding:8px 12px;margin:12px 18px;border-radius:6px;font-size:14px}
main{padding:0 18px 18px;max-width:900px}
label{display:block;font-size:13px;margin-top:8px;color:#444}
select,textarea,input{width:100%;box-sizing:border-box;font:inherit;padding:6px;border:1px solid #bbb;border-radius:4px}
#log{margin-top:12px}
.msg{padding:8px 12px;border-radius:6px;margin:6px 0;white-space:pre-wrap}
.user{background:#dbe7f6}.assistant{background:#fff;border:1px solid #ddd}
.error{background:#fde2e2;border:1px solid #e08a8a}
button{margin-top:8px;padding:8px 18px;font:inherit;background:#1d3557;color:#fff;border:0;border-radius:4px;cursor:pointer}
button:disabled{opacity:.5}
#meta{font-size:12px;color:#666;margin-top:4px}
</style></head><body>
<header><h1>medtune chat</h1></header>
<div id="note" role="note"><b>Research tool.</b> This model is a research system for evaluating fine-tuned language models.
It is not a medical device; its answers can be wrong and must not be used for diagnosis or treatment decisions.</div>
<main>
<label for="model">Model (base or adapter)</label><select id="model"></select>
<label for="system">System prompt</label>
<textarea id="system" rows="2">You are a careful clinical assistant. Answer concisely.</textarea>
<label for="key">API key (only if the server requires one)</label><input id="key" type="password" autocomplete="off">
<div id="log"></div>
<label for="prompt">Your question</label><textarea id="prompt" rows="3"></textarea>
<button id="send">Send</button> <button id="clear" type="button">New conversation</button>
<div id="meta"></div>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let history = [];
function headers() {
  const h = {"Content-Type": "application/json"};
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}
async function loadModels() {
  try {
    const r = await fetch("/v1/models", {headers: headers()});
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.status);
    $("model").innerHTML = "";
    for (const m of j.data) {
      const o = document.createElement("option");
      o.value = m.id; o.textContent = m.parent ? m.id + " (adapter)" : m.id + " (base)";
      $("model").appendChild(o);
    }
  } catch (e) { $("meta").textContent = "Could not list models: " + e.message; }
}
function add(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role; d.textContent = text; $("log").appendChild(d); return d;
}
async function send() {
  const q = $("prompt").value.trim();
  if (!q) return;
  $("send").disabled = true; $("prompt").value = "";
  add("user", q);
  history.push({role: "user", content: q});
  const out = add("assistant", "");
  const messages = [];
  if ($("system").value.trim()) messages.push({role: "system", content: $("system").value});
  const body = {model: $("model").value, messages: messages.concat(history), stream: true,
                stream_options: {include_usage: true}, max_tokens: 512, temperature: 0};
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body)});
    if (!r.ok) { const j = await r.json(); throw new Error(j.error ? j.error.message : r.status); }
    const reader = r.body.getReader(); const dec = new TextDecoder(); let buf = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith("data: ")) continue;
        const data = ev.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.choices && j.choices.length && j.choices[0].delta.content) out.textContent += j.choices[0].delta.content;
        if (j.usage) $("meta").textContent = j.usage.completion_tokens + " tokens; provenance " + j.system_fingerprint;
      }
    }
    history.push({role: "assistant", content: out.textContent});
  } catch (e) { out.className = "msg error"; out.textContent = "Error: " + e.message; history.pop(); }
  $("send").disabled = false;
}
$("send").addEventListener("click", send);
$("clear").addEventListener("click", () => { history = []; $("log").innerHTML = ""; });
$("key").addEventListener("change", loadModels);
$("prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } });
loadModels();
</script></body></html>
)HTML";
  return html;
}

}  // namespace medtune::serve
