#!/usr/bin/env bash
# A bounded load and fault test of `medtune serve` (tests/e2e/serve/load.py): 32 concurrent
# streaming chat clients for 3 rounds on a tiny random Llama, every 4th dropping its connection
# mid-stream, every 8th sending garbage first; zero failed well-formed requests, and RSS, threads
# and open fds flat after the warm-up round. Prints p50/p99 latency and tokens/s.
# tests/e2e/soak_serve.sh runs the same with a few thousand requests (label soak, by hand).
# Usage: serve_load.sh MEDTUNE_BIN [PARITY_BIN] [CLIENTS ROUNDS]
set -euo pipefail
MEDTUNE=${1:?usage: serve_load.sh MEDTUNE_BIN [PARITY_BIN] [CLIENTS ROUNDS]}
CLIENTS=${3:-32}
ROUNDS=${4:-3}
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$BUILD/medtune-tiny-llama}
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$TMP/server.log" ] && grep -v " 200 " "$TMP/server.log" | tail -n 20 >&2; exit 1; }
. tests/support/tiny_model.sh
. tests/support/serve.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
make_tiny_model "$TINY" "$TMP/model" 13
add_smollm2_chat_template "$TMP/model"
# Queue and HTTP threads sized for the clients: a full queue would answer 503, which the test
# counts as a failure of a well-formed request.
start_server "$MEDTUNE" "$TMP/server.log" "$TMP/model" -c 1024 -q --queue-size $((CLIENTS + 8)) \
  --threads-http $((CLIENTS + 8)) --timeout 10
python3 tests/e2e/serve/load.py "http://127.0.0.1:$PORT" model "$SERVER_PID" "$CLIENTS" "$ROUNDS" ||
  fail "load test (above)"
kill -0 "$SERVER_PID" || fail "the server died"
echo "ok: $CLIENTS concurrent clients x $ROUNDS rounds, no failures, flat RSS/threads/fds"
