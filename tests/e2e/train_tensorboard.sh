#!/usr/bin/env bash
# A run you can watch: `report_to: tensorboard` event files read by TensorBoard's own reader
# (EventAccumulator, from the `tensorboard` PyPI package), and report.html beside the adapter.
#  1. A run of 8 steps (a checkpoint at 4, evaluation every 2) with report_to: tensorboard; then a
#     crash is simulated after step 8's logging (checkpoint-8 and adapter/ removed) and the run is
#     resumed from checkpoint-4 with another learning rate (--force-resume), so steps 5-8 are taken
#     again with different values.
#  2. EventAccumulator loads the logging_dir (two event files): every tag holds each step exactly
#     once, the values of the resumed run for steps 5-8 (its SessionLog START purged the first
#     run's), and they equal metrics.jsonl's; float32 rounding is the only difference allowed,
#     since TensorBoard's simple_value is a float.
#  3. report.html says "finished" and no longer reloads itself.
#  4. `eval --compare BASE TUNED --out DIR` writes comparison.html with the tuned adapter's training
#     curves, and says why the base model's side has none.
# Usage: train_tensorboard.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Needs
# medtune-tiny-llama built next to medtune. tensorboard is installed into <build>/venv-tensorboard
# on first use; exit 77 (skip) when that is impossible (no python3 venv, no PyPI).
set -euo pipefail
MEDTUNE=${1:?usage: train_tensorboard.sh MEDTUNE_BIN [PARITY_BIN]}
BUILD=$(cd "$(dirname "$MEDTUNE")" && pwd)
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$BUILD/medtune-tiny-llama}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
. tests/support/pinned_venv.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"

# The reader, pinned: 2.18.0 is the last release for Python 3.9+, with the EventAccumulator API
# (and purge_orphaned_data) unchanged since TensorBoard 1.x.
VENV="$BUILD/venv-tensorboard"
pinned_venv "$VENV" tensorboard "tensorboard==2.18.0"

export OMP_WAIT_POLICY=passive
make_tiny_model "$TINY" "$TMP/model" 5
head -n 24 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
RUN="$TMP/run"
cat > "$TMP/run.yaml" <<YAML
base_model: $TMP/model
adapter: lora
datasets:
  - path: $TMP/train.jsonl
    type: medqa
prompt_format: lm_eval
val_set_size: 4
lora_r: 4
lora_alpha: 8
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
max_steps: 8
learning_rate: 1.0e-3
warmup_steps: 2
save_steps: 4
eval_steps: 2
logging_steps: 1
num_threads: 1
output_dir: $RUN
report_to: tensorboard
YAML

"$MEDTUNE" train --config "$TMP/run.yaml" >"$TMP/first.out" 2>"$TMP/first.err" || fail "first run: $(cat "$TMP/first.err")"
grep -q "steps 8/8 (completed)" "$TMP/first.out" || fail "first run: $(cat "$TMP/first.out")"
[ "$(ls "$RUN"/runs/events.out.tfevents.* | wc -l)" -eq 1 ] || fail "first run: not one event file in $RUN/runs"
cp "$RUN/metrics.jsonl" "$TMP/first_metrics.jsonl"
# A crash after step 8 was logged, before it was saved.
rm -rf "$RUN/checkpoint-8" "$RUN/adapter"
"$MEDTUNE" train --config "$TMP/run.yaml" learning_rate=3.0e-3 --resume auto --force-resume \
  >"$TMP/second.out" 2>"$TMP/second.err" || fail "resumed run: $(cat "$TMP/second.err")"
grep -q "resuming from $RUN/checkpoint-4" "$TMP/second.err" || fail "resumed run: $(cat "$TMP/second.err")"
[ "$(ls "$RUN"/runs/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "resume did not start a second event file"

"$VENV/bin/python" - "$RUN" "$TMP/first_metrics.jsonl" <<'PY' || fail "TensorBoard's reader disagrees (above)"
import json, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run, first_path = sys.argv[1], sys.argv[2]

def series(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "eval" in r:
            e = r["eval"]
            out.setdefault("eval/loss", {})[e["step"]] = e["loss"]
            out.setdefault("eval/accuracy", {})[e["step"]] = e["accuracy"]
        elif "step" in r:
            for key, tag in [("loss", "train/loss"), ("lr", "train/learning_rate"),
                             ("grad_norm", "train/grad_norm"), ("tokens_per_s", "train/tokens_per_second"),
                             ("epoch", "train/epoch")]:
                out.setdefault(tag, {})[r["step"]] = r[key]
            out.setdefault("train/rss_mib", {})[r["step"]] = r["rss_bytes"] / 2**20
    return out

want = series(run + "/metrics.jsonl")
first = series(first_path)
acc = EventAccumulator(run + "/runs", size_guidance={"scalars": 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
assert tags == sorted(want), f"tags {tags}, metrics.jsonl has {sorted(want)}"
assert sorted(want["train/loss"]) == list(range(1, 9)), sorted(want["train/loss"])
assert sorted(want["eval/loss"]) == [0, 2, 4, 6, 8], sorted(want["eval/loss"])
assert "eval/accuracy" in tags  # the validation questions are scored too
for tag in tags:
    events = acc.Scalars(tag)
    steps = [e.step for e in events]
    assert steps == sorted(want[tag]), f"{tag}: TensorBoard has steps {steps}, metrics.jsonl {sorted(want[tag])}"
    for e in events:
        expected = np.float32(want[tag][e.step])
        assert np.float32(e.value) == expected, f"{tag} step {e.step}: {e.value!r} != float32({want[tag][e.step]!r})"
# The resumed run's values, not the first run's: the learning rate of steps 5-8 differs.
lr = {e.step: e.value for e in acc.Scalars("train/learning_rate")}
for s in range(5, 9):
    assert lr[s] != np.float32(first["train/learning_rate"][s]), f"step {s} still shows the first run's lr"
for s in range(1, 5):
    assert lr[s] == np.float32(first["train/learning_rate"][s]), f"step {s}: lost the first run's lr"
print(f"TensorBoard reads {len(tags)} tags, steps and values equal to metrics.jsonl")
PY

REPORT="$RUN/report.html"
[ -f "$REPORT" ] || fail "no $REPORT"
grep -q 'class="status finished">finished<' "$REPORT" || fail "report.html does not say finished"
! grep -q 'http-equiv="refresh"' "$REPORT" || fail "a finished report.html still reloads itself"
[ "$(grep -o '<polyline' "$REPORT" | wc -l)" -ge 6 ] || fail "report.html lacks curves"
! grep -q '<script\|src=\|href=' "$REPORT" || fail "report.html is not self-contained"

# eval --compare --out: comparison.html overlays the training curves of the adapters compared; the
# base model's side says why it has none.
head -n 4 data/sample/medqa_dev.jsonl > "$TMP/dev.jsonl"
"$MEDTUNE" eval "$TMP/model" --data "$TMP/dev.jsonl" --out "$TMP/eval_base" -q >/dev/null 2>"$TMP/eval.err" || fail "eval: $(cat "$TMP/eval.err")"
"$MEDTUNE" eval "$TMP/model" --data "$TMP/dev.jsonl" --adapter "$RUN/adapter" --out "$TMP/eval_tuned" -q >/dev/null 2>"$TMP/eval.err" ||
  fail "eval with the adapter: $(cat "$TMP/eval.err")"
"$MEDTUNE" eval --compare "$TMP/eval_base" "$TMP/eval_tuned" --out "$TMP/cmp" >/dev/null 2>"$TMP/cmp.err" || fail "compare: $(cat "$TMP/cmp.err")"
CMP="$TMP/cmp/comparison.html"
[ -f "$CMP" ] || fail "no $CMP"
grep -q "no training curves: evaluated without an adapter" "$CMP" || fail "comparison.html does not say why A has no curves"
grep -q "$RUN/metrics.jsonl" "$CMP" || fail "comparison.html does not name B's training run"
[ "$(grep -o '<polyline' "$CMP" | wc -l)" -eq 6 ] || fail "comparison.html: not B's six curves"

# Any other tracker is refused, naming it.
set +e
"$MEDTUNE" train --config "$TMP/run.yaml" report_to=wandb output_dir="$TMP/bad" >"$TMP/bad.out" 2>"$TMP/bad.err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "report_to=wandb: exit $rc, expected 2"
grep -q "'report_to' value 'wandb' is not supported" "$TMP/bad.err" || fail "report_to=wandb: $(cat "$TMP/bad.err")"
echo "ok"
