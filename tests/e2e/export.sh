#!/usr/bin/env bash
# `medtune export` as a user drives it: merge to a Hugging Face directory, merged GGUF (F16, Q8_0),
# the adapter as a llama.cpp LoRA GGUF; the outputs open again in medtune; bad input exits 2 with a
# message naming the file or argument. (Numerical agreement with transformers/PEFT/llama.cpp is
# checked by tools/check_export.py; the unit tests test_model Merge.* check the values.)
# Usage (CTest): export.sh MEDTUNE_BIN PARITY_BIN
set -u
MT=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=tests/support/expect.sh
. tests/support/expect.sh
exists() {
  if [ -f "$1" ]; then echo "ok: $1 exists"; else echo "FAIL: $1 missing"; fail=1; fi
}

F=tests/fixtures/hf/llama_gqa
expect 0 "model.safetensors" -- "$MT" export merge "$F/base" --adapter "$F/adapter_init" -o "$tmp/m" --dtype bf16
exists "$tmp/m/config.json"
exists "$tmp/m/generation_config.json"
expect 0 '"dtype": "bfloat16"' -- cat "$tmp/m/config.json"
expect 0 '"architecture": "llama"' -- "$MT" info "$tmp/m" --json
expect 0 "wrote" -- "$MT" export gguf "$F/base" --adapter "$F/adapter_init" -o "$tmp/m.gguf" --type q8_0
expect 0 "Q8_0" -- "$MT" info "$tmp/m.gguf"
expect 0 "wrote" -- "$MT" export gguf "$F/base" -o "$tmp/f16.gguf"
expect 0 "wrote" -- "$MT" export gguf-lora --adapter "$F/adapter_init" --base "$F/base" -o "$tmp/a.gguf"
exists "$tmp/a.gguf"
[ ! -e "$tmp/a.gguf.tmp" ] || { echo "FAIL: temporary file left behind"; fail=1; }

# Bad input: exit 2, naming what is wrong.
expect 2 "$tmp/none" -- "$MT" export merge "$F/base" --adapter "$tmp/none" -o "$tmp/x"
expect 2 "llama_headdim/adapter_init.*k_proj" -- "$MT" export merge "$F/base" \
  --adapter tests/fixtures/hf/llama_headdim/adapter_init -o "$tmp/x"
expect 2 "type" -- "$MT" export gguf "$F/base" -o "$tmp/x.gguf" --type q4_0
expect 2 "dtype" -- "$MT" export merge "$F/base" -o "$tmp/x" --dtype f8
expect 2 "adapter" -- "$MT" export gguf-lora --base "$F/base" -o "$tmp/x.gguf"
expect 2 "/nonexistent" -- "$MT" export gguf /nonexistent -o "$tmp/x.gguf"
expect 2 "ids" -- "$MT" export logits "$F/base" --ids 1,x -o "$tmp/l.safetensors"

# Hugging Face directory -> GGUF carries the tokenizer (tokenizer.json converted to llama.cpp's
# keys): a tiny Llama with the SmolLM2 tokenizer gives the same ids and logits from both files.
TINY=$(dirname "$MT")/medtune-tiny-llama
if [ -x "$TINY" ]; then
  # shellcheck source=tests/support/tiny_model.sh
  . tests/support/tiny_model.sh
  make_tiny_model "$TINY" "$tmp/tiny" 3
  expect 0 "wrote" -- "$MT" export gguf "$tmp/tiny" -o "$tmp/tiny.gguf" --type f32
  TEXT="A 45-year-old man's HbA1c is 9.1%; start metformin 500 mg <|im_end|>"
  hf_ids=$("$MT" tokenize "$tmp/tiny" "$TEXT" --json)
  gguf_ids=$("$MT" tokenize "$tmp/tiny.gguf" "$TEXT" --json)
  if [ -n "$hf_ids" ] && [ "$hf_ids" = "$gguf_ids" ]; then echo "ok: same ids from tokenizer.json and the exported GGUF"
  else echo "FAIL: ids differ: $hf_ids vs $gguf_ids"; fail=1; fi
  "$MT" export logits "$tmp/tiny" --ids 1,5,17,42 -o "$tmp/l_hf.safetensors" >/dev/null
  "$MT" export logits "$tmp/tiny.gguf" --ids 1,5,17,42 -o "$tmp/l_gguf.safetensors" >/dev/null
  if cmp -s "$tmp/l_hf.safetensors" "$tmp/l_gguf.safetensors"; then echo "ok: same logits bytes from both files"
  else echo "FAIL: logits differ between the HF directory and its F32 GGUF"; fail=1; fi
else
  echo "FAIL: $TINY missing (build the medtune-tiny-llama target)"; fail=1
fi

# GGUF -> GGUF keeps the tokenizer: the exported SmolLM2 tokenizes and generates.
MODEL=${MEDTUNE_SMOLLM2_GGUF:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$MODEL" ]; then
  expect 0 "wrote" -- "$MT" export gguf "$MODEL" -o "$tmp/s.gguf" --type q8_0
  expect 0 '"ids":\[' -- "$MT" tokenize "$tmp/s.gguf" "Aspirin irreversibly inhibits COX-1" --json
  expect 0 "." -- "$MT" generate "$tmp/s.gguf" -p "The heart has four" -n 3
else
  echo "skip: $MODEL absent (scripts/fetch_model.sh): GGUF -> GGUF export not run"
fi
exit $fail
