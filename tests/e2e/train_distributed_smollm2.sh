#!/usr/bin/env bash
# Data parallel on the bundled SmolLM2-135M (GGUF Q4_1) under Debian's OpenMPI:
#  1. `mpirun -np 2 medtune train` (1 micro-batch per rank and step) trains the same adapter, byte
#     for byte, and the same per-step losses as one process with 2 micro-batches per step;
#  2. `mpirun -np 2 medtune eval` (each rank scores half of the questions) writes the same
#     predictions.jsonl, byte for byte, and the same report.json apart from timing and the
#     world size, as one process.
# Usage: train_distributed_smollm2.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Exit 77
# (skip) when mpirun or the model is absent.
set -euo pipefail
MEDTUNE=${1:?usage: train_distributed_smollm2.sh MEDTUNE_BIN [PARITY_BIN]}
MODEL=${MEDTUNE_SMOLLM2_GGUF:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if ! command -v mpirun >/dev/null; then
  echo "skip: mpirun is absent (apt-get install openmpi-bin libopenmpi-dev; scripts/setup.sh)"
  exit 77
fi
if [ ! -f "$MODEL" ]; then
  echo "skip: $MODEL is absent (bash scripts/fetch_model.sh)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_WAIT_POLICY=passive
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none -np 2)

# 1. Training: 2 steps of 2 x 1 question (128 tokens), LoRA on every linear, with dropout.
ARGS=(train --config configs/smollm2-medqa-lora.yaml base_model="$MODEL" max_steps=2 warmup_steps=1 micro_batch_size=1
      sequence_len=128 lora_dropout=0.1 eval_steps=0 num_threads=1)
"$MEDTUNE" "${ARGS[@]}" gradient_accumulation_steps=2 output_dir="$TMP/one" >"$TMP/one.out" 2>"$TMP/one.err" \
  || fail "1 process: $(cat "$TMP/one.err")"
"${MPIRUN[@]}" "$MEDTUNE" "${ARGS[@]}" gradient_accumulation_steps=1 output_dir="$TMP/two" >"$TMP/two.out" 2>"$TMP/two.err" \
  || fail "2 ranks: $(cat "$TMP/two.err")"
cmp "$TMP/one/adapter/adapter_model.safetensors" "$TMP/two/adapter/adapter_model.safetensors" \
  || fail "2 ranks x 1 and 1 process x 2 micro-batches trained different adapters"
losses() { grep -o '"grad_norm":[^,]*,"loss":[^,]*' "$1/metrics.jsonl"; }
[ "$(losses "$TMP/one" | wc -l)" -eq 2 ] || fail "1 process: metrics.jsonl lacks steps"
[ "$(losses "$TMP/one")" = "$(losses "$TMP/two")" ] || fail "per-step losses differ"
echo "ok: SmolLM2, 2 ranks = 1 process x 2 micro-batches, byte for byte"

# 2. Evaluation split over 2 ranks (with the adapter just trained, 9 questions: 4 + 5).
EARGS=(eval "$MODEL" --data data/sample/medqa_dev.jsonl --limit 9 --format chat --adapter "$TMP/one/adapter" --quiet)
OMP_NUM_THREADS=1 "$MEDTUNE" "${EARGS[@]}" --out "$TMP/e1" >"$TMP/e1.out" 2>"$TMP/e1.err" || fail "eval, 1 process: $(cat "$TMP/e1.err")"
OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$MEDTUNE" "${EARGS[@]}" --out "$TMP/e2" >"$TMP/e2.out" 2>"$TMP/e2.err" \
  || fail "eval, 2 ranks: $(cat "$TMP/e2.err")"
[ "$(wc -l <"$TMP/e1/predictions.jsonl")" -eq 9 ] || fail "eval: predictions.jsonl does not hold 9 questions"
cmp "$TMP/e1/predictions.jsonl" "$TMP/e2/predictions.jsonl" || fail "eval over 2 ranks: predictions.jsonl differs"
# report.json: the same but for how long it took, the command line and the world size.
# (trailing commas dropped: the removed key may have been an object's last.)
strip() { grep -v -E '"(seconds|questions_per_second|command_line|world_size)"' "$1/report.json" | sed 's/,$//'; }
diff <(strip "$TMP/e1") <(strip "$TMP/e2") >"$TMP/report.diff" || fail "eval over 2 ranks: report.json differs: $(cat "$TMP/report.diff")"
grep -q '"world_size": 2' "$TMP/e2/report.json" || fail "eval over 2 ranks: report.json does not record the world size"
[ "$(grep -c "accuracy" "$TMP/e2.out")" -ge 1 ] || fail "eval over 2 ranks: no summary printed: $(cat "$TMP/e2.out")"
echo "ok: eval over 2 ranks = eval in 1 process (predictions byte for byte)"
