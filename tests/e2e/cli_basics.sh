#!/usr/bin/env bash
# The medtune binary as a user drives it: good input works, bad input exits 2 with a message
# naming the file/line/field. Usage (CTest): cli_basics.sh MEDTUNE_BIN PARITY_BIN
set -u
MT=$1
PARITY=$2
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=tests/support/expect.sh
. tests/support/expect.sh

TINY=tests/fixtures/hf/llama_gqa/base
expect 0 "medtune 0\." -- "$MT" --version
expect 0 '"architecture": "llama"' -- "$MT" info "$TINY" --json
expect 0 "parameters" -- "$MT" info tests/fixtures/hf/qwen2_bias/base
expect 2 "/nonexistent" -- "$MT" info /nonexistent
expect 2 "bad_magic.gguf" -- "$MT" info tests/fixtures/gguf/bad_magic.gguf
expect 2 "truncated" -- "$MT" info tests/fixtures/gguf/bad_truncated_data.gguf
expect 2 "unsupported architecture" -- "$MT" info tests/fixtures/gguf/unsupported_arch.gguf
expect 2 "RequiredError|required" -- "$MT" info
expect 2 "subcommand" -- "$MT"
expect 0 '"ok":true' -- "$PARITY" tests/fixtures/hf/llama_gqa
expect 2 "cannot open|No such|no such" -- "$PARITY" "$tmp/none"

# A malformed question file: the error names the file and the line.
printf '%s\n' '{"question": "q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "B"}' \
  '{"question": "q2?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "F"}' > "$tmp/bad.jsonl"

MODEL=${MEDTUNE_SMOLLM2_GGUF:-}
if [ -n "$MODEL" ] && [ -f "$MODEL" ]; then
  expect 2 "bad.jsonl:2" -- "$MT" eval "$MODEL" --data "$tmp/bad.jsonl" --out "$tmp/e0" -q
  expect 0 '"ids":\[' -- "$MT" tokenize "$MODEL" "Aspirin irreversibly inhibits COX-1" --json
  expect 0 "." -- "$MT" generate "$MODEL" -p "The heart has four" -n 4
  # Timings and the stop reason: on stderr by default, in the object with --json.
  expect 0 "stopped after 4 tokens: reached the limit of 4 new tokens.*prompt [0-9]+ tokens in .* tokens/s" -- \
    "$MT" generate "$MODEL" -p "The heart has four" -n 4 --temperature 0
  expect 0 '"completion_tokens": 4,.*"stop_reason": "length".*"predicted_n": 3,.*"prompt_per_second"' -- \
    "$MT" generate "$MODEL" -p "The heart has four" -n 4 --json
  expect 0 '"stop_reason": "stop_token",.*"stopped_by": "the model produced its stop token <\|im_end\|> \(id 2\)"' -- \
    "$MT" generate "$MODEL" -p "Hi" --chat -n 64 --json
  # Sampling adjustments (OpenAI's, llama.cpp's --logit-bias form): +100 on " chambers" (id 18958)
  # gives only it; bad forms and ids outside the vocabulary exit 2 naming the option.
  expect 0 '"text": " chambers chambers chambers"' -- \
    "$MT" generate "$MODEL" -p "The heart has four" -n 3 --json --logit-bias 18958+100
  expect 0 "." -- "$MT" generate "$MODEL" -p "The heart has four" -n 4 --presence-penalty 2 --frequency-penalty -1
  expect 2 "--logit-bias '18958': expected TOKEN_ID followed by a signed bias" -- \
    "$MT" generate "$MODEL" -p "x" -n 2 --logit-bias 18958
  expect 2 "token id 49152 is outside the vocabulary" -- "$MT" generate "$MODEL" -p "x" -n 2 --logit-bias 49152-5
  expect 2 "--frequency-penalty: must be a number from -2 to 2" -- "$MT" generate "$MODEL" -p "x" --frequency-penalty 2.5
  # --stop: the answer ends before the stop string, which is not shown (greedy fp32: " chambers:
  # the right heart ...").
  expect 0 '"stopped_by": "the text reached the stop string \\" right\\" \(--stop\)"' -- \
    "$MT" generate "$MODEL" -p "The heart has four" -n 24 --json --precision fp32 --stop " right" --stop "ventricles"
  expect 0 '"text": " chambers: the",' -- \
    "$MT" generate "$MODEL" -p "The heart has four" -n 24 --json --precision fp32 --stop " right"
  expect 2 "--stop: an empty string" -- "$MT" generate "$MODEL" -p "x" --stop ""
  # --precision auto: int8 for this quantized base where the int8 kernels are vector ones (the
  # build's x86-64-v3 baseline has AVX2), fp32 when they are capped to the scalar reference.
  expect 0 '"precision": "int8"' -- "$MT" generate "$MODEL" -p "The heart has four" -n 2 --json
  expect 0 '"precision": "fp32"' -- env MEDTUNE_ISA=scalar "$MT" generate "$MODEL" -p "The heart has four" -n 2 --json
  expect 0 '"precision": "fp32"' -- "$MT" generate "$MODEL" -p "The heart has four" -n 2 --json --precision fp32
  expect 0 "accuracy" -- "$MT" eval "$MODEL" --data data/sample/medqa_dev.jsonl --limit 6 --out "$tmp/e1" -q
  expect 0 "accuracy" -- "$MT" eval "$MODEL" --data data/sample/medqa_dev.jsonl --limit 6 --format chat --out "$tmp/e2" -q
  for f in report.json report.html predictions.jsonl; do
    [ -s "$tmp/e1/$f" ] && echo "ok: eval wrote $f" || { echo "FAIL: eval did not write $f"; fail=1; }
  done
  # Provenance: SHA-256 of the model and the data (as sha256sum prints them), the command line.
  data_sha=$(sha256sum data/sample/medqa_dev.jsonl | cut -d' ' -f1)
  model_sha=$(sha256sum "$MODEL" | cut -d' ' -f1)
  for f in report.json report.html; do
    if grep -q "$data_sha" "$tmp/e1/$f" && grep -q "$model_sha" "$tmp/e1/$f"; then
      echo "ok: $f records the model and data SHA-256"
    else
      echo "FAIL: $f lacks the model ($model_sha) or data ($data_sha) SHA-256"; fail=1
    fi
  done
  grep -q '"command_line": ".*eval .*--limit 6' "$tmp/e1/report.json" && grep -q '<h2>Provenance</h2>' "$tmp/e1/report.html" \
    && echo "ok: command line and Provenance section" || { echo "FAIL: no command line or Provenance section"; fail=1; }
  # Few-shot drawn per question as lm-eval does; the pool is the question file itself here.
  expect 0 "accuracy" -- "$MT" eval "$MODEL" --data data/sample/medqa_dev.jsonl --limit 3 --fewshot 2 \
    --fewshot-pool data/sample/medqa_dev.jsonl --out "$tmp/e3" -q
  grep -q '"fewshot_seed": 1234' "$tmp/e3/report.json" && echo "ok: few-shot seed recorded" \
    || { echo "FAIL: few-shot seed not in report.json"; fail=1; }
  expect 0 "McNemar|mcnemar" -- "$MT" eval --compare "$tmp/e1" "$tmp/e2"
  expect 2 "unknown prompt format" -- "$MT" eval "$MODEL" --data data/sample/medqa_dev.jsonl --format nope -q
else
  echo "skip: real-model checks (MEDTUNE_SMOLLM2_GGUF not set)"
fi

# The chat template of a Hugging Face directory as transformers 5 reads it: chat_template.jinja
# (where save_pretrained now writes it) ahead of an older entry in tokenizer_config.json.
# transformers renders "Hello" through the file below as the bare 1-token "Hello"; through the
# config's SmolLM2 template it is 31 tokens.
TINY_LLAMA=$(dirname "$MT")/medtune-tiny-llama
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
make_tiny_model "$TINY_LLAMA" "$tmp/chat" 5
add_smollm2_chat_template "$tmp/chat"
expect 0 '"prompt_tokens": 31' -- "$MT" generate "$tmp/chat" -p "Hello" --chat -n 1 --json -q
printf '%s' "{{ messages[0]['content'] }}" > "$tmp/chat/chat_template.jinja"
expect 0 '"prompt_tokens": 1' -- "$MT" generate "$tmp/chat" -p "Hello" --chat -n 1 --json -q
rm "$tmp/chat/chat_template.jinja"
printf '%s' '{"chat_template": [{"name": "rag", "template": "R"}]}' > "$tmp/chat/tokenizer_config.json"
expect 2 'tokenizer_config.json: chat_template: none of the templates \(rag\) is named "default"' -- \
  "$MT" generate "$tmp/chat" -p "Hello" --chat -n 1

# generation_config.json's eos_token_id ends a generation, as in transformers' generate() (Llama 3
# Instruct names <|eot_id|> there): the tiny model's first greedy token, made a stop token there,
# ends the answer after one token.
first=$("$MT" generate "$tmp/chat" -p "Hello there" -n 2 --json -q | python3 -c 'import json, sys; print(json.load(sys.stdin)["token_ids"][0])')
printf '{"eos_token_id": [%s]}' "$first" > "$tmp/chat/generation_config.json"
expect 0 '"completion_tokens": 1,.*"stop_reason": "stop_token"' -- "$MT" generate "$tmp/chat" -p "Hello there" -n 4 --json -q
printf '{"eos_token_id": "x"}' > "$tmp/chat/generation_config.json"
expect 2 "generation_config.json: field 'eos_token_id' must be an integer, got string" -- \
  "$MT" generate "$tmp/chat" -p "Hello there" -n 4
exit $fail
