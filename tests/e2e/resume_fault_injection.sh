#!/usr/bin/env bash
# Crash-safe checkpoints and bit-exact resume, proven by fault injection on a tiny model:
#  1. an uninterrupted reference run;
#  2. the same run killed with SIGKILL at >= 10 random moments (some while a checkpoint is being
#     written; one newest checkpoint is also corrupted on purpose), resumed with --resume auto each
#     time: the final adapter must equal the reference byte for byte, and so must every step's loss;
#  3. clean stops (--max-runtime, SIGTERM) save and exit 0, and resume to the same adapter; a resume
#     with another config is refused (exit 2) naming the key;
#  4. disk full during a save (a small tmpfs when mount works, else RLIMIT_FSIZE): a clear error
#     naming the file, a non-zero exit, the previous checkpoint intact, and a resume that finishes
#     with the reference adapter.
# Usage: resume_fault_injection.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Needs
# medtune-tiny-llama (tests/support/make_tiny_llama.cpp), built next to medtune. The kill moments
# come from MEDTUNE_FAULT_SEED (default: random); the seed is printed so a failure can be replayed.
# Took 24-37 s on the shared 2-core development machine at load average ~12 (most of it fsync and
# process start-up; training itself is ~0.5 s of CPU per full run).
set -euo pipefail
MEDTUNE=${1:?usage: resume_fault_injection.sh MEDTUNE_BIN [PARITY_BIN]}
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$(dirname "$MEDTUNE")/medtune-tiny-llama}
TMP=$(mktemp -d)
MNT=""
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
  if [ -n "$MNT" ]; then umount "$MNT" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"

SEED=${MEDTUNE_FAULT_SEED:-$(( $(date +%s%N) % 100000 ))}
echo "fault injection seed: $SEED (replay with MEDTUNE_FAULT_SEED=$SEED)"
RANDOM=$SEED
export OMP_WAIT_POLICY=passive

# A tiny random Llama (hidden 32, 2 layers) with the SmolLM2 tokenizer; 24 original sample
# questions cut to 64 tokens: 6 steps per epoch, 30 steps, a checkpoint every 3.
MODEL="$TMP/model"
make_tiny_model "$TINY" "$MODEL" 7
head -n 24 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
cat > "$TMP/run.yaml" <<EOF
base_model: $MODEL
adapter: lora
datasets:
  - path: $TMP/train.jsonl
    type: medqa
prompt_format: lm_eval
lora_r: 4
lora_alpha: 8
lora_dropout: 0.1
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
gradient_accumulation_steps: 2
max_steps: 30
learning_rate: 1.0e-3
lr_scheduler: cosine
warmup_steps: 3
weight_decay: 0.01
seed: 11
save_steps: 3
save_total_limit: 2
eval_steps: 0
logging_steps: 1
num_threads: 1
EOF
train() { "$MEDTUNE" train --config "$TMP/run.yaml" "$@"; }
losses() { grep -o '"grad_norm":[^,]*,"loss":[^,]*' "$1/metrics.jsonl"; }

# 1. Reference.
REF="$TMP/ref"
train output_dir="$REF" >"$TMP/ref.out" 2>"$TMP/ref.err" || fail "reference run: $(cat "$TMP/ref.err")"
grep -q "steps 30/30 (completed)" "$TMP/ref.out" || fail "reference: $(cat "$TMP/ref.out")"
[ "$(losses "$REF" | wc -l)" -eq 30 ] || fail "reference: metrics.jsonl lacks steps"
# Resuming a finished run takes no step and rewrites the same adapter.
cp "$REF/adapter/adapter_model.safetensors" "$TMP/ref_adapter.safetensors"
train output_dir="$REF" --resume auto >"$TMP/again.out" 2>"$TMP/again.err" || fail "resume finished: $(cat "$TMP/again.err")"
grep -q "resuming from $REF/checkpoint-30" "$TMP/again.err" || fail "resume finished: $(cat "$TMP/again.err")"
cmp "$REF/adapter/adapter_model.safetensors" "$TMP/ref_adapter.safetensors" || fail "resume of a finished run changed the adapter"

# 2. Killed and resumed. Each kill waits for progress the run makes itself (its progress lines on
# stderr), so the kills land in training on a slow machine too; every third waits for a save to
# start (MEDTUNE_TEST_SAVE_DELAY_MS: a test-only pause between the files of a checkpoint) and
# kills inside it.
RUN="$TMP/run"
kills=0
midsave=0
corrupted=""
current_step() { grep -o "^step [0-9]*" "$1" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true; }
newest_checkpoint() { ls -d "$RUN"/checkpoint-* 2>/dev/null | sed "s/.*checkpoint-//" | sort -n | tail -n 1 || true; }
corrupt_newest() {
  corrupted=$(newest_checkpoint)
  [ -n "$corrupted" ] || fail "no checkpoint to corrupt"
  truncate -s 100 "$RUN/checkpoint-$corrupted/optimizer.safetensors"
}
check_corruption_reported() {
  grep -q "skipping $RUN/checkpoint-$corrupted: $RUN/checkpoint-$corrupted/optimizer.safetensors: checksum mismatch" "$1" \
    || fail "the corrupted checkpoint-$corrupted was not reported: $(cat "$1")"
  corrupted=reported
}
for attempt in $(seq 1 40); do
  [ "$kills" -ge 12 ] && break
  [ "$attempt" -lt 40 ] || fail "could not place 12 kills in 40 attempts"
  # Once (after 5 kills, when there is a previous checkpoint to fall back to; else before the
  # final run) the newest checkpoint is damaged: the next resume must skip it naming the file.
  if [ "$kills" -ge 5 ] && [ -z "$corrupted" ] && [ "$(ls -d "$RUN"/checkpoint-* 2>/dev/null | wc -l)" -ge 2 ]; then
    corrupt_newest
  fi
  from=$(newest_checkpoint)
  from=${from:-0}
  ERR="$TMP/kill$attempt.err"
  # Mid-save kills get a 30 ms pause after each file of a checkpoint; the others none.
  delay=0
  [ $((kills % 3)) -eq 2 ] && delay=30
  MEDTUNE_TEST_SAVE_DELAY_MS=$delay "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$RUN" --resume auto \
    >"$TMP/kill$attempt.out" 2>"$ERR" &
  PID=$!
  # Wait until the run has started training: it removes the temporary folders of interrupted
  # saves before that, so any temporary folder seen from then on is this run's own save.
  for _ in $(seq 1 3000); do
    grep -q "^training: " "$ERR" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.005
  done
  if [ $((kills % 3)) -eq 2 ]; then
    # Mid-save: wait for a temporary checkpoint folder, then kill 0-90 ms into the save.
    for _ in $(seq 1 3000); do
      compgen -G "$RUN/.tmp-checkpoint-*" >/dev/null && break
      kill -0 "$PID" 2>/dev/null || break
      sleep 0.005
    done
    sleep "0.0$(printf '%02d' $((RANDOM % 90)))"
  else
    # Mid-step. Every third kill waits 4-6 steps past the newest checkpoint, past the next save,
    # so the run advances at least 3 steps; the others 1-3 steps, at or before the next save. At
    # most step 24, so the run never finishes before its kill; then 0-20 ms more.
    if [ $((kills % 3)) -eq 0 ]; then
      target=$(( from + 4 + RANDOM % 3 ))
    else
      target=$(( from + 1 + RANDOM % 3 ))
    fi
    [ "$target" -le 24 ] || target=24
    for _ in $(seq 1 3000); do
      s=$(current_step "$ERR")
      [ -n "$s" ] && [ "$s" -ge "$target" ] && break
      kill -0 "$PID" 2>/dev/null || break
      sleep 0.005
    done
    [ "$from" -ge 21 ] || sleep "0.0$(printf '%02d' $((RANDOM % 20)))"
  fi
  if kill -9 "$PID" 2>/dev/null; then
    wait "$PID" 2>/dev/null || true
    kills=$((kills + 1))
    if compgen -G "$RUN/.tmp-checkpoint-*" >/dev/null; then
      midsave=$((midsave + 1))
      echo "kill $kills: during a save ($(cd "$RUN" && echo .tmp-checkpoint-*))"
    else
      echo "kill $kills: at step $(current_step "$ERR") (newest checkpoint before it: $from)"
    fi
  else
    wait "$PID" || fail "run $attempt failed: $(cat "$ERR")"
    echo "run $attempt finished before its kill"
  fi
  PID=""
  if [ -n "$corrupted" ] && [ "$corrupted" != reported ]; then check_corruption_reported "$ERR"; fi
done
[ "$midsave" -ge 3 ] || fail "only $midsave of $kills kills landed during a save"
[ -n "$corrupted" ] || corrupt_newest
train output_dir="$RUN" --resume auto >"$TMP/final.out" 2>"$TMP/final.err" || fail "final resume: $(cat "$TMP/final.err")"
[ "$corrupted" = reported ] || check_corruption_reported "$TMP/final.err"
grep -q "steps 30/30 (completed)" "$TMP/final.out" || fail "final resume: $(cat "$TMP/final.out")"
cmp "$RUN/adapter/adapter_model.safetensors" "$REF/adapter/adapter_model.safetensors" \
  || fail "the adapter after $kills kills differs from the uninterrupted run's"
[ "$(losses "$RUN")" = "$(losses "$REF")" ] || fail "per-step losses differ from the uninterrupted run's"
compgen -G "$RUN/.tmp-checkpoint-*" >/dev/null && fail "a temporary checkpoint folder was left behind"
echo "ok: $kills kills ($midsave during a save), final adapter identical"

# Clean stops: a slice that runs out of time (--max-runtime; the 100 ms pause per checkpoint file
# makes 30 steps take far longer than 1 s) and one stopped by SIGTERM both save, say so and exit 0;
# the last slice ends at the reference adapter.
MR="$TMP/mr"
MEDTUNE_TEST_SAVE_DELAY_MS=100 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$MR" --max-runtime 1s \
  >"$TMP/mr1.out" 2>"$TMP/mr1.err" || fail "--max-runtime: exit $?: $(cat "$TMP/mr1.err")"
grep -q "(max_runtime)" "$TMP/mr1.out" || fail "--max-runtime: $(cat "$TMP/mr1.out")"
grep -q "stopped at max_runtime after step" "$TMP/mr1.err" || fail "--max-runtime: $(cat "$TMP/mr1.err")"
MEDTUNE_TEST_SAVE_DELAY_MS=100 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$MR" --resume auto \
  >"$TMP/mr2.out" 2>"$TMP/mr2.err" &
PID=$!
from=$(grep -o 'steps [0-9]*' "$TMP/mr1.out" | cut -d' ' -f2)
for _ in $(seq 1 3000); do
  s=$(current_step "$TMP/mr2.err")
  [ -n "$s" ] && [ "$s" -gt "$from" ] && break
  sleep 0.005
done
kill -TERM "$PID"
wait "$PID" || fail "SIGTERM: exit $?: $(cat "$TMP/mr2.err")"
PID=""
grep -q "(signal)" "$TMP/mr2.out" || fail "SIGTERM: $(cat "$TMP/mr2.out")"
train output_dir="$MR" --resume auto >"$TMP/mr3.out" 2>"$TMP/mr3.err" || fail "resume after SIGTERM: $(cat "$TMP/mr3.err")"
cmp "$MR/adapter/adapter_model.safetensors" "$REF/adapter/adapter_model.safetensors" \
  || fail "the adapter after max_runtime and SIGTERM slices differs"
echo "ok: --max-runtime 1s stopped at $(grep -o 'steps [0-9]*/30' "$TMP/mr1.out"), SIGTERM at $(grep -o 'steps [0-9]*/30' "$TMP/mr2.out"), resumed to the same adapter"

# 3. Another config: refused with exit 2, naming the key.
set +e
train output_dir="$REF" --resume auto learning_rate=2.0e-3 >"$TMP/cfg.out" 2>"$TMP/cfg.err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "resume with another learning_rate: exit $rc, expected 2"
grep -q "config: learning_rate 0.001 -> 0.002" "$TMP/cfg.err" || fail "refusal does not name the key: $(cat "$TMP/cfg.err")"
# Forgetting --resume never deletes a run: a fresh start into a folder with checkpoints is refused.
set +e
train output_dir="$REF" >"$TMP/fresh.out" 2>"$TMP/fresh.err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "fresh start over checkpoints: exit $rc, expected 2"
grep -q -- "--resume auto" "$TMP/fresh.err" || fail "fresh start refusal: $(cat "$TMP/fresh.err")"
[ -d "$REF/checkpoint-30" ] || fail "a refused fresh start deleted checkpoint-30"
train output_dir="$REF" --resume auto --max-runtime 1x >/dev/null 2>"$TMP/mr.err" && fail "--max-runtime 1x accepted"
grep -q -- "--max-runtime: expected a duration" "$TMP/mr.err" || fail "--max-runtime 1x: $(cat "$TMP/mr.err")"

# 4. Disk full during a save. A run stopped after checkpoint-6, then resumed on a disk that fills
# up when checkpoint-9 is written.
DF="$TMP/df"
MEDTUNE_TEST_SAVE_DELAY_MS=0 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$DF" >"$TMP/df1.out" 2>"$TMP/df1.err" &
PID=$!
for _ in $(seq 1 3000); do
  [ -f "$DF/checkpoint-6/checksums.sha256" ] && break
  kill -0 "$PID" 2>/dev/null || fail "run stopped before checkpoint-6: $(cat "$TMP/df1.err")"
  sleep 0.005
done
kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=""
rm -rf "$DF"/checkpoint-{7,8,9,1*,2*,30} "$DF"/.tmp-checkpoint-* "$DF/adapter"  # keep checkpoint-3 and -6
adapter_bytes=$(stat -c %s "$DF/checkpoint-6/adapter_model.safetensors")
optimizer_bytes=$(stat -c %s "$DF/checkpoint-6/optimizer.safetensors")
# MEDTUNE_FAULT_DISK=rlimit forces the RLIMIT_FSIZE variant (for checking it where mount works).
if [ "${MEDTUNE_FAULT_DISK:-tmpfs}" = tmpfs ] && [ "$(id -u)" -eq 0 ] && mkdir -p "$TMP/mnt" && mount -t tmpfs -o size=1m tmpfs "$TMP/mnt" 2>/dev/null; then
  MNT="$TMP/mnt"
  cp -a "$DF" "$MNT/df"
  # Fill the disk so that the adapter of checkpoint-9 fits but its optimizer state does not.
  free_kb=$(df -k --output=avail "$MNT" | tail -n 1)
  leave_kb=$(( (adapter_bytes + optimizer_bytes / 2) / 1024 + 8 ))
  fallocate -l $(( (free_kb - leave_kb) * 1024 )) "$MNT/filler" 2>/dev/null \
    || dd if=/dev/zero of="$MNT/filler" bs=1k count=$((free_kb - leave_kb)) status=none
  DFR="$MNT/df"
  set +e
  train output_dir="$DFR" --resume auto >"$TMP/df2.out" 2>"$TMP/df2.err"; rc=$?
  set -e
  how="tmpfs"
else
  # RLIMIT_FSIZE between the adapter's size and the optimizer state's: writing the latter fails
  # with EFBIG (SIGXFSZ is ignored so the write returns the error instead of killing the process).
  limit_kb=$(( (adapter_bytes + optimizer_bytes) / 2 / 1024 ))
  [ "$(stat -c %s "$DF/metrics.jsonl")" -lt $(( (limit_kb - 4) * 1024 )) ] || fail "metrics.jsonl too big for the limit"
  DFR="$DF"
  set +e
  ( trap '' XFSZ; ulimit -f "$limit_kb"; exec "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$DFR" --resume auto ) \
    >"$TMP/df2.out" 2>"$TMP/df2.err"; rc=$?
  set -e
  how="RLIMIT_FSIZE"
fi
[ "$rc" -ne 0 ] || fail "disk full ($how): exit 0"
grep -q "cannot save checkpoint-9 (" "$TMP/df2.err" || fail "disk full ($how): $(cat "$TMP/df2.err")"
grep -q "/.tmp-checkpoint-9/[a-z_]*\.[a-z]*\.tmp: write failed: \(No space left on device\|File too large\)" "$TMP/df2.err" \
  || fail "disk full ($how) does not name the file: $(cat "$TMP/df2.err")"
[ ! -e "$DFR/checkpoint-9" ] || fail "disk full ($how): a checkpoint-9 folder exists"
compgen -G "$DFR/.tmp-checkpoint-*" >/dev/null && fail "disk full ($how): temporary folder left behind"
(cd "$DFR/checkpoint-6" && sha256sum --quiet -c checksums.sha256) || fail "disk full ($how): checkpoint-6 damaged"
[ -n "$MNT" ] && rm -f "$MNT/filler"
train output_dir="$DFR" --resume auto >"$TMP/df3.out" 2>"$TMP/df3.err" || fail "resume after disk full: $(cat "$TMP/df3.err")"
grep -q "resuming from $DFR/checkpoint-6" "$TMP/df3.err" || fail "resume after disk full: $(cat "$TMP/df3.err")"
cmp "$DFR/adapter/adapter_model.safetensors" "$REF/adapter/adapter_model.safetensors" \
  || fail "the adapter after a disk-full resume differs"
echo "ok: disk full ($how): '$(grep -o 'cannot save checkpoint-9.*' "$TMP/df2.err" | sed "s|$TMP|\$TMP|g")', exit $rc; resumed to the same adapter"
