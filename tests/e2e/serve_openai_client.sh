#!/usr/bin/env bash
# `medtune serve` driven by the official `openai` Python client and by curl, on loopback only:
# a tiny random Llama (tests/support/tiny_model.sh, SmolLM2's real tokenizer and chat template)
# and a LoRA adapter trained on it for 4 steps by `medtune train` (so it carries a run manifest).
# What is checked is listed in tests/e2e/serve/openai_client.py, plus here:
#   - the README's curl examples work as written (base URL and model name swapped in);
#   - a non-loopback --host without an API key is refused (exit 2, message names the options);
#   - SIGTERM while a stream is running: the stream still ends with [DONE], the server exits 0.
# Usage: serve_openai_client.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). openai is
# installed into <build>/venv-openai on first use; exit 77 (skip) when that is impossible.
set -euo pipefail
MEDTUNE=${1:?usage: serve_openai_client.sh MEDTUNE_BIN [PARITY_BIN]}
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$BUILD/medtune-tiny-llama}
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$TMP/server.log" ] && tail -n 20 "$TMP/server.log" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
. tests/support/pinned_venv.sh
. tests/support/serve.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"

# The client, pinned (its Python API is what is tested).
VENV="$BUILD/venv-openai"
pinned_venv "$VENV" openai "openai==3.57.0"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1

make_tiny_model "$TINY" "$TMP/model" 11
# SmolLM2-Instruct's chat template (the committed tokenizer_config.json has none).
add_smollm2_chat_template "$TMP/model"
head -n 16 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
cat > "$TMP/run.yaml" <<YAML
base_model: $TMP/model
adapter: lora
datasets:
  - path: $TMP/train.jsonl
    type: medqa
lora_r: 4
lora_alpha: 16
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
max_steps: 4
learning_rate: 5.0e-2
num_threads: 1
output_dir: $TMP/run
YAML
"$MEDTUNE" train --config "$TMP/run.yaml" >"$TMP/train.out" 2>"$TMP/train.err" || fail "train: $(cat "$TMP/train.err")"
RUN_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inputs_sha256"])' "$TMP/run/manifest.json")

# Refused: reachable from other machines without a key.
if "$MEDTUNE" serve "$TMP/model" --host 0.0.0.0 --port 0 >"$TMP/open.out" 2>"$TMP/open.err"; then
  fail "--host 0.0.0.0 without an API key started"
fi
grep -q -- "--api-key" "$TMP/open.err" || fail "the refusal does not name --api-key: $(cat "$TMP/open.err")"

KEY=test-key-$RANDOM$RANDOM
start_server "$MEDTUNE" "$TMP/server.log" "$TMP/model" -c 1024 --adapter "tuned=$TMP/run/adapter" --api-key "$KEY" \
  --max-body-bytes 65536 --queue-size 16 --max-n 4
BASE="http://127.0.0.1:$PORT"

# Greedy answers of `medtune generate` (the same model, the same chat template) to compare with.
"$MEDTUNE" generate "$TMP/model" --chat -p "Which drug is first-line for type 2 diabetes?" -n 12 --json -q \
  > "$TMP/generate_base.json" || fail "generate"
"$MEDTUNE" generate "$TMP/model" --chat -p "Which drug is first-line for type 2 diabetes?" -n 12 --json -q \
  --adapter "$TMP/run/adapter" > "$TMP/generate_tuned.json" || fail "generate --adapter"

"$VENV/bin/python" tests/e2e/serve/openai_client.py "$BASE" "$KEY" model "$RUN_ID" \
  "$TMP/generate_base.json" "$TMP/generate_tuned.json" || fail "the openai client checks (above)"

# The README's curl examples, as written there (host, key and model name are the variables).
export BASE KEY MODEL=model
curl -sf "$BASE/v1/chat/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"model": "'"$MODEL"'", "messages": [{"role": "user", "content": "First-line treatment of type 2 diabetes?"}], "max_tokens": 8}' \
  > "$TMP/curl_chat.json" || fail "README curl chat"
grep -q '"chat.completion"' "$TMP/curl_chat.json" || fail "README curl chat: $(cat "$TMP/curl_chat.json")"
curl -sfN "$BASE/v1/chat/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"model": "tuned", "stream": true, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}' \
  > "$TMP/curl_stream.txt" || fail "README curl stream"
[ "$(tail -n 2 "$TMP/curl_stream.txt" | head -n 1)" = "data: [DONE]" ] || fail "README curl stream does not end with [DONE]"
curl -sf "$BASE/v1/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"model": "'"$MODEL"'", "prompt": "The heart has four", "max_tokens": 4, "logprobs": 2}' > "$TMP/curl_cmpl.json" ||
  fail "README curl completions"
grep -q '"token_logprobs"' "$TMP/curl_cmpl.json" || fail "README curl completions: $(cat "$TMP/curl_cmpl.json")"
curl -sf "$BASE/v1/models" -H "Authorization: Bearer $KEY" | grep -q '"tuned"' || fail "README curl models"
curl -sf "$BASE/health" | grep -q '"ok"' || fail "README curl health"
curl -sf "$BASE/metrics" -H "Authorization: Bearer $KEY" | grep -q '^medtune_requests_total' || fail "README curl metrics"
# Without the key: 401 with OpenAI's error shape.
code=$(curl -s -o "$TMP/401.json" -w '%{http_code}' "$BASE/v1/models")
[ "$code" = 401 ] && grep -q invalid_api_key "$TMP/401.json" || fail "no key: HTTP $code $(cat "$TMP/401.json")"
# A body over --max-body-bytes: 413, OpenAI-shaped.
head -c 70000 /dev/zero | tr '\0' 'a' > "$TMP/big.txt"
code=$(curl -s -o "$TMP/413.json" -w '%{http_code}' "$BASE/v1/completions" -H "Authorization: Bearer $KEY" \
  --data-binary @"$TMP/big.txt")
[ "$code" = 413 ] && grep -q '"error"' "$TMP/413.json" || fail "big body: HTTP $code $(cat "$TMP/413.json")"

# An adapter loaded at run time (POST /v1/adapters, needs the key): listed, then usable; a
# directory that is not an adapter is a 400 naming the problem; a taken name is refused.
curl -sf "$BASE/v1/adapters" -H "Authorization: Bearer $KEY" -d '{"name": "late", "path": "'"$TMP/run/adapter"'"}' \
  > "$TMP/late.json" || fail "POST /v1/adapters: $(cat "$TMP/late.json")"
curl -sf "$BASE/v1/models" -H "Authorization: Bearer $KEY" | grep -q '"late"' || fail "the loaded adapter is not listed"
curl -sf "$BASE/v1/completions" -H "Authorization: Bearer $KEY" -d '{"model": "late", "prompt": "Hi", "max_tokens": 2}' |
  grep -q '"run:'"$RUN_ID"'"' || fail "the loaded adapter's provenance"
code=$(curl -s -o "$TMP/late_bad.json" -w '%{http_code}' "$BASE/v1/adapters" -H "Authorization: Bearer $KEY" \
  -d '{"name": "bad", "path": "'"$TMP"'"}')
[ "$code" = 400 ] && grep -q adapter_config.json "$TMP/late_bad.json" || fail "bad adapter dir: HTTP $code $(cat "$TMP/late_bad.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/adapters" -H "Authorization: Bearer $KEY" \
  -d '{"name": "tuned", "path": "'"$TMP/run/adapter"'"}')
[ "$code" = 400 ] || fail "a taken adapter name: HTTP $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/adapters" -d '{"name": "x", "path": "/"}')
[ "$code" = 401 ] || fail "POST /v1/adapters without the key: HTTP $code"

# SIGTERM with a stream in flight: it finishes, then the server exits 0.
curl -sN "$BASE/v1/completions" -H "Authorization: Bearer $KEY" \
  -d '{"model": "model", "prompt": "Once", "max_tokens": 200, "stream": true, "temperature": 0}' > "$TMP/drain.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do [ -s "$TMP/drain.txt" ] && break; sleep 0.05; done
kill -TERM "$SERVER_PID"
wait "$CURL_PID" || fail "the stream in flight failed during drain"
grep -q '^data: \[DONE\]' "$TMP/drain.txt" || fail "the stream in flight did not end with [DONE] after SIGTERM"
wait "$SERVER_PID" || fail "the server did not exit 0 after SIGTERM"
SERVER_PID=""
grep -q "SIGTERM: finishing" "$TMP/server.log" || fail "no drain message"
echo "ok: serve with the openai client, curl, 401/413, refusal without a key, SIGTERM drain"
