#!/usr/bin/env bash
# An axolotl-style config mixing axolotl's dataset types (alpaca with field_* remapping,
# completion, input_output, chat_template with messages and with ShareGPT conversations) trains a
# few steps on a tiny random Llama with the SmolLM2 tokenizer and chat template; a bad record stops
# the run (exit 2) naming the file, line and field, and --skip-invalid leaves it out and counts it.
# Then the lm-eval task layouts (medmcqa, pubmedqa, mmlu_anatomy fixtures) train as datasets, and a
# bad MedQA record is refused, or skipped and counted with --skip-invalid.
# Usage: train_axolotl_formats.sh MEDTUNE_BIN [PARITY_BIN] (from the repository root). Needs
# medtune-tiny-llama (tests/support/make_tiny_llama.cpp), built next to medtune, and python3 (to
# put the chat template into tokenizer_config.json).
set -euo pipefail
MEDTUNE=${1:?usage: train_axolotl_formats.sh MEDTUNE_BIN [PARITY_BIN]}
TINY=${MEDTUNE_TINY_LLAMA_BIN:-$(dirname "$MEDTUNE")/medtune-tiny-llama}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
[ -x "$TINY" ] || fail "$TINY is missing: build the medtune-tiny-llama target"
command -v python3 >/dev/null || { echo "skip: python3 is absent"; exit 77; }
export OMP_WAIT_POLICY=passive

MODEL="$TMP/model"
make_tiny_model "$TINY" "$MODEL" 5
add_smollm2_chat_template "$MODEL"

cat > "$TMP/alpaca.jsonl" <<'EOF'
{"question": "Name the antidote for opioid overdose.", "context": "", "answer": "Naloxone."}
{"question": "Classify the rhythm.", "context": "Irregularly irregular, no P waves.", "answer": "Atrial fibrillation."}
EOF
cat > "$TMP/completion.jsonl" <<'EOF'
{"text": "Sepsis is life-threatening organ dysfunction caused by a dysregulated host response to infection."}
EOF
cat > "$TMP/io.jsonl" <<'EOF'
{"segments": [{"text": "<|im_start|>user\nWhat causes scurvy?<|im_end|>\n", "label": false}, {"text": "<|im_start|>assistant\nVitamin C deficiency.<|im_end|>\n", "label": true}]}
EOF
cat > "$TMP/sharegpt.jsonl" <<'EOF'
{"conversations": [{"from": "human", "value": "First-line drug for anaphylaxis?"}, {"from": "gpt", "value": "Intramuscular epinephrine."}, {"from": "human", "value": "Adult dose?"}, {"from": "gpt", "value": "0.5 mg."}]}
{"conversations": [{"from": "human", "value": "Define tachycardia."}, {"from": "doctor", "value": "A rate above 100."}]}
EOF
cat > "$TMP/messages.jsonl" <<'EOF'
{"system": "Answer in one word.", "messages": [{"role": "user", "content": "Vitamin deficient in pellagra?"}, {"role": "assistant", "content": "Niacin."}]}
EOF
cat > "$TMP/run.yaml" <<EOF
base_model: $MODEL
adapter: lora
datasets:
  - path: $TMP/alpaca.jsonl
    type: alpaca
    field_instruction: question
    field_input: context
    field_output: answer
  - path: $TMP/completion.jsonl
    type: completion
  - path: $TMP/io.jsonl
    type: input_output
  - path: $TMP/sharegpt.jsonl
    type: chat_template
    roles_to_train: [assistant]
    train_on_eos: turn
  - path: $TMP/messages.jsonl
    type: chat_template
    field_messages: messages
    message_property_mappings: {role: role, content: content}
lora_r: 4
lora_alpha: 8
lora_target_linear: true
sequence_len: 64
micro_batch_size: 2
max_steps: 3
learning_rate: 1.0e-3
logging_steps: 1
num_threads: 1
EOF

# The ShareGPT file's second record has an unknown role: the run stops naming file, line, field.
set +e
"$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$TMP/bad" >"$TMP/out" 2>"$TMP/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "unknown role: exit $rc, expected 2: $(cat "$TMP/err")"
grep -q "sharegpt.jsonl:2: field 'conversations\[1\].from': unknown role 'doctor'" "$TMP/err" \
  || fail "unknown role: message does not name file, line and field: $(cat "$TMP/err")"

# --skip-invalid: the record is left out and counted; 6 examples remain (2 alpaca, 1 completion,
# 1 input_output, 1 ShareGPT, 1 messages) and 3 steps train.
OUT="$TMP/run"
"$MEDTUNE" train --config "$TMP/run.yaml" output_dir="$OUT" --skip-invalid >"$TMP/out" 2>"$TMP/err" \
  || fail "train: $(cat "$TMP/err")"
grep -q "data: 6 training examples" "$TMP/err" || fail "expected 6 examples: $(cat "$TMP/err")"
grep -q "data: skipped 1 invalid record(s) (skip_invalid); the first: .*sharegpt.jsonl:2:" "$TMP/err" \
  || fail "skipped record not reported: $(cat "$TMP/err")"
grep -q "steps 3/3 (completed)" "$TMP/out" || fail "no summary: $(cat "$TMP/out")"
[ "$(grep -c '"grad_norm"' "$OUT/metrics.jsonl")" -eq 3 ] || fail "metrics.jsonl lacks 3 step lines"
[ -f "$OUT/adapter/adapter_model.safetensors" ] || fail "no adapter"
grep -q '"skipped_invalid_records": *1' "$OUT/manifest.json" || fail "manifest.json lacks the skipped record count"
# The resolved config keeps the axolotl keys (and reads back: resume compares it).
grep -q '"field_instruction": *"question"' "$OUT/config_resolved.json" || fail "config_resolved.json lacks field_instruction"
grep -q '"train_on_eos": *"turn"' "$OUT/config_resolved.json" || fail "config_resolved.json lacks train_on_eos"
"$MEDTUNE" train --config "$OUT/config_resolved.json" output_dir="$TMP/again" --skip-invalid --dry-run >"$TMP/dry" 2>"$TMP/err" \
  || fail "the resolved config does not load back: $(cat "$TMP/err")"
grep -q "datasets: 6 training examples" "$TMP/dry" || fail "dry run from the resolved config: $(cat "$TMP/dry")"
# The lm-eval task layouts as training data (type: <task name>): each record rendered with its
# task's prompt, as `eval --task` scores it. medmcqa's cop base is detected (this file has a 0).
T=$PWD/tests/fixtures/eval/tasks
cat > "$TMP/tasks.yaml" <<EOF
base_model: $MODEL
adapter: lora
datasets:
  - path: $T/medmcqa.jsonl
    type: medmcqa
  - path: $T/pubmedqa.json
    type: pubmedqa
  - path: $T/mmlu_anatomy.csv
    type: mmlu_anatomy
lora_r: 4
lora_alpha: 8
sequence_len: 256
micro_batch_size: 2
max_steps: 2
num_threads: 1
EOF
n_pubmedqa=$(python3 -c "import json, sys; print(len(json.load(open(sys.argv[1]))))" "$T/pubmedqa.json")
want=$(( $(wc -l < "$T/medmcqa.jsonl") + n_pubmedqa + $(wc -l < "$T/mmlu_anatomy.csv") ))
"$MEDTUNE" train --config "$TMP/tasks.yaml" output_dir="$TMP/tasks" >"$TMP/out" 2>"$TMP/err" || fail "task datasets: $(cat "$TMP/err")"
grep -q "data: $want training examples" "$TMP/err" || fail "expected $want task examples: $(cat "$TMP/err")"
grep -q "steps 2/2 (completed)" "$TMP/out" || fail "task datasets: no summary: $(cat "$TMP/out")"
# skip_invalid covers medtune's own types too: a MedQA record with an answer outside its options.
cat > "$TMP/medqa.jsonl" <<'EOF'
{"question": "Drug of choice for anaphylaxis?", "options": {"A": "Epinephrine", "B": "Atropine", "C": "Insulin", "D": "Heparin"}, "answer_idx": "A"}
{"question": "Broken record?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "F"}
EOF
cat > "$TMP/medqa.yaml" <<EOF
base_model: $MODEL
datasets:
  - path: $TMP/medqa.jsonl
    type: medqa
max_steps: 1
num_threads: 1
EOF
set +e
"$MEDTUNE" train --config "$TMP/medqa.yaml" output_dir="$TMP/medqa_bad" >"$TMP/out" 2>"$TMP/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "medqa.jsonl:2: field 'answer_idx'" "$TMP/err" || fail "medqa bad record: exit $rc: $(cat "$TMP/err")"
"$MEDTUNE" train --config "$TMP/medqa.yaml" output_dir="$TMP/medqa" --skip-invalid >"$TMP/out" 2>"$TMP/err" \
  || fail "medqa --skip-invalid: $(cat "$TMP/err")"
grep -q "data: skipped 1 invalid record(s) (skip_invalid); the first: .*medqa.jsonl:2" "$TMP/err" \
  || fail "medqa skipped record not reported: $(cat "$TMP/err")"
echo "ok"
