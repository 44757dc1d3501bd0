#!/usr/bin/env bash
# The main job on the embedded default: set up and build, then with the bundled real model
# (SmolLM2-135M-Instruct) and the project's fictional clinical facts (data/fictional, written by
# tools/make_fictional_mcq.py: invented conditions and drugs, so nothing false is taught):
#   1. describe the model;  2. score the test questions (before);  3. fine-tune a LoRA adapter on
#   the training questions;  4. score the test questions again with the adapter (after);
#   5. compare before/after (exact McNemar test);  6. ask the model a test question, before and after.
# The test questions ask the training facts in wordings that never occur in training, so step 4
# measures facts learned, not wording memorised (data/fictional/README.md).
# Reports land in runs/demo/ (report.html is readable in any browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TEST=data/fictional/test.jsonl
CONFIG=configs/smollm2-fictional-lora.yaml
OUT=runs/demo
rm -rf "$OUT"
mkdir -p "$OUT"
# Option-text scoring (lm-eval's acc) with lm-eval prompts: what the config trains for
# (answer_target: text, prompt_format: lm_eval).
EVAL=(--data "$TEST" --format lm_eval --scoring text -q)

echo "== 1. The model"
./build/medtune info "$MODEL"
echo "== 2. Fictional test questions, before fine-tuning"
./build/medtune eval "$MODEL" "${EVAL[@]}" --out "$OUT/before"
echo "== 3. LoRA fine-tuning on the fictional training questions ($CONFIG)"
./build/medtune train --config "$CONFIG" output_dir="$OUT/lora"
echo "== 4. The same test questions with the adapter"
./build/medtune eval "$MODEL" "${EVAL[@]}" --adapter "$OUT/lora/adapter" --out "$OUT/after"
echo "== 5. Before vs after"
./build/medtune eval --compare "$OUT/before" "$OUT/after"
echo "== 6. A test question (gold answer: Bovecillin), without and with the adapter"
# The first item of data/fictional/test.jsonl, rendered as the lm-eval prompt the adapter was trained on.
# generate says on stderr why it stopped: the base model's answer is empty because the first token
# it chooses is its end-of-sequence token <|im_end|>.
PROMPT=$'Question: For a child with Trerox syndrome, which drug is preferred initially?\nA. Bovecillin\nB. Tavacillin\nC. Revoolol\nD. Nasitinib\nAnswer:'
echo "$PROMPT"
echo -n "before: "
./build/medtune generate "$MODEL" -p "$PROMPT" -n 4
echo
echo -n "after: "
./build/medtune generate "$MODEL" --adapter "$OUT/lora/adapter" -p "$PROMPT" -n 4
echo
echo "Reports: $OUT/before/report.html, $OUT/after/report.html; training: $OUT/lora/report.html (plots), $OUT/lora/metrics.jsonl"
