"""Drives the chat page of `medtune serve` in headless Chromium over the DevTools protocol
(run by tests/e2e/serve_chat_page.sh).

argv: CHROMIUM_DEVTOOLS_WS_PAGE_URL BASE_URL EXPECTED_ANSWER PNG_OUT
Opens BASE_URL/, checks the research-tool note and the model picker (base and adapter), types a
question, clicks Send, waits for the streamed answer to finish, screenshots the page into PNG_OUT,
and checks the answer shown equals EXPECTED_ANSWER (the API's greedy answer to the same messages).
"""
import base64
import json
import sys
import time

import websocket

ws_url, base_url, expected, png_out = sys.argv[1:5]
ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
next_id = 0


def call(method, **params):
    global next_id
    next_id += 1
    ws.send(json.dumps({"id": next_id, "method": method, "params": params}))
    while True:
        msg = json.loads(ws.recv())
        if msg.get("id") == next_id:
            if "error" in msg:
                raise RuntimeError(f"{method}: {msg['error']}")
            return msg["result"]


def js(expr):
    r = call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
    if "exceptionDetails" in r:
        raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
    return r["result"].get("value")


def wait_for(expr, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if js(expr):
            return
        time.sleep(0.1)
    print("FAIL: timed out waiting for", what, "; page text:", js("document.body.innerText"))
    sys.exit(1)


call("Page.enable")
call("Emulation.setDeviceMetricsOverride", width=1000, height=900, deviceScaleFactor=1, mobile=False)
call("Page.navigate", url=base_url + "/")
wait_for("document.readyState === 'complete' && document.getElementById('model').options.length === 2",
         "the model picker to list the base and the adapter")
note = js("document.getElementById('note').innerText")
if "research" not in note.lower() or "not a medical device" not in note:
    print("FAIL: research-tool note:", note)
    sys.exit(1)
options = js("[...document.getElementById('model').options].map(o => o.value)")
js("document.getElementById('system').value = ''")  # the API reference answer has no system message
js("document.getElementById('prompt').value = 'Which drug is first-line for type 2 diabetes?'")
js("document.getElementById('send').click()")
wait_for("document.querySelectorAll('.msg.assistant').length === 1 && !document.getElementById('send').disabled",
         "the streamed answer to finish")
shown = js("document.querySelector('.msg.assistant').innerText")
meta = js("document.getElementById('meta').innerText")
shot = call("Page.captureScreenshot", format="png")
open(png_out, "wb").write(base64.b64decode(shot["data"]))
if js("document.querySelectorAll('.msg.error').length"):
    print("FAIL: the page shows an error:", shown)
    sys.exit(1)
if shown != expected:
    print(f"FAIL: the page shows {shown!r}, the API answered {expected!r}")
    sys.exit(1)
if "tokens; provenance" not in meta:
    print("FAIL: no usage/provenance line:", meta)
    sys.exit(1)
print("chat page: ok; models", options, "; answer of", len(shown), "characters;", meta)
