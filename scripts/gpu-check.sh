#!/usr/bin/env bash
# The one prepared script for a GPU machine (issue #14; docs/gpu.md). Run on one H200 in session 31.
#
# Here, before the run (the GPU machine has no network and none of the project's Debian packages):
#   bash scripts/gpu-compile-check.sh      # CUDA build of the whole project, MEDTUNE_NATIVE=OFF, and
#                                          # build-gpu-cuda/medtune-gpu-bundle.tar.xz (scripts/gpu-bundle.sh)
#   The real SmolLM2 (94 MiB) and ../shared/data/medqa/dev.jsonl (for stage medqa) are optional;
#   the model is too large to travel in one call with the bundle (64 MiB per call):
#   scripts/gpu-carry.sh splits it and prints the three calls to one warm machine that session
#   31 made (docs/gpu.md, "On a GPU machine"). Never commit either file.
# Then, through the device tool, from the repository root, carrying the bundle:
#   bash scripts/gpu-check.sh              # summary, results.jsonl and the logs' tarball under $OUT
#                                          # (./gpu-check-out where OUT is unset)
# Environment: GPU_CHECK_STAGES (below), GPU_CHECK_BIN (a folder of the bundle's binaries to use
# instead of the bundle), MEDQA_LIMIT (stage medqa's first N questions; 0: all),
# TRAIN_STEPS and MEMORY_STEPS (stages train and memory: 30 and 200 steps), HF_CASES (at most this
# many HF anchor cases), BENCH_BUDGET_S (stage bench starts no case after
# this many seconds of the run; 470), TIMEOUT_SCALE (every command's timeout times this integer;
# 1: sized for an H200; scripts/hip-cpu-check.sh's emulated device needs more).
# Sized for a 15-minute lease: under 9 minutes; every stage has a timeout.
#
# Rehearsal, here, without a GPU: GPU_CHECK_REHEARSAL=1 bash scripts/gpu-check.sh runs every stage
# with --device cpu where it says gpu, the op tests not at all, the real SmolLM2 not looked for
# and the training, memory and benchmark stages shortened, so that the script's own logic (the
# bundle, the commands' options, the JSON it reads, its records) is checked before the one run
# that counts. A rehearsal says nothing about the GPU, and its summary says so.
#
# Stages, by the names GPU_CHECK_STAGES takes (each prints one summary line; FAILED ones make the
# exit status 1; environment and the bundle always):
#   environment     GPU, driver, toolkit (env.txt)
#   ops             test_gpu_ops: every registered kernel case against its CPU reference (ops.log);
#                   from the bundle, or else built standalone from tests/gpu (the previous way)
#   nccl            test_gpu_ops --collectives: the NCCL all-reduce as a world of one rank (id,
#                   communicator, ncclAllReduce of 17 to 3M floats staged from the host and in place
#                   on device memory, bit for bit); libnccl.so.2 from the GPU image (its CUDA lib
#                   folders, or the nvidia-nccl wheel torch brings), else gpu-model/libnccl.so.2 if
#                   it travelled; NOT RUN (not failed) when none is found
#   cpu             the bundle's test_core and test_ops on the GPU machine's host CPU (an Intel one
#                   with AVX-VNNI and AMX, which the development machines lack)
#   parity          medtune-parity --device gpu on every tests/fixtures/hf fixture: logits, loss,
#                   greedy tokens and LoRA logits against transformers' float64, with
#                   --precision fp32 (fp32 tolerances) and bf16 (train::bf16_tolerances)
#   train           30 LoRA steps of the embedded default's config on the CPU and on the GPU from
#                   the same start: per-step losses compared, fp32 on the GPU (within 1e-3), and
#                   bf16 reported (random SmolLM2-shaped weights, or the real SmolLM2 when present)
#   eval            the fictional test questions scored on the CPU and on the GPU: the same
#                   predictions at fp32 and the largest |Δ log-likelihood|; bf16's agreement reported
#   medqa           the MedQA dev split scored on the CPU and on the GPU (real SmolLM2 and
#                   gpu-model/medqa-dev.jsonl, copied from ../shared/data/medqa/dev.jsonl before the
#                   run, never committed): the same predictions at fp32; bf16's agreement reported
#   serve           medtune serve --device gpu: a greedy completion equals generate --device gpu;
#                   4 concurrent requests against their answers alone (reported); generate's
#                   device peak within its memory plan
#   default         the embedded default trained and evaluated on the GPU (real SmolLM2 only):
#                   test accuracy >= 90%, as on the CPU (docs/training.md)
#   memory          200 training steps on the GPU: the backend's peak bytes after step 5 and after
#                   step 200 (flat: equal), and within the trainer's device plan
#   profile         MEDTUNE_GPU_PROFILE=1 (src/gpu/op_profile.h): each op's time in a 7B training
#                   step, 16 x 512 scoring and batch-1 decode (profile-*.txt)
#   bench           random-weight Llama-2-7B shapes, side by side in this run: medtune
#                   (bench_train_step, bench_forward --device gpu) and ../shared/bench/hf_peft_anchor.py
#                   when torch and peft are importable here (copy it to bench/hf_peft_anchor.py before
#                   the run: ../shared does not travel): LoRA r16 qkvo 8 x 512 with and without
#                   checkpointing, scoring 16 x 512, batch-1 decode, QLoRA r64 all-linear over NF4
#                   (the anchor over bf16), the QLoRA and checkpointed r16 cases again within 8 and
#                   15.3 GiB (max_device_memory: passes), fp32; then Llama-3-8B r16 all-linear if
#                   time remains.
#                   Tokens/s and peak memory; each case starts only within the run's budget
set -uo pipefail
cd "$(dirname "$0")/.."
rehearsal=${GPU_CHECK_REHEARSAL:-0}
# GPU_CHECK_STAGES: the stages to run, by name (default: all of them, in the order below):
#   ops nccl cpu parity train eval medqa serve default memory profile bench
# Several calls of the device tool on one warm machine can then each run a part of the check
# (each call can carry only 64 MiB: the bundle, or a part of the real model).
all_stages="ops nccl cpu parity train eval medqa serve default memory profile bench"
stages=${GPU_CHECK_STAGES:-$all_stages}
for st in $stages; do
  case " $all_stages " in
    *" $st "*) ;;
    *) echo "GPU_CHECK_STAGES: unknown stage '$st' (stages: $all_stages)"; exit 2 ;;
  esac
done
want() { case " $stages " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# MEDQA_LIMIT: stage medqa scores the first N questions of the dev split (all 1,272 with 0).
medqa_limit=${MEDQA_LIMIT:-0}
gpu=gpu  # the device of the stages' GPU runs
if [ "$rehearsal" = 1 ]; then
  gpu=cpu
  echo "== REHEARSAL: --device gpu runs on the CPU; nothing below says anything about a GPU"
fi
# dev DEVICE: the device a run labelled DEVICE (cpu or gpu) uses.
# timeout N, N scaled by TIMEOUT_SCALE.
tmo() { timeout $(( $1 * ${TIMEOUT_SCALE:-1} )) "${@:2}"; }
dev() { [ "$1" = gpu ] && echo "$gpu" || echo "$1"; }
# The logs are written to $out, a local folder; after every stage they are packed into
# $final/gpu-check-logs.tar.gz beside summary-so-far.txt and results.jsonl: the device tool brings
# back at most 8 files from $OUT, and a run the lease stops still brings back what it had.
final=${OUT:-./gpu-check-out}
mkdir -p "$final"
final=$(cd "$final" && pwd)
out=$(mktemp -d)/gpu-check
mkdir -p "$out"
pack() {
  tar -C "$(dirname "$out")" -czf "$final/gpu-check-logs.tar.gz.part" gpu-check 2>/dev/null &&
    mv "$final/gpu-check-logs.tar.gz.part" "$final/gpu-check-logs.tar.gz"
  cp "$out/summary-so-far.txt" "$out/results.jsonl" "$final/" 2>/dev/null
  [ -f "$out/summary.txt" ] && cp "$out/summary.txt" "$final/"
  return 0
}
jobs=${JOBS:-16}
t_all=$(date +%s)
summary=()
failed=0
results="$out/results.jsonl"
: > "$results"
: > "$out/summary-so-far.txt"

# record STAGE STATUS SECONDS [NOTE]
record() {
  summary+=("$(printf '%-10s %-16s %5s s  %s' "$1" "$2" "$3" "${4:-}")")
  # As it goes, so that a run stopped by the lease still brings its summary back.
  printf '%s\n' "${summary[${#summary[@]}-1]}" >> "$out/summary-so-far.txt"
  pack
  case $2 in FAILED | "TIMED OUT") failed=1 ;; esac
  return 0
}
# result KEY JSON: one line of results.jsonl
result() { echo "{\"stage\": \"$1\", \"result\": $2}" >> "$results"; pack; }

echo "== 1 environment"
t=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
{
  date -u
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>&1
  else
    echo "nvidia-smi: not available"
  fi
  nvcc --version 2>&1 | tail -n 2
  nproc
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tail -n 1
} | tee "$out/env.txt"
record environment done $(( $(date +%s) - t ))

# ---- the bundle (scripts/gpu-bundle.sh), unpacked outside the checkout; or GPU_CHECK_BIN, a folder
# holding the same binaries (scripts/hip-cpu-check.sh: the HIP-CPU build's, which run the GPU
# backend on the CPU)
bundle=${BUNDLE:-build-gpu-cuda/medtune-gpu-bundle.tar.xz}
bin=""
if [ -n "${GPU_CHECK_BIN:-}" ]; then
  bin=$(cd "$GPU_CHECK_BIN" && pwd)
  echo "binaries: $bin (GPU_CHECK_BIN)"
  "$bin/medtune" doctor --no-op-tests > "$out/doctor.txt" 2>&1 || true
elif [ -f "$bundle" ]; then
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$bundle"
  bin=$dir/medtune-gpu/bin
  export LD_LIBRARY_PATH=$dir/medtune-gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  echo "bundle: $bundle (commit $(cat "$dir/medtune-gpu/commit"))"
  # cuBLAS does not travel: the GPU image's toolkit has it, in /usr/local/cuda/lib64 or, where that
  # folder lacks it, in the folder of the pip wheel PyTorch uses (nvidia-cublas).
  for lib in $(ldd "$bin/medtune" | awk '/not found/{print $1}'); do
    found=$(find /usr/local/cuda*/ /opt /usr/lib -name "$lib" 2>/dev/null | head -n 1)
    [ -n "$found" ] || continue
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
    echo "$lib: $found"
  done
  "$bin/medtune" doctor --no-op-tests > "$out/doctor.txt" 2>&1 || true
  if ldd "$bin/medtune" | grep -q "not found"; then
    ldd "$bin/medtune" | grep "not found" | tee "$out/ldd-missing.txt"
    bin=""
    record bundle FAILED 0 "libraries not found: ldd-missing.txt"
  fi
else
  record bundle "NOT CARRIED" 0 "$bundle absent: stages 3-8 need it (scripts/gpu-compile-check.sh)"
fi

if want ops || want nccl; then
echo "== 2 op tests"
t=$(date +%s)
ops_bin=""
if [ -n "$bin" ]; then
  ops_bin=$bin/test_gpu_ops
else
  # The standalone build of the op tests alone: the GPU image has nvcc, CMake and g++.
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
  if tmo 420 cmake -S tests/gpu -B build-gpu-check -DMEDTUNE_GPU=cuda \
       -DCMAKE_CUDA_ARCHITECTURES="${cap:-90}" -DMEDTUNE_GPU_CHECK_WERROR=OFF >"$out/build.log" 2>&1 &&
     tmo 420 cmake --build build-gpu-check -j"$jobs" >>"$out/build.log" 2>&1; then
    ops_bin=build-gpu-check/test_gpu_ops
  else
    record "op tests" FAILED $(( $(date +%s) - t )) "standalone build failed: build.log"
  fi
fi
if ! want ops; then
  :
elif [ "$rehearsal" = 1 ]; then
  record "op tests" "NOT RUN" 0 "rehearsal"
elif [ -n "$ops_bin" ]; then
  rc=0
  tmo 240 "$ops_bin" > "$out/ops.log" 2>&1 || rc=$?
  line=$(grep -E "^gpu op tests:" "$out/ops.log" | tail -n 1)
  case $rc in
    0) record "op tests" ok $(( $(date +%s) - t )) "$line" ;;
    77) record "op tests" FAILED $(( $(date +%s) - t )) "no GPU visible: $(head -n 1 "$out/ops.log")" ;;
    124) record "op tests" "TIMED OUT" $(( $(date +%s) - t )) "see ops.log" ;;
    *) record "op tests" FAILED $(( $(date +%s) - t )) "exit $rc; $line; see ops.log" ;;
  esac
fi

echo "== 2b nccl: the all-reduce as a 1-GPU world"
t=$(date +%s)
if ! want nccl; then
  :
elif [ "$rehearsal" = 1 ]; then
  record nccl "NOT RUN" 0 "rehearsal"
elif [ -n "$ops_bin" ]; then
  # medtune opens libnccl.so.2 at run time (src/gpu/collectives.cu): put a copy on the path.
  nccl_dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib "$(pwd)/gpu-model" \
           "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -f "$d/libnccl.so.2" ] && nccl_dirs=$nccl_dirs:$d
  done
  rc=0
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}$nccl_dirs tmo 120 "$ops_bin" --collectives > "$out/nccl.log" 2>&1 || rc=$?
  line=$(grep -E "^gpu op tests:" "$out/nccl.log" | tail -n 1)
  if [ "$rc" = 0 ]; then
    record nccl ok $(( $(date +%s) - t )) "$line (libnccl.so.2 from ${nccl_dirs#:}${nccl_dirs:-the system})"
  elif [ "$rc" = 77 ]; then
    record nccl "NOT RUN" $(( $(date +%s) - t )) "$(head -n 1 "$out/nccl.log")"
  elif grep -q "cannot be loaded" "$out/nccl.log"; then
    record nccl "NOT RUN" $(( $(date +%s) - t )) "no libnccl.so.2 on this machine: nccl.log"
  else
    record nccl FAILED $(( $(date +%s) - t )) "exit $rc; $line; see nccl.log"
  fi
fi

fi  # ops, nccl

[ -n "$bin" ] || { printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"; pack; exit 1; }
MT=$bin/medtune
work=$(mktemp -d)

if want cpu; then
echo "== 2c cpu: the CPU kernels on the GPU machine's host CPU"
# That host is an Intel CPU with AVX-VNNI, AVX-512 VNNI/BF16 and AMX (seen 2026-12-04), which the
# development machines (AMD Zen 3 / Zen 4) lack: the unit tests of the int8, bf16 and BLAS paths
# (test_core, test_ops, from the bundle) run there on every kernel path that CPU can take.
t=$(date +%s)
if [ -x "$bin/test_core" ] && [ -x "$bin/test_ops" ]; then
  # The tests read their fixtures under the source folder the bundle was built from.
  src_dir=$(cat "$bin/../source_dir" 2>/dev/null || true)
  if [ -n "$src_dir" ] && [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$(pwd)" "$src_dir"; fi
  "$bin/medtune" doctor --no-op-tests > "$out/cpu-doctor.txt" 2>&1 || true
  rc=0
  for tb in test_core test_ops; do
    tmo 120 "$bin/$tb" > "$out/cpu-$tb.log" 2>&1 || rc=$?
  done
  paths=$(sed -n 's/.*kernel paths this CPU can take: \(.*\)/\1/p' "$out/cpu-doctor.txt" | head -n 1)
  line="$(grep -h -E '^\[  (PASSED|FAILED)  \]' "$out"/cpu-test_core.log "$out"/cpu-test_ops.log | tr '\n' ' ')"
  [ "$rc" = 0 ] && record cpu ok $(( $(date +%s) - t )) "kernel paths: $paths; $line" ||
    record cpu FAILED $(( $(date +%s) - t )) "exit $rc; $line; cpu-test_*.log"
else
  record cpu "NOT RUN" 0 "the bundle has no test_core/test_ops"
fi
fi

if want parity; then
echo "== 3 parity (medtune-parity --device gpu, fp32 and bf16)"
for prec in fp32 bf16; do
  t=$(date +%s)
  rc=0
  tmo 120 "$bin/medtune-parity" --device "$gpu" --precision "$prec" tests/fixtures/hf/*/ > "$out/parity-$prec.jsonl" \
    2> "$out/parity-$prec.err" || rc=$?
  n_ok=$(grep -c '"ok":true' "$out/parity-$prec.jsonl" || true)
  n_all=$(ls -d tests/fixtures/hf/*/ | wc -l)
  worst=$(python3 -c "
import json
rows=[json.loads(l) for l in open('$out/parity-$prec.jsonl')]
print(max((r['base_logits_max_rel_error'] for r in rows), default=float('nan')), max((r['lora_logits_max_rel_error'] for r in rows), default=float('nan')), rows[0]['tolerances']['logits_rel'] if rows else '')" 2>/dev/null)
  result "parity $prec" "{\"ok\": $n_ok, \"fixtures\": $n_all, \"worst_base_lora_tol\": \"$worst\"}"
  [ "$rc" = 0 ] && record "parity $prec" ok $(( $(date +%s) - t )) "$n_ok/$n_all fixtures; worst base/LoRA logit rel. error, tolerance: $worst" ||
    record "parity $prec" FAILED $(( $(date +%s) - t )) "exit $rc, $n_ok/$n_all ok; parity-$prec.jsonl, parity-$prec.err"
done

fi  # parity

# The model for stages 4-7: the real SmolLM2 if it travelled, else random SmolLM2-shaped weights
# with SmolLM2's tokenizer (tests/fixtures/tokenizer/smollm2).
real=""
for m in "${MEDTUNE_SMOLLM2_GGUF:-}" models/SmolLM2-135M-Instruct.Q4_1.gguf gpu-model/SmolLM2-135M-Instruct.Q4_1.gguf; do
  [ "$rehearsal" != 1 ] && [ -n "$m" ] && [ -f "$m" ] && { real=$(realpath "$m"); break; }
done
if [ -n "$real" ]; then
  model=$real
else
  model=$work/smollm2-random
  "$bin/medtune-random-llama" "$model" --arch smollm2-135m --dtype f32 > /dev/null
  cp tests/fixtures/tokenizer/smollm2/tokenizer.json tests/fixtures/tokenizer/smollm2/tokenizer_config.json "$model/"
fi
echo "model for stages 4-7: $model"

if want train; then
echo "== 4 train: 30 steps on the CPU and on the GPU"
t=$(date +%s)
rc=0
steps=${TRAIN_STEPS:-30}
[ "$rehearsal" = 1 ] && steps=3
for run in cpu:fp32 gpu:fp32 gpu:bf16; do
  tmo 150 "$MT" train --config configs/smollm2-fictional-lora.yaml --device "$(dev "${run%%:*}")" --precision "${run##*:}" \
    base_model="$model" max_steps=$steps output_dir="$work/train-${run/:/-}" max_runtime=2m > "$out/train-${run/:/-}.log" 2>&1 || rc=$?
done
if [ "$rc" = 0 ]; then
  cmp=$(python3 - "$work/train-cpu-fp32/metrics.jsonl" "$work/train-gpu-fp32/metrics.jsonl" "$work/train-gpu-bf16/metrics.jsonl" <<'EOF'
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r and "step" in r]
a, b, c = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3])
rel = lambda u, v: max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(u, v))
print(json.dumps({"steps": len(a), "cpu_first_last": [a[0], a[-1]], "gpu_fp32_first_last": [b[0], b[-1]],
                  "gpu_bf16_first_last": [c[0], c[-1]], "max_rel_diff": rel(a, b), "bf16_max_rel_diff": rel(a, c)}))
EOF
)
  result train "$cmp"
  rel=$(python3 -c "import json; print(json.loads('''$cmp''')['max_rel_diff'])")
  # fp32 on both sides, different summation orders: ~1e-6 per step, compounding over 30 updates;
  # 1e-3 relative is far below what a wrong gradient does (the loss curve separates by percents).
  if python3 -c "import sys; sys.exit(0 if $rel <= 1e-3 else 1)"; then
    record train ok $(( $(date +%s) - t )) "$cmp"
  else
    record train FAILED $(( $(date +%s) - t )) "$cmp (tolerance 1e-3)"
  fi
else
  record train FAILED $(( $(date +%s) - t )) "exit $rc: train-*.log"
fi

fi  # train

# compare_evals STAGE PREFIX: the predictions of $work/PREFIX-{cpu-fp32,gpu-fp32,gpu-bf16} compared
# and recorded under STAGE: ok when fp32 on the GPU predicts what the CPU does on every question;
# the largest |delta log-likelihood|, both accuracies and bf16's agreement are reported.
compare_evals() {
  local stage=$1 prefix=$2 cmp same
  cmp=$(python3 - "$work/$prefix-cpu-fp32/predictions.jsonl" "$work/$prefix-gpu-fp32/predictions.jsonl" \
    "$work/$prefix-gpu-bf16/predictions.jsonl" <<'EOF'
import json, sys
a, b, c = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
d = lambda u, v: max(abs(p - q) for x, y in zip(u, v) for p, q in zip(x["option_logprobs"], y["option_logprobs"]))
acc = lambda u: sum(x["pred"] == x["gold"] for x in u) / len(u)
print(json.dumps({"questions": len(a), "same_prediction": sum(x["pred"] == y["pred"] for x, y in zip(a, b)),
                  "max_abs_dloglik": d(a, b), "accuracy_cpu_gpu": [acc(a), acc(b)],
                  "bf16_same_prediction": sum(x["pred"] == y["pred"] for x, y in zip(a, c)), "bf16_max_abs_dloglik": d(a, c)}))
EOF
)
  result "$stage" "$cmp"
  same=$(python3 -c "import json; r=json.loads('''$cmp'''); print(int(r['same_prediction']==r['questions']))" 2>/dev/null)
  [ "$same" = 1 ] && record "$stage" ok $(( $(date +%s) - t )) "$cmp" || record "$stage" FAILED $(( $(date +%s) - t )) "$cmp"
}

if want eval; then
echo "== 5 eval: CPU vs GPU on data/fictional/test.jsonl"
t=$(date +%s)
rc=0
for run in cpu:fp32 gpu:fp32 gpu:bf16; do
  tmo 120 "$MT" eval "$model" --data data/fictional/test.jsonl --format lm_eval --scoring text -q \
    --device "$(dev "${run%%:*}")" --precision "${run##*:}" --out "$work/eval-${run/:/-}" > "$out/eval-${run/:/-}.log" 2>&1 || rc=$?
done
if [ "$rc" = 0 ]; then
  compare_evals eval eval
else
  record eval FAILED $(( $(date +%s) - t )) "exit $rc: eval-*.log"
fi

fi  # eval

if want medqa; then
echo "== 5c medqa: CPU vs GPU on the MedQA dev split (real SmolLM2 and gpu-model/medqa-dev.jsonl only)"
t=$(date +%s)
medqa=gpu-model/medqa-dev.jsonl
if [ -n "$real" ] && [ -f "$medqa" ]; then
  rc=0
  for run in cpu:fp32 gpu:fp32 gpu:bf16; do
    limit_args=()
    [ "$medqa_limit" -gt 0 ] && limit_args=(--limit "$medqa_limit")
    tmo 150 "$MT" eval "$real" --data "$medqa" "${limit_args[@]}" -q --device "$(dev "${run%%:*}")" --precision "${run##*:}" \
      --out "$work/medqa-${run/:/-}" > "$out/medqa-${run/:/-}.log" 2>&1 || rc=$?
  done
  if [ "$rc" = 0 ]; then
    compare_evals medqa medqa
  else
    record medqa FAILED $(( $(date +%s) - t )) "exit $rc: medqa-*.log"
  fi
else
  record medqa "NOT RUN" 0 "needs the real SmolLM2 and $medqa (copied from ../shared/data/medqa/dev.jsonl, never committed)"
fi

fi  # medqa

if want serve; then
echo "== 5b serve: medtune serve --device gpu against generate --device gpu"
t=$(date +%s)
# Issue 15's server on the GPU backend: a greedy completion equals `generate` on the same device
# (fp32), and 4 concurrent requests (one forward pass per step, 4 slots) are each compared with
# their answer alone: reported, not failed, because cuBLAS is not known to be batch-invariant
# (docs/decisions/batch-invariant-serving.md).
rc=0
tmo 60 "$MT" generate "$model" -p "The patient was given" -n 16 --device "$gpu" --precision fp32 --json -q \
  > "$out/serve-generate.json" 2> "$out/serve-generate.err" || rc=$?
"$MT" serve "$model" --device "$gpu" --precision fp32 --host 127.0.0.1 --port 0 --parallel 4 -c 2048 --alias m \
  > "$out/serve.log" 2>&1 &
serve_pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out/serve.log" | head -n 1)
  if [ -n "$port" ] || ! kill -0 "$serve_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ "$rc" = 0 ] && [ -n "$port" ]; then
  cmp=$(tmo 120 python3 - "$port" "$out/serve-generate.json" <<'EOF' || echo '{"error": "the client failed"}'
import concurrent.futures, json, sys, urllib.request
port, gen = sys.argv[1], json.load(open(sys.argv[2]))
def complete(prompt):
    body = {"model": "m", "prompt": prompt, "max_tokens": 16, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]
prompts = ["The patient was given", "Metformin lowers", "First-line therapy for", "The most common cause of"]
alone = [complete(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    together = list(ex.map(complete, prompts))
print(json.dumps({"equals_generate": alone[0] == gen["text"], "requests": len(prompts),
                  "batched_equal_alone": sum(a == b for a, b in zip(alone, together)),
                  "generate_device_memory": gen.get("device_memory")}))
EOF
)
  result serve "$cmp"
  # Passes when the completion equals generate's and generate's device peak is within its plan
  # (the backend's buffer cache is bounded by it: Backend::plan_memory; a rehearsal on the CPU
  # has neither).
  if python3 -c "
import json, sys
r = json.loads('''$cmp''')
m = r.get('generate_device_memory') or {}
sys.exit(0 if r.get('equals_generate') and m.get('peak_bytes', 0) <= m.get('planned_bytes', 0) else 1)"; then
    record serve ok $(( $(date +%s) - t )) "$cmp"
  else
    record serve FAILED $(( $(date +%s) - t )) "$cmp; serve.log"
  fi
else
  record serve FAILED $(( $(date +%s) - t )) "generate exit $rc or no port: serve-generate.err, serve.log"
fi
kill "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true

fi  # serve

if want default; then
echo "== 6 the embedded default on the GPU"
t=$(date +%s)
if [ -n "$real" ]; then
  rc=0
  tmo 240 "$MT" train --config configs/smollm2-fictional-lora.yaml --device gpu base_model="$real" \
    output_dir="$work/default" > "$out/default-train.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] && tmo 60 "$MT" eval "$real" --data data/fictional/test.jsonl --format lm_eval --scoring text -q \
    --device gpu --adapter "$work/default/adapter" --out "$work/default-eval" --json > "$out/default-eval.json" 2> "$out/default-eval.err" || rc=$?
  if [ "$rc" = 0 ]; then
    acc=$(python3 -c "import json; print(json.load(open('$out/default-eval.json'))['metrics']['accuracy']['value'])" 2>/dev/null || echo nan)
    result default "{\"accuracy\": $acc}"
    python3 -c "import sys; sys.exit(0 if $acc >= 0.9 else 1)" && record default ok $(( $(date +%s) - t )) "test accuracy $acc (>= 0.90)" ||
      record default FAILED $(( $(date +%s) - t )) "test accuracy $acc (< 0.90)"
  else
    record default FAILED $(( $(date +%s) - t )) "exit $rc: default-train.log, default-eval.json"
  fi
else
  record default "NOT RUN" 0 "the real SmolLM2 did not travel (gpu-model/, see the top of this script)"
fi

fi  # default

if want memory; then
echo "== 7 memory: 200 steps on the GPU"
t=$(date +%s)
rc=0
mem_steps=${MEMORY_STEPS:-200}
[ "$rehearsal" = 1 ] && mem_steps=7
tmo 150 "$bin/bench_train_step" "$model" --device "$gpu" --batch 8 --seq 256 --steps $mem_steps --peak-after 5 \
  > "$out/memory.json" 2> "$out/memory.err" || rc=$?
if [ "$rc" = 0 ]; then
  result memory "$(cat "$out/memory.json")"
  # Flat (the same peak after step 5 and at the end) and within the trainer's plan.
  flat=$(python3 -c "import json; r=json.load(open('$out/memory.json')); p=r['device_peak_mib']; print(int(r['device_peak_after_mib']==p and p<=r['device_plan_mib']), r['device_peak_after_mib'], p, r['device_plan_mib'])")
  set -- $flat
  msg="peak after step 5: $2 MiB, after step $mem_steps: $3 MiB, plan $4 MiB"
  [ "$1" = 1 ] && record memory ok $(( $(date +%s) - t )) "$msg" || record memory FAILED $(( $(date +%s) - t )) "$msg"
else
  record memory FAILED $(( $(date +%s) - t )) "exit $rc: memory.err"
fi

fi  # memory

if want profile || want bench; then
echo "== 8 bench: Llama-2-7B shapes, medtune and HF PEFT side by side"
t=$(date +%s)
big=$work/llama2-7b
arch=llama2-7b
seq=512
if [ "$rehearsal" = 1 ]; then  # the commands and their JSON, on a model and batch the CPU runs in seconds
  big=$work/smollm2-bench
  arch=smollm2-135m
  seq=32
fi
if tmo 150 "$bin/medtune-random-llama" "$big" --arch "$arch" --dtype bf16 > "$out/bench-make.log" 2>&1; then
  if want profile; then
    # 8p: where a step's time goes, op by op (MEDTUNE_GPU_PROFILE, src/gpu/op_profile.h): the
    # checkpointed r16 LoRA step, 16 x 512 scoring and batch-1 decode. The profiled runs wait for
    # the GPU around every op: their own tokens/s are not the benchmark's.
    tp=$(date +%s)
    MEDTUNE_GPU_PROFILE=1 tmo 120 "$bin/bench_train_step" "$big" --device "$gpu" --batch 8 --seq "$seq" \
      --precision bf16 --rank 16 --targets qkvo --checkpointing 1 --steps 2 > /dev/null 2> "$out/profile-train.txt"
    MEDTUNE_GPU_PROFILE=1 tmo 90 "$bin/bench_forward" "$big" --device "$gpu" --precision bf16 \
      --prompt-tokens "$seq" --decode-tokens 1 --repeats 1 --score-batch 16 > /dev/null 2> "$out/profile-score.txt"
    MEDTUNE_GPU_PROFILE=1 tmo 60 "$bin/bench_forward" "$big" --device "$gpu" --prompt-tokens 256 \
      --decode-tokens 32 --repeats 1 > /dev/null 2> "$out/profile-decode.txt"
    top=$(grep -m1 -A1 'ms/call' "$out/profile-train.txt" | tail -n 1 | tr -s ' ')
    record profile done $(( $(date +%s) - tp )) "profile-{train,score,decode}.txt; train's largest:$top"
  fi
  if want bench; then
  anchor=""
  [ -f bench/hf_peft_anchor.py ] && python3 -c "import torch, peft" 2>/dev/null && anchor=bench/hf_peft_anchor.py
  # Cases in order of importance; each starts only while the run is within its budget (the lease).
  budget=${BENCH_BUDGET_S:-470}
  in_time() { [ $(( $(date +%s) - t_all )) -lt "$budget" ] || { skipped="$skipped $1"; return 1; }; }
  skipped=""
  # medtune NAME OUTFILE ARGS...: bench_train_step on $big, recorded under NAME
  train_case() {
    local name=$1 file=$2; shift 2
    in_time "$name" || return 0
    tmo 120 "$bin/bench_train_step" "$big" --device "$gpu" --batch 8 --seq "$seq" "$@" > "$out/$file" 2>> "$out/bench.err" &&
      result "bench medtune $name" "$(cat "$out/$file")"
  }
  # hf NAME OUTFILE ARGS...: the anchor, when it imports here
  # HF_CASES: at most this many anchor cases run (each loads a 7B model: about a minute); the
  # others are compared with ../shared/anchors/README.md, measured on an H200 before.
  hf_left=${HF_CASES:-99}
  hf_case() {
    local name=$1 file=$2; shift 2
    [ -n "$anchor" ] && in_time "hf $name" || return 0
    [ "$hf_left" -gt 0 ] || { skipped="$skipped hf($name)"; return 0; }
    hf_left=$((hf_left - 1))
    tmo 150 python3 "$anchor" --arch "$arch" "$@" > "$out/$file" 2>> "$out/bench.err" &&
      result "bench hf $name" "$(tail -n 1 "$out/$file")"
  }
  for ck in 1 0; do
    hf_args=(--r 16 --targets qkvo --batch 8 --seq "$seq")
    [ "$ck" = 1 ] && hf_args+=(--ckpt)
    train_case "bf16 r16 qkvo 8x512 ckpt=$ck" "bench-medtune-ckpt$ck.json" --precision bf16 --rank 16 --targets qkvo \
      --checkpointing "$ck" --steps 3
    hf_case "r16 qkvo 8x512 ckpt=$ck" "bench-hf-ckpt$ck.json" "${hf_args[@]}"
  done
  # Scoring 16 x 512: medtune computes the logits of each row's last position (letter scoring),
  # the anchor every position's (transformers' forward).
  if in_time "score"; then
    tmo 90 "$bin/bench_forward" "$big" --device "$gpu" --precision bf16 --prompt-tokens "$seq" --decode-tokens 1 \
      --repeats 3 --score-batch 16 > "$out/bench-medtune-score.json" 2>> "$out/bench.err" &&
      result "bench medtune score bf16 16x512" "$(cat "$out/bench-medtune-score.json")"
  fi
  hf_case "score 16x512" "bench-hf-score.json" --score --batch 16 --seq "$seq"
  if in_time "decode"; then
    tmo 60 "$bin/bench_forward" "$big" --device "$gpu" --prompt-tokens 256 --decode-tokens 64 --repeats 3 \
      > "$out/bench-medtune-decode.json" 2>> "$out/bench.err" && result "bench medtune decode" "$(cat "$out/bench-medtune-decode.json")"
  fi
  hf_case "decode" "bench-hf-decode.json" --generate
  # The seed's QLoRA shape: r64 on all linears over an NF4 base (goal: <= 8 GiB); the anchor has
  # no NF4 and runs it over the bf16 base.
  train_case "bf16 r64 all nf4 8x512 ckpt=1" "bench-medtune-qlora.json" --precision bf16 --rank 64 --targets all \
    --base-quant nf4 --checkpointing 1 --steps 3
  hf_case "r64 all (bf16 base) 8x512 ckpt=1" "bench-hf-r64.json" --r 64 --targets all --batch 8 --seq "$seq" --ckpt
  # The same two steps within the goals' memory (max_device_memory: the micro-batch of 8 rows in
  # passes of fewer rows, the same gradients summed in another order): QLoRA within 8 GiB, r16
  # qkvo within HF's measured 15.3 GiB; device_passes in the JSON says how many passes.
  train_case "bf16 r64 all nf4 8x512 ckpt=1 max 8GiB" "bench-medtune-qlora-8gib.json" \
    --precision bf16 --rank 64 --targets all --base-quant nf4 --checkpointing 1 --steps 3 \
    --max-device-memory 8GiB
  train_case "bf16 r16 qkvo 8x512 ckpt=1 max 15.3GiB" "bench-medtune-ckpt1-15gib.json" \
    --precision bf16 --rank 16 --targets qkvo --checkpointing 1 --steps 3 \
    --max-device-memory 15.3GiB
  train_case "fp32 r16 qkvo 8x512 ckpt=1" "bench-medtune-fp32.json" --precision fp32 --rank 16 --targets qkvo \
    --checkpointing 1 --steps 2
  # Llama-3-8B shapes (GQA, 128k vocabulary) when at least two minutes remain for them.
  if [ "$rehearsal" != 1 ] && [ $(( $(date +%s) - t_all + 120 )) -lt "$budget" ]; then
    rm -rf "$big"
    big=$work/llama3-8b
    arch=llama3-8b
    if tmo 100 "$bin/medtune-random-llama" "$big" --arch llama3-8b --dtype bf16 > "$out/bench-make-8b.log" 2>&1; then
      train_case "llama3-8b bf16 r16 all 8x512 ckpt=1" "bench-medtune-8b.json" --precision bf16 --rank 16 --targets all \
        --checkpointing 1 --steps 3
      hf_case "llama3-8b r16 all 8x512 ckpt=1" "bench-hf-8b.json" --r 16 --targets all --batch 8 --seq "$seq" --ckpt
    else
      skipped="$skipped llama3-8b(make failed: bench-make-8b.log)"
    fi
  else
    skipped="$skipped llama3-8b"
  fi
  record bench done $(( $(date +%s) - t )) "results.jsonl (HF anchor: ${anchor:-not importable here}; skipped for time:${skipped:- none})"
  fi  # bench
else
  record bench FAILED $(( $(date +%s) - t )) "medtune-random-llama: bench-make.log"
fi
fi  # profile, bench
rm -rf "$work"

echo
echo "== summary ($(date -u +%H:%M:%S) UTC, $(( $(date +%s) - t_all )) s in all; logs, results.jsonl and summary in $final)"
[ "$rehearsal" = 1 ] && summary+=("REHEARSAL on the CPU: the script's logic only, nothing about a GPU")
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
pack
exit "$failed"
