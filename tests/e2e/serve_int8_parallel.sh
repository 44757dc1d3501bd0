#!/usr/bin/env bash
# An int8 server's answers do not depend on its --parallel: the same MedQA stems echoed with
# log-probs by `medtune serve --precision int8` at --parallel 1 (the plain CPU backend: the int8
# GEMM for 16 tokens or more) and at --parallel 3 (the batch-invariant backend, several requests
# in one batch) give every token's log-prob bit for bit. Both kernels of the int8 route perform one
# order of operations (core/quant_int8.h); before session 27 they did not, and these log-probs
# differed by up to 0.5. Three clients at once, so that --parallel 3 really batches them.
# Model: MEDTUNE_SMOLLM2_GGUF (the real model, a Q4_1 base); stems: the first 6 of
# MEDTUNE_MEDQA_DEV, else the project's sample questions.
set -euo pipefail
MEDTUNE=${1:?usage: serve_int8_parallel.sh MEDTUNE_BIN [PARITY_BIN]}
MODEL=${MEDTUNE_SMOLLM2_GGUF:-}
[ -n "$MODEL" ] && [ -f "$MODEL" ] || { echo "skip: MEDTUNE_SMOLLM2_GGUF is not set to the bundled model"; exit 77; }
DATA=${MEDTUNE_MEDQA_DEV:-data/sample/medqa_dev.jsonl}
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. tests/support/serve.sh
export OMP_WAIT_POLICY=passive
head -n 6 "$DATA" > "$TMP/stems.jsonl"
for par in 1 3; do
  start_server "$MEDTUNE" "$TMP/server$par.log" "$MODEL" -c 4096 -q --alias m --precision int8 --parallel $par
  grep -q "int8" "$TMP/server$par.log" || fail "the server at --parallel $par does not say it runs int8: $(cat "$TMP/server$par.log")"
  python3 - "$PORT" "$TMP/stems.jsonl" > "$TMP/echo$par.json" <<'PY' || fail "echo requests at --parallel $par"
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
port, stems = sys.argv[1], [json.loads(l)["question"] for l in open(sys.argv[2])]
def echo(q):
    body = {"model": "m", "prompt": q, "max_tokens": 0, "echo": True, "logprobs": 1}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["logprobs"]["token_logprobs"]
with ThreadPoolExecutor(3) as pool:
    print(json.dumps(list(pool.map(echo, stems))))
PY
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
done
python3 - "$TMP/echo1.json" "$TMP/echo3.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
n = bad = 0
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    if len(x) != len(y):
        print(f"FAIL: stem {i}: {len(x)} tokens at --parallel 1, {len(y)} at --parallel 3"); sys.exit(1)
    for u, v in zip(x, y):
        if u is None and v is None: continue
        n += 1
        if u != v: bad += 1; worst = max(worst, abs(u - v))
print(f"{n} echoed tokens: {n - bad} identical log-probs at --parallel 1 and 3 (largest difference {worst:.3g})")
sys.exit(1 if bad or n < 100 else 0)
PY
echo "ok: an int8 server's log-probs are the same at --parallel 1 and 3"
