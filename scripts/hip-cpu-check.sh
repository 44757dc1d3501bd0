#!/usr/bin/env bash
# The whole GPU backend run on the CPU under HIP-CPU (tests/gpu/hip_cpu/README.md says what that
# checks and what it cannot). Builds build-hip-cpu with -DMEDTUNE_GPU=hip-cpu (every
# src/gpu/*.cu rewritten into plain C++ against HIP-CPU, the BLAS the host's) and runs:
#   ops     test_gpu_ops: every registered op case against its CPU reference, but the two whose
#           checks need a device allocator that can fail (runtime/out_of_memory, runtime/errors:
#           HIP-CPU's hipMalloc never does)
#   parity  medtune-parity --device gpu on every HF fixture, fp32 and bf16
#   check   scripts/gpu-check.sh's stages train (5 steps instead of 30), eval and serve, with
#           GPU_CHECK_BIN pointing at this build, on the real SmolLM2 where scripts/setup.sh
#           fetched it (models/), else random SmolLM2-shaped weights. Not its stage memory: a
#           step of 8 x 256 tokens takes ~80 s here (MEMORY_STEPS=7 fits no stage timeout)
# Not part of CI (HIP-CPU is not packaged; this machine reaches no git hosting). Needs libtbb-dev.
#   scripts/hip-cpu-check.sh HIPCPU_DIR [FILTER]
# HIPCPU_DIR: a copy of https://github.com/ROCm/HIP-CPU. With FILTER, only the op cases whose
# names contain it run, and nothing else. 15.5 minutes on 2 Zen 4 cores from a fresh clone (build
# 5 minutes).
# HIP_CPU_BUILD: the build folder (default build-hip-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
hipcpu=${1:?usage: scripts/hip-cpu-check.sh HIPCPU_DIR [FILTER]}
filter=${2:-}
[[ -f "$hipcpu/include/hip/hip_runtime.h" ]] || { echo "no include/hip/hip_runtime.h under $hipcpu"; exit 2; }
hipcpu=$(cd "$hipcpu" && pwd)
jobs=${JOBS:-$(nproc)}
b=${HIP_CPU_BUILD:-build-hip-cpu}  # the build folder
t0=$(date +%s)
cmake -S . -B "$b" -DMEDTUNE_GPU=hip-cpu -DMEDTUNE_HIP_CPU_DIR="$hipcpu" >/dev/null
b=$(cd "$b" && pwd)
cmake --build "$b" -j"$jobs" --target test_gpu_ops medtune medtune-parity medtune-random-llama bench_train_step
echo "build: $(( $(date +%s) - t0 )) s"

echo "== ops"
excluded=(--exclude runtime/out_of_memory --exclude runtime/errors)
if [[ -n "$filter" ]]; then
  exec "$b/tests/gpu/test_gpu_ops" --filter "$filter" "${excluded[@]}"
fi
"$b/tests/gpu/test_gpu_ops" "${excluded[@]}" > "$b/ops.log" 2>&1 || { grep -A20 FAIL "$b/ops.log"; exit 1; }
tail -n 1 "$b/ops.log"

echo "== parity"
for p in fp32 bf16; do
  "$b/medtune-parity" --device gpu --precision "$p" tests/fixtures/hf/*/ > "$b/parity-$p.jsonl"
  python3 - "$b/parity-$p.jsonl" "$p" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
worst = lambda k: max(r[k] for r in rows)
print(f"{sys.argv[2]}: {sum(r['ok'] for r in rows)}/{len(rows)} fixtures; worst rel. error: base logits "
      f"{worst('base_logits_max_rel_error'):.2e}, LoRA logits {worst('lora_logits_max_rel_error'):.2e}, "
      f"LoRA grads {worst('lora_grads_max_rel_error'):.2e}; tolerances {rows[0]['tolerances']}")
sys.exit(0 if all(r["ok"] for r in rows) else 1)
EOF
done

echo "== gpu-check.sh stages on HIP-CPU"
mkdir -p "$b/bin"
for x in medtune medtune-parity medtune-random-llama bench/bench_train_step tests/gpu/test_gpu_ops; do
  ln -sf "$b/$x" "$b/bin/$(basename "$x")"
done
# TIMEOUT_SCALE: the emulated device scores ~0.4 questions/s, so stage eval's 48 questions at
# fp32 take about the 120 s sized for an H200 (session 42: exit 124 on an idle host).
GPU_CHECK_BIN=$b/bin GPU_CHECK_STAGES="train eval serve" TRAIN_STEPS=5 TIMEOUT_SCALE=3 \
  OUT=$b/gpu-check-out bash scripts/gpu-check.sh
echo "all: $(( $(date +%s) - t0 )) s"
