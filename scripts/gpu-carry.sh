#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs beside the bundle, for the device tool, whose calls each
# carry at most 64 MiB (working tree included, ~12 MiB): the real SmolLM2 (94 MiB) in three pieces,
# its SHA-256, the MedQA dev split and the HF PEFT anchor, all in .gpu-carry/ (ignored through
# .git/info/exclude: never committed). Then prints the three calls that session 31 made to one
# warm machine (it stays warm 30 s after a call: make each call right after the previous one).
#   bash scripts/gpu-carry.sh [MODEL.gguf]      (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
bundle=build-gpu-cuda/medtune-gpu-bundle.tar.xz
[ -f "$model" ] || { echo "gpu-carry: $model not found (scripts/fetch_model.sh)"; exit 1; }
[ -f "$bundle" ] || { echo "gpu-carry: $bundle not found (scripts/gpu-compile-check.sh)"; exit 1; }
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
rm -rf .gpu-carry && mkdir .gpu-carry
# Piece sizes: call 1 carries piece a alone, call 2 piece b and the bundle, call 3 piece c.
limit=$((64 * 1024 * 1024))
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
room=$((limit - tree - 1000000))  # 1 MB of margin for untracked files
size=$(stat -c %s "$model")
a=$room
b=$((room - $(stat -c %s "$bundle")))
[ "$b" -gt 0 ] && [ $((size - a - b)) -lt "$room" ] || { echo "gpu-carry: the model does not fit in three calls"; exit 1; }
piece() { dd if="$model" of=".gpu-carry/m.$1" bs=1M iflag=skip_bytes,count_bytes skip="$2" ${3:+count=$3} status=none; }
piece a 0 "$a"
piece b "$a" "$b"
piece c $((a + b))
cat .gpu-carry/m.a .gpu-carry/m.b .gpu-carry/m.c | cmp - "$model"
sha256sum "$model" | cut -c1-64 > .gpu-carry/m.sha256
[ -f ../shared/data/medqa/dev.jsonl ] && cp ../shared/data/medqa/dev.jsonl .gpu-carry/dev.jsonl
[ -f ../shared/bench/hf_peft_anchor.py ] && cp ../shared/bench/hf_peft_anchor.py .gpu-carry/
ls -l .gpu-carry
cat <<'CALLS'
The three device calls (scripts/gpu-check.sh stages; docs/gpu.md "On a GPU machine"):
1. run(carry=[".gpu-carry/m.a"], timeout_s=60,
       command="mkdir -p /tmp/stash && cp .gpu-carry/m.a /tmp/stash/ && nvidia-smi")
2. run(carry=[".gpu-carry/m.b", "build-gpu-cuda/medtune-gpu-bundle.tar.xz"], timeout_s=300,
       command="mkdir -p /tmp/stash && cp .gpu-carry/m.b build-gpu-cuda/medtune-gpu-bundle.tar.xz /tmp/stash/ && GPU_CHECK_STAGES='ops nccl cpu parity' bash scripts/gpu-check.sh")
3. run(carry=[".gpu-carry/m.c", ".gpu-carry/m.sha256", ".gpu-carry/dev.jsonl", ".gpu-carry/hf_peft_anchor.py"],
       timeout_s=<budget_left_s of call 2's answer minus 60, at most 600>,
       command="cat /tmp/stash/m.a /tmp/stash/m.b .gpu-carry/m.c > /tmp/stash/smollm2.gguf; if echo \"$(cat .gpu-carry/m.sha256)  /tmp/stash/smollm2.gguf\" | sha256sum -c; then export MEDTUNE_SMOLLM2_GGUF=/tmp/stash/smollm2.gguf; fi; mkdir -p gpu-model && cp .gpu-carry/dev.jsonl gpu-model/medqa-dev.jsonl; cp .gpu-carry/hf_peft_anchor.py bench/; BUNDLE=/tmp/stash/medtune-gpu-bundle.tar.xz GPU_CHECK_STAGES='train eval medqa serve default memory profile bench' MEDQA_LIMIT=300 HF_CASES=2 BENCH_BUDGET_S=440 bash scripts/gpu-check.sh")
Then give_back, and delete gpu-model/ and bench/hf_peft_anchor.py on this side if they appeared.
CALLS
