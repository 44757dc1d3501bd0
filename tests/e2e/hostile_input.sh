#!/usr/bin/env bash
# What a hostile or careless user can do to medtune, and what it must do back (issue #18): a
# refused command writes nothing, a diverged run never yields a NaN adapter, context lengths are
# enforced, NaN/Inf weights are named, user errors exit 2 (never 1), nothing is silently bent or
# overwritten, and messages name the real cause. Each block fails without its fix.
# Usage (CTest): hostile_input.sh MEDTUNE_BIN [PARITY_BIN], from the repository root. Needs
# medtune-tiny-llama (tests/support/make_tiny_llama.cpp) next to medtune. ~20 s on 2 cores.
set -u
MT=${1:?usage: hostile_input.sh MEDTUNE_BIN [PARITY_BIN]}
TINY_BIN=${MEDTUNE_TINY_LLAMA_BIN:-$(dirname "$MT")/medtune-tiny-llama}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
[ -x "$TINY_BIN" ] || { echo "FAIL: $TINY_BIN is missing: build the medtune-tiny-llama target"; exit 1; }

# shellcheck source=tests/support/expect.sh
. tests/support/expect.sh
check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

MODEL="$tmp/model"
make_tiny_model "$TINY_BIN" "$MODEL" 11
head -n 12 data/sample/medqa_train.jsonl >"$tmp/train.jsonl"
head -n 4 data/sample/medqa_dev.jsonl >"$tmp/dev.jsonl"
config() {  # config FILE OUTPUT_DIR [extra yaml lines...]
  local file=$1 out=$2
  shift 2
  {
    printf '%s\n' "base_model: $MODEL" "adapter: lora" "datasets:" "  - path: $tmp/train.jsonl" "    type: medqa" \
      "lora_r: 4" "lora_alpha: 8" "lora_target_linear: true" "sequence_len: 64" "micro_batch_size: 2" \
      "max_steps: 4" "learning_rate: 1.0e-3" "save_steps: 1" "save_total_limit: 0" "val_set_size: 0" \
      "output_dir: $out" "num_threads: 2"
    printf '%s\n' "$@"
  } >"$file"
}

echo "== 1. a refused train leaves the finished run untouched"
config "$tmp/run.yaml" "$tmp/run"
expect 0 "completed" -- "$MT" train -c "$tmp/run.yaml"
snapshot() { (cd "$tmp/run" && sha256sum manifest.json config_resolved.json metrics.jsonl adapter/* checkpoint-4/*); }
snapshot >"$tmp/before.sha"
expect 2 "holds checkpoints of an earlier run.*nothing was changed" -- "$MT" train -c "$tmp/run.yaml"
expect 2 "cannot resume.*config: learning_rate" -- "$MT" train -c "$tmp/run.yaml" --resume auto learning_rate=5e-4
rm -rf "$tmp/run/checkpoint-"*  # a finished run whose checkpoints were cleaned up: its adapter stays
snapshot 2>/dev/null | grep -v checkpoint >"$tmp/before2.sha"
expect 2 "holds the adapter of an earlier run" -- "$MT" train -c "$tmp/run.yaml"
check "manifest, config, metrics and adapter unchanged by the refusals" \
  cmp -s <(grep -v checkpoint "$tmp/before.sha") "$tmp/before2.sha"
check "the refused runs wrote nothing: the files still hash the same" \
  bash -c "cd '$tmp/run' && sha256sum -c --quiet '$tmp/before2.sha'"
expect 0 "0 no longer match" -- "$MT" verify "$tmp/run"
expect 0 '"changed": 0,.*"status": "completed"' -- "$MT" verify "$tmp/run" --json
expect 0 "completed" -- "$MT" train -c "$tmp/run.yaml" --overwrite-output-dir

echo "== 2. a diverged run stops, keeps its last good checkpoint, writes no adapter"
# key=value overrides: learning_rate 1e20 makes step 1's update huge but finite; step 2's loss is NaN.
blowup=(learning_rate=1.0e+20 lr_scheduler=constant max_grad_norm=0)
expect 4 "training diverged at step 2: loss (NaN|Inf).*last good checkpoint is .*checkpoint-1" -- \
  "$MT" train -c "$tmp/run.yaml" output_dir="$tmp/div" "${blowup[@]}"
check "no adapter/ from a diverged run" test ! -e "$tmp/div/adapter"
check "manifest status diverged" grep -q '"status": "diverged"' "$tmp/div/manifest.json"
check "checkpoint-1 kept, no checkpoint-2" test -d "$tmp/div/checkpoint-1" -a ! -e "$tmp/div/checkpoint-2"
check "checkpoint-1 verifies" bash -c "cd '$tmp/div/checkpoint-1' && sha256sum -c --quiet checksums.sha256"
# The update overflowing float (weights Inf after a finite step) is caught too.
expect 4 "diverged at step 1: the update made LoRA weights NaN or Inf" -- \
  "$MT" train -c "$tmp/run.yaml" output_dir="$tmp/div2" learning_rate=1.0e+39 lr_scheduler=constant
check "no checkpoint holds the overflowed weights" test ! -e "$tmp/div2/checkpoint-1"
# skip_nonfinite_steps: 2 tolerates two bad steps, the third stops the run.
expect 4 "step skipped.*1 of skip_nonfinite_steps 2.*diverged at step 4.*3 non-finite steps" -- \
  "$MT" train -c "$tmp/run.yaml" output_dir="$tmp/skip" "${blowup[@]}" skip_nonfinite_steps=2 max_steps=6

echo "== 3. train: output_dir and config paths"
touch "$tmp/afile"
config "$tmp/o1.yaml" "$tmp/afile"
expect 2 "output_dir .*afile: exists and is not a directory" -- "$MT" train -c "$tmp/o1.yaml"
config "$tmp/o2.yaml" "/proc/medtune-run"
expect 2 "output_dir /proc/medtune-run: is under /proc" -- "$MT" train -c "$tmp/o2.yaml"
expect 2 "config $tmp: is a directory, expected a file" -- "$MT" train -c "$tmp"
expect 2 "unknown key 'skip_nonfinite_step'; did you mean 'skip_nonfinite_steps'" -- \
  "$MT" train -c "$tmp/run.yaml" skip_nonfinite_step=1

echo "== 4. eval: context, sizes, silent bending, output paths"
expect 2 "--out .*afile: exists and is not a directory" -- "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --out "$tmp/afile" -q
expect 2 "--out /sys/x: is under /sys" -- "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --out /sys/x -q
expect 2 "--limit: must be an integer >= 1, got '0'" -- "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --limit 0
expect 2 "questions $tmp: is a directory" -- "$MT" eval "$MODEL" --data "$tmp" --out "$tmp/e" -q
expect 2 "--system .*needs --format chat" -- "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --system hi --out "$tmp/e" -q
printf 'Answer this:\n{options}\nAnswer:' >"$tmp/noq.txt"
expect 2 "noq.txt: the prompt template has no \{question\}" -- \
  "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --format custom --prompt-template "$tmp/noq.txt" --out "$tmp/e" -q
expect 2 "--prompt-template is read only with --format custom" -- \
  "$MT" eval "$MODEL" --data "$tmp/dev.jsonl" --prompt-template "$tmp/noq.txt" --out "$tmp/e" -q
# A 2 MB "question": refused by file and line, not an internal error.
{ head -n 1 "$tmp/dev.jsonl"; printf '{"question": "%s", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "A"}\n' \
  "$(head -c 2000000 /dev/zero | tr '\0' 'x')"; } >"$tmp/huge.jsonl"
expect 2 "huge.jsonl:2: the record is 2000.* bytes, more than the 1048576" -- \
  "$MT" eval "$MODEL" --data "$tmp/huge.jsonl" --out "$tmp/e" -q
# A model whose context is 48 tokens: questions are cut from the left, counted and marked.
cp -r "$MODEL" "$tmp/short"
sed -i 's/"max_position_embeddings": *2048/"max_position_embeddings": 48/' "$tmp/short/config.json"
expect 0 "4 question\(s\) longer than the model's context \(48 tokens\) were cut" -- \
  "$MT" eval "$tmp/short" --data "$tmp/dev.jsonl" --out "$tmp/e3" -q
check "predictions mark the cut questions" grep -q '"truncated_tokens"' "$tmp/e3/predictions.jsonl"
check "the report counts them" grep -q '"truncated_questions": 4' "$tmp/e3/report.json"

echo "== 5. non-finite weights and sampling parameters"
# A NaN in model.norm.weight (F32), written into the safetensors data by offset.
cp -r "$MODEL" "$tmp/nan"
st="$tmp/nan/model.safetensors"
hlen=$(od -An -tu8 -N8 "$st" | tr -d ' ')
off=$(head -c $((8 + hlen)) "$st" | tail -c "$hlen" | grep -oE '"model\.norm\.weight":\{[^}]*\}' |
  grep -oE '"data_offsets":\[[0-9]+' | grep -oE '[0-9]+$')
printf '\x00\x00\xc0\x7f' | dd of="$st" bs=1 seek=$((8 + hlen + off + 12)) conv=notrunc status=none
expect 2 "tensor 'model.norm.weight' holds NaN at element 3" -- "$MT" eval "$tmp/nan" --data "$tmp/dev.jsonl" --out "$tmp/e4" -q
expect 2 "tensor 'model.norm.weight' holds NaN" -- "$MT" train -c "$tmp/run.yaml" base_model="$tmp/nan" output_dir="$tmp/nanrun"
expect 2 "tensor 'model.norm.weight' holds NaN" -- "$MT" generate "$tmp/nan" -p "The heart" -n 2 --check-tensors
expect 2 "logits for token 1 are not finite" -- "$MT" generate "$tmp/nan" -p "The heart" -n 2
expect 2 "log-probabilities are not finite" -- "$MT" eval "$tmp/nan" --data "$tmp/dev.jsonl" --out "$tmp/e5" -q --no-check-tensors
expect 2 "--temperature: must be a number from 0 to 100, got 'nan'" -- "$MT" generate "$MODEL" -p hi --temperature nan
expect 2 "--seed: must be an integer >= 0, got '-1'" -- "$MT" generate "$MODEL" -p hi --seed -1
expect 2 "--top-p: must be a number from 0 to 1, got 'inf'" -- "$MT" generate "$MODEL" -p hi --top-p inf

echo "== 6. generate: context and prompt"
expect 2 "max-new-tokens: must be an integer >= 1, got '0'" -- "$MT" generate "$MODEL" -p hi -n 0
expect 0 "-n 100000000 capped to 4[0-9]" -- "$MT" generate "$tmp/short" -p "The heart has four" -n 100000000
expect 2 "the prompt is [0-9]+ tokens: it leaves no room in the context of 48" -- \
  "$MT" generate "$tmp/short" -p "$(printf 'word %.0s' $(seq 60))"
expect 2 "--ctx-size 4096 is above the model's context \(48 tokens" -- "$MT" generate "$tmp/short" -p hi -c 4096
expect 2 "--prompt: not valid UTF-8" -- "$MT" generate "$MODEL" -p "$(printf 'caf\xe9')"
expect 2 "TEXT: not valid UTF-8" -- "$MT" tokenize "$MODEL" "$(printf 'caf\xe9')"
expect 2 "--system is a chat message: it needs --chat" -- "$MT" generate "$MODEL" -p hi --system "You are a clinician."

echo "== 7. other commands"
expect 2 "unknown command 'evl'; did you mean 'eval'\?" -- "$MT" evl x
expect 2 "unknown command 'trian'; did you mean 'train'\?" -- "$MT" -t 2 trian
expect 2 "--context: must be an integer from 1 to" -- "$MT" info "$MODEL" --context -5
expect 2 "-t: must be an integer from 0 to 4096, got '-1'|--threads: must be" -- "$MT" -t -1 info "$MODEL"
echo "not a model" >"$tmp/notes.txt"
expect 2 "-o .*notes.txt: exists and is not a GGUF file; pass --force" -- "$MT" export gguf "$MODEL" -o "$tmp/notes.txt"
check "the non-GGUF file was not overwritten" grep -q "not a model" "$tmp/notes.txt"
expect 2 "is the directory of an input of this export" -- "$MT" export merge "$MODEL" -o "$MODEL" --force
expect 2 "-o .*: exists and is not empty; pass --force" -- "$MT" export merge "$MODEL" -o "$tmp/run"
expect 0 "wrote" -- "$MT" export gguf "$MODEL" -o "$tmp/m.gguf" --type f32
expect 0 "wrote" -- "$MT" export gguf "$MODEL" -o "$tmp/m.gguf" --type f32  # a GGUF may be replaced
expect 2 "-o .*m.gguf: is an input of this export" -- "$MT" export gguf "$tmp/m.gguf" -o "$tmp/m.gguf"

exit $fail
