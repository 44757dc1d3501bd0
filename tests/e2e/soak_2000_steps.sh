#!/usr/bin/env bash
# Long-run stability (labels slow and soak: not in the default CI run; `ctest -L soak` runs it):
# 2,000 training steps on a tiny model with checkpoints every 100 steps, evaluation every 500 and
# metrics every step. Memory is planned before step 1 (issue #5): resident memory from step 5 on
# must stay within 1% of its step-5 value (metrics.jsonl's rss_bytes), across saves and
# evaluations; and the process's open files and threads
# (sampled from /proc while it runs) must not grow.
# Usage: soak_2000_steps.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Needs
# medtune-tiny-llama, built next to medtune, and python3 (to read metrics.jsonl).
set -euo pipefail
MEDTUNE=${1:?usage: soak_2000_steps.sh MEDTUNE_BIN [PARITY_BIN]}
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$(dirname "$MEDTUNE")/medtune-tiny-llama}
TMP=$(mktemp -d)
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
export OMP_WAIT_POLICY=passive

MODEL="$TMP/model"
make_tiny_model "$TINY" "$MODEL" 7
head -n 48 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
head -n 8 data/sample/medqa_dev.jsonl > "$TMP/val.jsonl"
STEPS=${MEDTUNE_SOAK_STEPS:-2000}
cat > "$TMP/run.yaml" <<YAML
base_model: $MODEL
adapter: lora
datasets:
  - path: $TMP/train.jsonl
    type: medqa
test_datasets:
  - path: $TMP/val.jsonl
    type: medqa
prompt_format: lm_eval
lora_r: 4
lora_alpha: 8
lora_dropout: 0.1
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
max_steps: $STEPS
learning_rate: 1.0e-4
seed: 3
save_steps: 100
save_total_limit: 2
eval_steps: 500
logging_steps: 1
num_threads: 2
output_dir: $TMP/run
YAML

"$MEDTUNE" train --config "$TMP/run.yaml" >"$TMP/out" 2>"$TMP/err" &
PID=$!
# Open files and threads, sampled from /proc twice a second after step 200. A checkpoint save holds
# a file or two open for a moment, so single samples may be higher; a leak raises the floor. The
# floor (smallest sample) of the last third of the run must not exceed that of the first third.
: >"$TMP/samples"
while kill -0 "$PID" 2>/dev/null; do
  step=$(grep -c '"grad_norm"' "$TMP/run/metrics.jsonl" 2>/dev/null || true)
  if [ "${step:-0}" -ge 200 ]; then
    fds=$(ls /proc/"$PID"/fd 2>/dev/null | wc -l || true)
    threads=$(ls /proc/"$PID"/task 2>/dev/null | wc -l || true)
    if [ "${fds:-0}" -gt 0 ]; then echo "$fds $threads" >>"$TMP/samples"; fi
  fi
  sleep 0.5
done
wait "$PID" || fail "training failed: $(tail -5 "$TMP/err")"
PID=""
grep -q "steps $STEPS/$STEPS (completed)" "$TMP/out" || fail "run did not complete: $(cat "$TMP/out")"
n=$(wc -l <"$TMP/samples")
[ "$n" -ge 3 ] || fail "only $n samples of open files/threads after step 200 (the run was too short)"
third=$((n / 3))
floor() { sed -n "$1p" "$TMP/samples" | awk -v c="$2" 'NR == 1 || $c < m {m = $c} END {print m}'; }
fds_warm=$(floor "1,${third}" 1) fds_end=$(floor "$((n - third + 1)),${n}" 1)
threads_warm=$(floor "1,${third}" 2) threads_end=$(floor "$((n - third + 1)),${n}" 2)

# rss_bytes at step 5 and the largest after it.
read -r rss_warm rss_max < <(python3 -c '
import json, sys
rss = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "rss_bytes" in r:
        rss[r["step"]] = r["rss_bytes"]
print(rss[5], max(v for s, v in rss.items() if s >= 5))
' "$TMP/run/metrics.jsonl")
growth=$(awk -v a="$rss_warm" -v b="$rss_max" 'BEGIN{printf "%.3f", 100 * (b - a) / a}')
echo "steps $STEPS: rss at step 5 $((rss_warm / 1024)) KiB, largest after $((rss_max / 1024)) KiB (+$growth%);" \
     "open files (floor of the first / last third of $n samples) $fds_warm -> $fds_end; threads $threads_warm -> $threads_end"
awk -v g="$growth" 'BEGIN{exit !(g < 1.0)}' || fail "resident memory grew by $growth% after step 5"
[ "$fds_end" -le "$fds_warm" ] || fail "open files grew from $fds_warm to $fds_end"
[ "$threads_end" -le "$threads_warm" ] || fail "threads grew from $threads_warm to $threads_end"
echo "ok"
