#!/usr/bin/env bash
# `medtune serve` over TLS (--ssl-cert-file, --ssl-key-file; OpenSSL through cpp-httplib): a
# self-signed certificate for 127.0.0.1 made here, curl verifying it, the API key still required
# over HTTPS, and a certificate that does not match its key refused at start (exit 2).
# Usage: serve_tls.sh MEDTUNE_BIN [PARITY_BIN]. Skips (77) without the openssl command.
set -euo pipefail
MEDTUNE=${1:?usage: serve_tls.sh MEDTUNE_BIN [PARITY_BIN]}
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$BUILD/medtune-tiny-llama}
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. tests/support/tiny_model.sh
. tests/support/serve.sh
command -v openssl >/dev/null 2>&1 || { echo "skip: the openssl command is not installed"; exit 77; }
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
make_tiny_model "$TINY" "$TMP/model" 14
for name in a b; do
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" \
    -keyout "$TMP/$name.key" -out "$TMP/$name.crt" 2>/dev/null || fail "openssl req"
done
rc=0
"$MEDTUNE" serve "$TMP/model" --port 0 --ssl-cert-file "$TMP/a.crt" --ssl-key-file "$TMP/b.key" 2>"$TMP/bad.err" || rc=$?
[ "$rc" = 2 ] || fail "a certificate with another certificate's key: exit $rc, not 2"
grep -q "a.crt" "$TMP/bad.err" || fail "the refusal does not name the certificate: $(cat "$TMP/bad.err")"
start_server "$MEDTUNE" "$TMP/server.log" "$TMP/model" -c 512 --ssl-cert-file "$TMP/a.crt" --ssl-key-file "$TMP/a.key" \
  --api-key k1
grep -q "listening on https://" "$TMP/server.log" || fail "not announced as https"
curl -sf --cacert "$TMP/a.crt" "https://127.0.0.1:$PORT/health" | grep -q '"ok"' || fail "health over TLS"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$TMP/a.crt" "https://127.0.0.1:$PORT/v1/models")
[ "$code" = 401 ] || fail "no key over TLS: HTTP $code"
curl -sf --cacert "$TMP/a.crt" -H "Authorization: Bearer k1" "https://127.0.0.1:$PORT/v1/completions" \
  -d '{"model": "model", "prompt": "Hello", "max_tokens": 2}' | grep -q '"text_completion"' || fail "completion over TLS"
# Plain HTTP to the TLS port gets no answer.
if curl -sf --max-time 5 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then fail "plain HTTP answered on the TLS port"; fi
echo "ok: TLS with a verified certificate, key required, mismatched key refused"
