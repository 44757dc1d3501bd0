#!/usr/bin/env bash
# The main job on the embedded default: set up and build, then with the bundled real model
# (SmolLM2-135M-Instruct) and the bundled sample questions:
#   1. describe the model;  2. score the dev questions (before);  3. fine-tune a LoRA adapter;
#   4. score again with the adapter (after);  5. compare before/after (exact McNemar test);
#   6. answer a clinical question with the adapted model.
# Reports land in runs/demo/ (report.html is readable in any browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
DEV=data/sample/medqa_dev.jsonl
OUT=runs/demo
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== 1. The model"
./build/medtune info "$MODEL"
echo "== 2. Sample dev questions, before fine-tuning"
./build/medtune eval "$MODEL" --data "$DEV" --format chat --out "$OUT/before" -q
echo "== 3. LoRA fine-tuning (configs/smollm2-medqa-lora.yaml)"
# 20 steps keep the demo to a few minutes on 2 cores; the config alone runs 60.
./build/medtune train --config configs/smollm2-medqa-lora.yaml output_dir="$OUT/lora" max_steps=20 eval_steps=0
echo "== 4. The same questions with the adapter"
./build/medtune eval "$MODEL" --data "$DEV" --format chat --adapter "$OUT/lora/adapter" --out "$OUT/after" -q
echo "== 5. Before vs after"
./build/medtune eval --compare "$OUT/before" "$OUT/after"
echo "== 6. A question for the adapted model"
QUESTION="A 45-year-old man has crushing chest pain radiating to his left arm for 30 minutes. What is the first test to order?"
echo "Q: $QUESTION"
echo -n "A: "
./build/medtune generate "$MODEL" --adapter "$OUT/lora/adapter" --chat \
  --system "You are a clinician. Answer briefly." -p "$QUESTION" -n 64
echo
echo "Reports: $OUT/before/report.html, $OUT/after/report.html; training metrics: $OUT/lora/metrics.jsonl"
