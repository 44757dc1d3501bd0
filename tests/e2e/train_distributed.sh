#!/usr/bin/env bash
# Data-parallel training under Debian's OpenMPI (mpirun), on a tiny Hugging Face Llama:
#  1. 2 ranks x 1 accumulation step over TCP (--mca btl tcp,self: the gradients cross a socket)
#     train the same adapter, byte for byte, and the same per-step losses as 1 process x 2;
#  2. rank 1 SIGKILLed mid-run: the job ends non-zero within KILL_BOUND_S, mpirun's message names
#     the rank and the signal; 1 process with --resume auto finishes it to the reference adapter;
#  3. 1 process SIGKILLed, resumed by 2 ranks: the reference adapter;
#  4. rank 0 (the writer) SIGKILLed while it writes a checkpoint: the job ends, the earlier
#     checkpoints stay valid, 2 ranks resume to the reference adapter;
#  5. a rank that hangs (SIGSTOP) past ddp_timeout: the job ends non-zero, naming the exchange;
#  6. ranks given different configs are refused before training, naming the rank and the key;
#  7. a rank that cannot read its data ends the job before training, naming the rank and file;
#  8. the validation loss and accuracy, split over 2 ranks, equal 1 process's at every evaluation;
#  9. output_dir on each rank's own disk: a killed job resumes, rank 0 sending its checkpoint.
# Usage: train_distributed.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Exit 77 (skip)
# when mpirun is absent (openmpi-bin, scripts/setup.sh).
set -euo pipefail
MEDTUNE=${1:?usage: train_distributed.sh MEDTUNE_BIN [PARITY_BIN]}
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$(dirname "$MEDTUNE")/medtune-tiny-llama}
if ! command -v mpirun >/dev/null; then
  echo "skip: mpirun is absent (apt-get install openmpi-bin libopenmpi-dev; scripts/setup.sh)"
  exit 77
fi
TMP=$(mktemp -d)
JOB=""
cleanup() {
  if [ -n "$JOB" ]; then kill -9 "$JOB" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
export OMP_WAIT_POLICY=passive
# Root in CI; more ranks than cores; no binding (each rank runs 1 thread); no CMA single-copy
# (containers often forbid the ptrace it needs).
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# A job must be down this many seconds after one of its ranks was killed (measured: ~1 s).
KILL_BOUND_S=20

MODEL="$TMP/model"
make_tiny_model "$TINY" "$MODEL" 7
head -n 24 data/sample/medqa_train.jsonl > "$TMP/train.jsonl"
# 24 questions, 2 per micro-batch: 12 micro-batches per epoch, 2 per step (global), 24 steps.
cat > "$TMP/run.yaml" <<YAML
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
gradient_accumulation_steps: 1
max_steps: 24
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
YAML
one() { "$MEDTUNE" train --config "$TMP/run.yaml" gradient_accumulation_steps=2 "$@"; }
two() { "${MPIRUN[@]}" -np 2 "$MEDTUNE" train --config "$TMP/run.yaml" "$@"; }
# In the background (cmd &): exec, so that $! is mpirun's (or medtune's) own pid.
one_bg() { exec "$MEDTUNE" train --config "$TMP/run.yaml" gradient_accumulation_steps=2 "$@"; }
two_bg() { exec "${MPIRUN[@]}" -np 2 "$MEDTUNE" train --config "$TMP/run.yaml" "$@"; }
losses() { grep -o '"grad_norm":[^,]*,"loss":[^,]*' "$1/metrics.jsonl"; }
same_adapter() {
  cmp -s "$1/adapter/adapter_model.safetensors" "$TMP/ref/adapter/adapter_model.safetensors" \
    || fail "$2: the adapter differs from the single-process reference"
}
# The pid of rank $2 of the mpirun job $1 (mpirun starts the ranks of this machine itself).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
wait_for() {  # wait_for SECONDS COMMAND...: until the command succeeds (or the job $JOB ends)
  local t=$1; shift
  for _ in $(seq 1 $((t * 50))); do
    "$@" && return 0
    kill -0 "$JOB" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}
step_past() { grep -q "^step $2/" "$1" 2>/dev/null; }

# 1. The reference (1 process, 2 micro-batches per step) and 2 ranks over TCP.
one output_dir="$TMP/ref" >"$TMP/ref.out" 2>"$TMP/ref.err" || fail "reference: $(cat "$TMP/ref.err")"
grep -q "steps 24/24 (completed)" "$TMP/ref.out" || fail "reference: $(cat "$TMP/ref.out")"
"${MPIRUN[@]}" --mca btl tcp,self -np 2 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$TMP/tcp" \
  >"$TMP/tcp.out" 2>"$TMP/tcp.err" || fail "2 ranks over TCP: $(cat "$TMP/tcp.err")"
same_adapter "$TMP/tcp" "2 ranks over TCP"
[ "$(losses "$TMP/tcp")" = "$(losses "$TMP/ref")" ] || fail "2 ranks: per-step losses differ from 1 process"
[ "$(grep -c "^steps 24/24" "$TMP/tcp.out")" -eq 1 ] || fail "2 ranks: rank 0 alone must print the summary: $(cat "$TMP/tcp.out")"
grep -q '"world_size": 2' "$TMP/tcp/manifest.json" || fail "manifest.json does not record the world size"
grep -q '"backend": "mpi"' "$TMP/tcp/manifest.json" || fail "manifest.json does not record the backend"
echo "ok: 2 ranks over TCP = 1 process x 2 accumulation, byte for byte"

# 2. Rank 1 killed mid-run; 1 process resumes. Slow saves (a test-only pause between a
# checkpoint's files) keep the 24 steps from ending before the kill.
R="$TMP/kill21"
MEDTUNE_TEST_SAVE_DELAY_MS=100 two_bg output_dir="$R" >"$TMP/k1.out" 2>"$TMP/k1.err" &
JOB=$!
wait_for 60 step_past "$TMP/k1.err" 7 || fail "the 2-rank run did not reach step 7: $(cat "$TMP/k1.err")"
victim=$(rank_pid "$JOB" 1)
[ -n "$victim" ] || fail "no rank 1 under mpirun $JOB"
kill -9 "$victim"
t0=$(date +%s%N)
set +e
wait "$JOB"; rc=$?
set -e
JOB=""
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" -ne 0 ] || fail "rank 1 killed: mpirun exited 0"
[ "$took_ms" -le $((KILL_BOUND_S * 1000)) ] || fail "rank 1 killed: the job took ${took_ms} ms to end (bound ${KILL_BOUND_S} s)"
grep -q "rank 1 with PID [0-9]* on node .* exited on signal 9" "$TMP/k1.err" \
  || fail "rank 1 killed: mpirun's message does not name the rank and signal: $(cat "$TMP/k1.err")"
echo "ok: rank 1 SIGKILLed -> job down in ${took_ms} ms (mpirun exit $rc)"
one output_dir="$R" --resume auto >"$TMP/k1r.out" 2>"$TMP/k1r.err" || fail "resume 2 -> 1: $(cat "$TMP/k1r.err")"
grep -q "was written by 2 rank(s)" "$TMP/k1r.err" || fail "resume 2 -> 1 does not say the world size changed: $(cat "$TMP/k1r.err")"
same_adapter "$R" "resume 2 ranks -> 1 process"
echo "ok: resumed 2 ranks -> 1 process, reference adapter"

# 3. 1 process killed; 2 ranks resume.
R="$TMP/kill12"
MEDTUNE_TEST_SAVE_DELAY_MS=100 one_bg output_dir="$R" >"$TMP/k2.out" 2>"$TMP/k2.err" &
JOB=$!
wait_for 60 step_past "$TMP/k2.err" 7 || fail "the 1-process run did not reach step 7: $(cat "$TMP/k2.err")"
kill -9 "$JOB"; wait "$JOB" 2>/dev/null || true; JOB=""
two output_dir="$R" --resume auto >"$TMP/k2r.out" 2>"$TMP/k2r.err" || fail "resume 1 -> 2: $(cat "$TMP/k2r.err")"
grep -q "was written by 1 rank(s)" "$TMP/k2r.err" || fail "resume 1 -> 2 does not say the world size changed: $(cat "$TMP/k2r.err")"
same_adapter "$R" "resume 1 process -> 2 ranks"
echo "ok: resumed 1 process -> 2 ranks, reference adapter"

# 4. Rank 0 killed while it writes a checkpoint (a temporary checkpoint folder exists).
R="$TMP/killsave"
MEDTUNE_TEST_SAVE_DELAY_MS=300 two_bg output_dir="$R" >"$TMP/k3.out" 2>"$TMP/k3.err" &
JOB=$!
wait_for 60 step_past "$TMP/k3.err" 4 || fail "the 2-rank run did not reach step 4: $(cat "$TMP/k3.err")"
wait_for 60 compgen -G "$R/.tmp-checkpoint-*" >/dev/null || fail "no save started: $(cat "$TMP/k3.err")"
victim=$(rank_pid "$JOB" 0)
[ -n "$victim" ] || fail "no rank 0 under mpirun $JOB"
kill -9 "$victim"
set +e
wait "$JOB"; rc=$?
set -e
JOB=""
[ "$rc" -ne 0 ] || fail "rank 0 killed mid-save: mpirun exited 0"
grep -q "rank 0 with PID [0-9]* on node .* exited on signal 9" "$TMP/k3.err" || fail "rank 0 killed: $(cat "$TMP/k3.err")"
compgen -G "$R/.tmp-checkpoint-*" >/dev/null || fail "rank 0 killed mid-save: no interrupted save left to clean up"
two output_dir="$R" --resume auto >"$TMP/k3r.out" 2>"$TMP/k3r.err" || fail "resume after a mid-save kill: $(cat "$TMP/k3r.err")"
grep -q "a save that was interrupted" "$TMP/k3r.err" || fail "the interrupted save was not removed: $(cat "$TMP/k3r.err")"
same_adapter "$R" "resume after rank 0 killed mid-save"
echo "ok: rank 0 SIGKILLed mid-save -> resumed by 2 ranks, reference adapter"

# 5. A rank that stops answering (SIGSTOP): the others give up after ddp_timeout.
R="$TMP/hang"
MEDTUNE_DDP_TIMEOUT_S=3 MEDTUNE_TEST_SAVE_DELAY_MS=100 two_bg output_dir="$R" >"$TMP/h.out" 2>"$TMP/h.err" &
JOB=$!
wait_for 60 step_past "$TMP/h.err" 4 || fail "the 2-rank run did not reach step 4: $(cat "$TMP/h.err")"
victim=$(rank_pid "$JOB" 1)
kill -STOP "$victim"
t0=$(date +%s%N)
set +e
wait "$JOB"; rc=$?
set -e
JOB=""
kill -9 "$victim" 2>/dev/null || true
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" -ne 0 ] || fail "hung rank: mpirun exited 0"
grep -q "rank 0 of 2: no answer from the other ranks for [0-9]* s while exchanging" "$TMP/h.err" \
  || fail "hung rank: rank 0 does not say why it gave up: $(cat "$TMP/h.err")"
[ "$took_ms" -le $(( (3 + KILL_BOUND_S) * 1000 )) ] || fail "hung rank: the job took ${took_ms} ms to end"
echo "ok: rank 1 hung -> job down in ${took_ms} ms (ddp_timeout 3 s)"

# 6. Ranks launched with different configs (MPMD: one learning rate each): refused, exit != 0.
set +e
"${MPIRUN[@]}" -np 1 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$TMP/mixed" \
  : -np 1 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$TMP/mixed" learning_rate=0.002 \
  >"$TMP/mix.out" 2>"$TMP/mix.err"; rc=$?
set -e
[ "$rc" -ne 0 ] || fail "mismatched ranks: exit 0"
grep -q "rank 1 differs from rank 0: config: learning_rate 0.001 -> 0.002" "$TMP/mix.err" \
  || fail "mismatched ranks: the message does not name the rank and key: $(cat "$TMP/mix.err")"
[ ! -e "$TMP/mixed/adapter" ] && [ ! -e "$TMP/mixed/metrics.jsonl" ] || fail "mismatched ranks: something was written"
echo "ok: ranks with different configs refused before training"

# 7. Rank 1 cannot read its dataset (its config names a file that is not there): the job ends
# non-zero before training, rank 1's message names itself and the file.
sed "s|$TMP/train.jsonl|$TMP/missing.jsonl|" "$TMP/run.yaml" >"$TMP/bad.yaml"
set +e
"${MPIRUN[@]}" -np 1 "$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$TMP/baddata" \
  : -np 1 "$MEDTUNE" train --config "$TMP/bad.yaml" output_dir="$TMP/baddata" >"$TMP/bd.out" 2>"$TMP/bd.err"; rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a rank without its data: exit 0"
grep -q "medtune: rank 1 of 2: .*missing.jsonl" "$TMP/bd.err" || fail "a rank without its data: $(cat "$TMP/bd.err")"
[ ! -e "$TMP/baddata/metrics.jsonl" ] || fail "a rank without its data: training started"
echo "ok: a rank that cannot read its data ends the job before training"

# 8. Validation split over the ranks (5 held-out questions: 3 micro-batches of loss, 5 letter
# scorings): the same eval records (loss, tokens, accuracy) as 1 process, at every evaluation.
evals() { grep -o '"eval":{[^}]*}' "$1/metrics.jsonl"; }
val=(max_steps=6 val_set_size=5 eval_steps=3)
one output_dir="$TMP/val1" "${val[@]}" >"$TMP/v1.out" 2>"$TMP/v1.err" || fail "validation, 1 process: $(cat "$TMP/v1.err")"
two output_dir="$TMP/val2" "${val[@]}" >"$TMP/v2.out" 2>"$TMP/v2.err" || fail "validation, 2 ranks: $(cat "$TMP/v2.err")"
[ "$(evals "$TMP/val1" | wc -l)" -eq 3 ] || fail "validation: expected evaluations at steps 0, 3 and 6: $(evals "$TMP/val1")"
evals "$TMP/val1" | grep -q '"accuracy"' || fail "validation: no accuracy in the eval records: $(evals "$TMP/val1")"
[ "$(evals "$TMP/val2")" = "$(evals "$TMP/val1")" ] \
  || fail "validation split over 2 ranks differs from 1 process: $(evals "$TMP/val2") vs $(evals "$TMP/val1")"
same_adapter_as() { cmp -s "$1/adapter/adapter_model.safetensors" "$2/adapter/adapter_model.safetensors"; }
same_adapter_as "$TMP/val2" "$TMP/val1" || fail "validation run: the 2-rank adapter differs from 1 process"
echo "ok: validation split over 2 ranks = 1 process (loss, tokens, accuracy at steps 0, 3, 6)"

# 9. output_dir on each machine's own disk (no shared file system): each rank runs in its own
# working directory with a relative output_dir, so rank 1 never sees rank 0's checkpoints. Rank 1
# is killed mid-run; 2 ranks resume: rank 1 receives the checkpoint from rank 0 and the job
# finishes to the reference adapter; rank 1's disk gets no checkpoint.
mkdir -p "$TMP/node0" "$TMP/node1"
apart_bg() {
  exec "${MPIRUN[@]}" -np 1 -wdir "$TMP/node0" "$MEDTUNE" train --config "$TMP/run.yaml" output_dir=run "$@" \
    : -np 1 -wdir "$TMP/node1" "$MEDTUNE" train --config "$TMP/run.yaml" output_dir=run "$@"
}
MEDTUNE_TEST_SAVE_DELAY_MS=100 apart_bg >"$TMP/a1.out" 2>"$TMP/a1.err" &
JOB=$!
wait_for 60 step_past "$TMP/a1.err" 7 || fail "the 2-rank run on separate disks did not reach step 7: $(cat "$TMP/a1.err")"
victim=$(rank_pid "$JOB" 1)
[ -n "$victim" ] || fail "no rank 1 under mpirun $JOB"
kill -9 "$victim"
wait "$JOB" 2>/dev/null || true
JOB=""
compgen -G "$TMP/node0/run/checkpoint-*" >/dev/null || fail "separate disks: rank 0 wrote no checkpoint"
! compgen -G "$TMP/node1/run/checkpoint-*" >/dev/null || fail "separate disks: a rank other than 0 wrote a checkpoint"
mkdir -p "$TMP/tmpdir"  # where rank 1 receives the copy, removed once read
(TMPDIR="$TMP/tmpdir" apart_bg --resume auto) >"$TMP/a1r.out" 2>"$TMP/a1r.err" || fail "resume on separate disks: $(cat "$TMP/a1r.err")"
[ -z "$(ls -A "$TMP/tmpdir")" ] || fail "resume on separate disks: the received copy was left behind: $(ls "$TMP/tmpdir")"
grep -q "resume: rank(s) 1 do not see .*/node0/run/checkpoint-[0-9]* (output_dir is not shared with rank 0): sent them its files" \
  "$TMP/a1r.err" || fail "resume on separate disks: rank 0 does not say it sent the checkpoint: $(cat "$TMP/a1r.err")"
same_adapter "$TMP/node0/run" "resume on separate disks"
! compgen -G "$TMP/node1/run/checkpoint-*" >/dev/null || fail "separate disks: rank 1 wrote a checkpoint on resume"
echo "ok: output_dir not shared: rank 1 killed, 2 ranks resume with rank 0's checkpoint sent to rank 1, reference adapter"
