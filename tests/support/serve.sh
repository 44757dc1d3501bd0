# Sourced by the e2e scripts that run `medtune serve` (from the repository root):
#   start_server MEDTUNE_BIN LOG_FILE MODEL [serve options...]
# Starts the server on 127.0.0.1 with --port 0 (the kernel picks a free port: tests run in
# parallel), waits until it prints its address, and sets SERVER_PID and PORT. Fails the calling
# script (via its `fail`) when the server exits or says nothing within 120 s.
start_server() {
  local bin=$1 log=$2 model=$3
  shift 3
  : >"$log"
  "$bin" serve "$model" --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 1 1200); do
    PORT=$(sed -n 's/.*listening on https\{0,1\}:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1 || true)
    [ -n "$PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited: $(tail -n 5 "$log")"
    sleep 0.1
  done
  fail "the server did not start within 120 s: $(tail -n 5 "$log")"
}
