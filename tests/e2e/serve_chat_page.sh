#!/usr/bin/env bash
# The chat page at / of `medtune serve`, in headless Chromium (a real browser, driven over the
# DevTools protocol by tests/e2e/serve/chat_page_cdp.py): the research-tool note, the model picker
# listing the base and an adapter, a question typed and sent, the streamed answer equal to the
# API's greedy answer to the same messages, and a screenshot of the result
# (<build>/serve_chat_page.png, for a person to look at). The page loads nothing from outside:
# the server's Content-Security-Policy allows only itself.
# Usage: serve_chat_page.sh MEDTUNE_BIN [PARITY_BIN]. Skips (77) without chromium, or when
# websocket-client cannot be installed into <build>/venv-openai.
set -euo pipefail
MEDTUNE=${1:?usage: serve_chat_page.sh MEDTUNE_BIN [PARITY_BIN]}
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$BUILD/medtune-tiny-llama}
TMP=$(mktemp -d)
SERVER_PID="" CHROME_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  [ -n "$CHROME_PID" ] && kill "$CHROME_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. tests/support/tiny_model.sh
. tests/support/pinned_venv.sh
. tests/support/serve.sh
command -v chromium >/dev/null 2>&1 || { echo "skip: chromium is not installed"; exit 77; }
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
VENV="$BUILD/venv-chat-page"
pinned_venv "$VENV" websocket "websocket-client==1.8.0"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1

make_tiny_model "$TINY" "$TMP/model" 12
add_smollm2_chat_template "$TMP/model"
# A second model name to pick: the same weights under an adapter whose B is zero is not needed;
# any PEFT adapter works. The e2e training recipe is reused (2 steps).
head -n 8 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
cat > "$TMP/run.yaml" <<YAML
base_model: $TMP/model
adapter: lora
datasets:
  - path: $TMP/train.jsonl
    type: medqa
lora_r: 2
lora_alpha: 4
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
max_steps: 2
num_threads: 1
output_dir: $TMP/run
YAML
"$MEDTUNE" train --config "$TMP/run.yaml" >"$TMP/train.out" 2>"$TMP/train.err" || fail "train: $(cat "$TMP/train.err")"
start_server "$MEDTUNE" "$TMP/server.log" "$TMP/model" -c 4096 --adapter "clinic=$TMP/run/adapter"
BASE="http://127.0.0.1:$PORT"
# The page sends temperature 0 and max_tokens 512 with the user's message and no system prompt.
EXPECTED=$(curl -sf "$BASE/v1/chat/completions" -d '{"model": "model", "temperature": 0, "max_tokens": 512,
  "messages": [{"role": "user", "content": "Which drug is first-line for type 2 diabetes?"}]}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"], end="")') ||
  fail "the API reference answer"
[ -n "$EXPECTED" ] || fail "the reference answer is empty: nothing to look for on the page"

chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --remote-debugging-port=0 \
  --remote-allow-origins='*' --user-data-dir="$TMP/profile" about:blank >"$TMP/chrome.log" 2>&1 &
CHROME_PID=$!
WS=""
for _ in $(seq 1 300); do
  DEVTOOLS=$(sed -n 's/^DevTools listening on ws:\/\/127\.0\.0\.1:\([0-9]*\)\/.*/\1/p' "$TMP/chrome.log" | head -n 1 || true)
  if [ -n "$DEVTOOLS" ]; then
    WS=$(curl -sf "http://127.0.0.1:$DEVTOOLS/json/list" |
      python3 -c 'import json,sys; print([t for t in json.load(sys.stdin) if t["type"]=="page"][0]["webSocketDebuggerUrl"])' || true)
    [ -n "$WS" ] && break
  fi
  sleep 0.1
done
[ -n "$WS" ] || fail "chromium did not open its DevTools endpoint: $(tail -n 5 "$TMP/chrome.log")"
"$VENV/bin/python" tests/e2e/serve/chat_page_cdp.py "$WS" "$BASE" "$EXPECTED" "$BUILD/serve_chat_page.png" ||
  fail "the chat page (above)"
python3 - "$BUILD/serve_chat_page.png" <<'PY' || fail "the screenshot is not a 1000x900 PNG with content"
import struct, sys, os
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", "not a PNG"
w, h = struct.unpack(">II", d[16:24])
assert (w, h) == (1000, 900), (w, h)
assert len(d) > 20 * 1024, f"{len(d)} bytes: a blank page"
PY
echo "ok: chat page in headless chromium; screenshot $BUILD/serve_chat_page.png"
