#!/usr/bin/env bash
# lm-evaluation-harness through `medtune serve` gives the same per-question predictions as
# `medtune eval` on the same model: MedQA questions (medqa_4options, lm-eval's own task YAML with
# the data swapped for a local file; tools/lm_eval_tasks.py run-server), scored by
# `lm_eval --model local-completions` against the server (echo + logprobs, the server's tokenizer
# through /tokenize) and by `medtune eval --task medqa_4options`.
# Checked per question, at both precisions, eval and server at the same one: |delta
# log-likelihood| <= TOL for every option and the same prediction (except where the top two are
# within TOL).
#  - fp32, TOL 1e-4: medtune eval reads a question's rows with OpenBLAS attention in tiles of 64,
#    the server each prompt + option with its batch-invariant products and fixed-order attention
#    in chunks of 128: the sums differ only in order (3e-5 measured).
#  - int8, TOL 1e-5: every int8 kernel has one order per token (the GEMM and the row kernels) and
#    attention one order per query at int8 (ops.h, attention_forward_fixed_order), so the logits
#    are the same bits on both sides; what is left is that the server returns each token's
#    log-prob as a float (eval keeps the double): half an ulp of a float below 16 in magnitude is
#    at most 4.8e-7 (3.4e-7 measured). Before the fixed-order attention the two differed by up to 0.32:
#    int8 rounding amplifies fp32's ~1e-6 through the layers (docs/decisions/cpu-dispatch.md).
# Model: MEDTUNE_SMOLLM2_GGUF (the real model); questions: the first MEDTUNE_SERVE_LM_EVAL_N
# (default 20) of MEDTUNE_MEDQA_DEV, else the project's own sample questions. lm-eval: the Python
# named by MEDTUNE_LM_EVAL_PYTHON, else lm-eval 0.4.13 installed into <build>/venv-lm-eval.
set -euo pipefail
MEDTUNE=${1:?usage: serve_lm_eval.sh MEDTUNE_BIN [PARITY_BIN]}
N=${MEDTUNE_SERVE_LM_EVAL_N:-20}
PY=${MEDTUNE_LM_EVAL_PYTHON:-}
MODEL=${MEDTUNE_SMOLLM2_GGUF:-}
[ -n "$MODEL" ] && [ -f "$MODEL" ] || { echo "skip: MEDTUNE_SMOLLM2_GGUF is not set to the bundled model"; exit 77; }
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. tests/support/serve.sh
. tests/support/pinned_venv.sh
# Without MEDTUNE_LM_EVAL_PYTHON, lm-eval is installed (pinned; its core needs no torch, ~1 min)
# into a venv beside the build, so that CI runs this test (skip, 77, only where PyPI is unreachable).
if [ -z "$PY" ]; then
  pinned_venv "$BUILD/venv-lm-eval" lm_eval "lm-eval==0.4.13"
  PY="$BUILD/venv-lm-eval/bin/python"
fi
"$PY" -c "import lm_eval" 2>/dev/null || { echo "skip: $PY cannot import lm_eval"; exit 77; }
export OMP_WAIT_POLICY=passive
# lm-eval's API models need its [api] extra; tenacity is the part a plain `pip install lm-eval`
# lacks. Installed beside the build (never into that Python's environment) and put on PYTHONPATH.
EXTRAS="$BUILD/lm-eval-api-extras"
if ! PYTHONPATH="$EXTRAS" "$PY" -c "import tenacity" 2>/dev/null; then
  "$PY" -m pip install -q --target "$EXTRAS" "tenacity==9.1.2" > "$TMP/pip.log" 2>&1 ||
    { echo "skip: cannot install tenacity (lm-eval[api]) into $EXTRAS: $(tail -n 2 "$TMP/pip.log")"; exit 77; }
fi
export PYTHONPATH="$EXTRAS${PYTHONPATH:+:$PYTHONPATH}"

DATA=${MEDTUNE_MEDQA_DEV:-data/sample/medqa_dev.jsonl}
head -n "$N" "$DATA" > "$TMP/medqa_4options.jsonl"
for PRECISION in fp32 int8; do
  case $PRECISION in fp32) TOL=1e-4 ;; int8) TOL=1e-5 ;; esac
  "$MEDTUNE" eval "$MODEL" --task medqa_4options --data "$TMP/medqa_4options.jsonl" --out "$TMP/eval-$PRECISION" \
    --precision "$PRECISION" -q > /dev/null || fail "medtune eval --precision $PRECISION"
  start_server "$MEDTUNE" "$TMP/server-$PRECISION.log" "$MODEL" -c 8192 -q --alias smollm2 --precision "$PRECISION"
  "$PY" tools/lm_eval_tasks.py run-server "http://127.0.0.1:$PORT" smollm2 "$TMP/lm_eval-$PRECISION.json" \
    "$TMP/medqa_4options.jsonl" > "$TMP/lm_eval.log" 2>&1 || { tail -30 "$TMP/lm_eval.log"; fail "lm-eval did not run"; }
  kill "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  echo -n "$PRECISION: "
  "$PY" - "$TMP/lm_eval-$PRECISION.json" "$TMP/eval-$PRECISION/predictions.jsonl" "$TOL" <<'PY' || fail "at $PRECISION"
import json, sys
ref, got_path, tol = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
want = ref["medqa_4options.jsonl"]["records"]
got = [json.loads(l) for l in open(got_path)]
if len(got) != len(want):
    print(f"FAIL: medtune eval scored {len(got)} questions, lm-eval through the server {len(want)}"); sys.exit(1)
fail, worst, same = 0, 0.0, 0
for i, (g, w) in enumerate(zip(got, want)):
    ll = w["loglikelihoods"]
    mine = g["option_logprobs"]
    d = max(abs(a - b) for a, b in zip(mine, ll))
    worst = max(worst, d)
    if d > tol:
        print(f"FAIL [{i}]: log-likelihoods differ by {d:.3g} > {tol}: medtune eval {mine}, server {ll}"); fail = 1
    pred = "ABCD".index(g["pred"])
    top = sorted(ll, reverse=True)
    if pred == w["pred"]:
        same += 1
    elif top[0] - top[1] > tol:
        print(f"FAIL [{i}]: medtune eval predicts {pred}, lm-eval through the server {w['pred']}"); fail = 1
print(f"{len(got)} MedQA questions: {same} identical predictions; largest |delta log-likelihood| {worst:.2e} "
      f"(tolerance {tol}); accuracy through the server {ref['medqa_4options.jsonl']['acc']:.3f}")
sys.exit(fail)
PY
done
echo "ok: lm-eval local-completions through medtune serve agrees with medtune eval"
