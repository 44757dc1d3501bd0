#!/usr/bin/env bash
# Data parallel on the CPU, side by side in one run: the same global batch trained by
#   A: 1 process x 2 threads, gradient_accumulation_steps 2
#   B: mpirun -np 2, 1 thread per rank, gradient_accumulation_steps 1 (ordered reduction)
# alternating A, B, A, B, ... REPEATS times each. Prints every run's training tokens/s (the
# trainer's own figure: input tokens / wall seconds since the first step) and the exchange time
# rank 0 reports, then the medians and B / A. Usage (repository root, after building medtune):
#   bash bench/distributed_scaling.sh [MEDTUNE_BIN] [REPEATS] [STEPS]
set -euo pipefail
MEDTUNE=${1:-build/medtune}
REPEATS=${2:-3}
STEPS=${3:-6}
MODEL=${MEDTUNE_SMOLLM2_GGUF:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=passive
ARGS=(train --config configs/smollm2-medqa-lora.yaml base_model="$MODEL" max_steps="$STEPS" warmup_steps=1
      micro_batch_size=2 sequence_len=256 eval_steps=0 save_steps=0)
tps() { grep '"tokens_per_s"' "$1/metrics.jsonl" | tail -n 1 | grep -o '"tokens_per_s":[0-9.e+-]*' | cut -d: -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: >"$TMP/a"; : >"$TMP/b"
for i in $(seq 1 "$REPEATS"); do
  "$MEDTUNE" "${ARGS[@]}" num_threads=2 gradient_accumulation_steps=2 output_dir="$TMP/a$i" >/dev/null 2>"$TMP/a$i.err"
  a=$(tps "$TMP/a$i"); echo "$a" >>"$TMP/a"
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$MEDTUNE" "${ARGS[@]}" num_threads=1 \
    gradient_accumulation_steps=1 output_dir="$TMP/b$i" >/dev/null 2>"$TMP/b$i.err"
  b=$(tps "$TMP/b$i"); echo "$b" >>"$TMP/b"
  cmp -s "$TMP/a$i/adapter/adapter_model.safetensors" "$TMP/b$i/adapter/adapter_model.safetensors" \
    && same="same adapter" || same="adapters differ (thread counts differ: expected)"
  echo "run $i: 1x2 threads $a tok/s | 2 ranks x 1 thread $b tok/s | $(grep -o 'gradient exchange.*' "$TMP/b$i.err") | $same"
done
ma=$(median <"$TMP/a"); mb=$(median <"$TMP/b")
echo "median tokens/s: 1 process x 2 threads $ma, 2 ranks x 1 thread $mb, ratio (2 ranks / 1 process) $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')"
