#!/usr/bin/env bash
# medtune train as a user runs it: bad configs exit 2 naming the problem; a 3-step LoRA run on the
# bundled SmolLM2 writes the adapter and the metrics, unpacked and with sample_packing. Usage: train_smollm2.sh MEDTUNE_BIN [PARITY_BIN]
# (from the repository root). Exit 77 (skip) when the model is absent: scripts/fetch_model.sh.
set -euo pipefail
MEDTUNE=${1:?usage: train_smollm2.sh MEDTUNE_BIN [PARITY_BIN]}
CONFIG=configs/smollm2-medqa-lora.yaml
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Bad input needs no model: the config is checked first.
set +e
"$MEDTUNE" train --config "$CONFIG" lora_rank=8 output_dir="$TMP/bad" >"$TMP/out" 2>"$TMP/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "unknown key: exit $rc, expected 2: $(cat "$TMP/err")"
grep -q "lora_rank" "$TMP/err" || fail "unknown key: message does not name it: $(cat "$TMP/err")"
set +e
"$MEDTUNE" train --config "$TMP/missing.yaml" >"$TMP/out" 2>"$TMP/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "missing config: exit $rc, expected 2"

MODEL=${MEDTUNE_SMOLLM2_GGUF:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$MODEL" ]; then
  echo "skip: $MODEL is absent (bash scripts/fetch_model.sh)"
  exit 77
fi

# --dry-run plans without training.
"$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" output_dir="$TMP/dry" --dry-run >"$TMP/dry.txt" 2>"$TMP/err" \
  || fail "dry run: $(cat "$TMP/err")"
grep -q "memory plan" "$TMP/dry.txt" || fail "dry run prints no memory plan"
[ ! -e "$TMP/dry/adapter" ] || fail "dry run trained"
# It says what the config's warnings say (an axolotl key it ignores, here).
"$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" output_dir="$TMP/dry" --dry-run bf16=true \
  >"$TMP/dry.txt" 2>"$TMP/err" || fail "dry run with bf16: $(cat "$TMP/err")"
grep -q "warning: .*'bf16' ignored" "$TMP/err" || fail "dry run hides the config's warnings: $(cat "$TMP/err")"
# On a device, max_device_memory splits a micro-batch that does not fit into passes of fewer rows
# (the dry run opens no device: its plan says so without one).
"$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" output_dir="$TMP/dry" --dry-run device=gpu \
  micro_batch_size=8 max_device_memory=1.5GiB >"$TMP/dry.txt" 2>"$TMP/err" \
  || fail "dry run on gpu: $(cat "$TMP/err")"
grep -q "a micro-batch of 8 rows in [2-8] passes" "$TMP/dry.txt" \
  || fail "no device passes: $(cat "$TMP/dry.txt")"

# Three short steps (sequence_len 256 also exercises left truncation of the longest questions).
OUT="$TMP/run"
"$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" max_steps=3 micro_batch_size=1 sequence_len=256 \
  eval_steps=0 output_dir="$OUT" >"$TMP/out" 2>"$TMP/err" || fail "train: $(cat "$TMP/err")"
[ -f "$OUT/adapter/adapter_config.json" ] || fail "no adapter/adapter_config.json"
[ -f "$OUT/adapter/adapter_model.safetensors" ] || fail "no adapter/adapter_model.safetensors"
[ -f "$OUT/config_resolved.json" ] || fail "no config_resolved.json"
steps=$(grep -c '"grad_norm"' "$OUT/metrics.jsonl" || true)
[ "$steps" -eq 3 ] || fail "metrics.jsonl has $steps step lines, expected 3"
grep -q "steps 3/3 (completed)" "$TMP/out" || fail "no summary: $(cat "$TMP/out")"

# Provenance: the manifest names the model by SHA-256, the adapter carries the run's identity, and
# `medtune verify` passes on the untouched run and names a file changed afterwards (exit 3).
model_sha=$(sha256sum "$MODEL" | cut -d' ' -f1)
grep -q "\"sha256\": \"$model_sha\"" "$OUT/manifest.json" || fail "manifest.json lacks the model's SHA-256"
grep -q '"status": "completed"' "$OUT/manifest.json" || fail "manifest.json: run not completed"
"$MEDTUNE" verify "$OUT" >"$TMP/verify.out" || fail "verify on an untouched run: $(cat "$TMP/verify.out")"
grep -q "0 no longer match" "$TMP/verify.out" || fail "verify: $(cat "$TMP/verify.out")"
echo " " >>"$OUT/adapter/adapter_config.json"
set +e
"$MEDTUNE" verify "$OUT" >"$TMP/verify.out"; rc=$?
set -e
[ "$rc" -eq 3 ] || fail "verify after an edit: exit $rc, expected 3"
grep -q "CHANGED  adapter/adapter_config.json: size" "$TMP/verify.out" || fail "verify does not name the file: $(cat "$TMP/verify.out")"

# sample_packing: several examples per row, so the plan has fewer micro-batches per epoch...
micro_batches() {
  "$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" output_dir="$TMP/dry" --dry-run "$@" 2>"$TMP/err" \
    | sed -n 's/.*(\([0-9]*\) micro-batches per epoch.*/\1/p'
}
plain=$(micro_batches) || fail "dry run: $(cat "$TMP/err")"
packed=$(micro_batches sample_packing=true) || fail "dry run with packing: $(cat "$TMP/err")"
[ -n "$plain" ] && [ -n "$packed" ] || fail "dry run prints no micro-batch count"
[ "$packed" -lt "$plain" ] || fail "packing plans $packed micro-batches per epoch, unpacked $plain"
# ...and a 3-step packed run trains and saves like any other.
OUT="$TMP/packed"
"$MEDTUNE" train --config "$CONFIG" base_model="$MODEL" max_steps=3 micro_batch_size=1 sequence_len=256 \
  sample_packing=true eval_steps=0 output_dir="$OUT" >"$TMP/out" 2>"$TMP/err" || fail "packed train: $(cat "$TMP/err")"
[ -f "$OUT/adapter/adapter_model.safetensors" ] || fail "packed: no adapter/adapter_model.safetensors"
steps=$(grep -c '"grad_norm"' "$OUT/metrics.jsonl" || true)
[ "$steps" -eq 3 ] || fail "packed: metrics.jsonl has $steps step lines, expected 3"
grep -q "steps 3/3 (completed)" "$TMP/out" || fail "packed: no summary: $(cat "$TMP/out")"
echo "ok"
