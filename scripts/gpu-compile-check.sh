#!/usr/bin/env bash
# Compile check of the GPU backend on a machine WITHOUT a GPU (docs/gpu.md, issues #8 and #14).
#
#  (a) CUDA: configures the whole project with -DMEDTUNE_GPU=cuda for sm_80 and sm_90 (build dir
#      build-gpu-cuda) and MEDTUNE_NATIVE=OFF (its binaries travel to the GPU machine, whose CPU
#      may lack this one's instructions), builds medtune, medtune-parity, the benchmarks the GPU
#      check runs, the GPU op tests and test_model (the backend's tests; the other unit-test
#      binaries compile the same sources as the CPU build, so CI does not build them twice), checks
#      that the library holds machine code for both
#      architectures, runs the op-test binary, which must skip (exit 77) when no GPU is visible or
#      pass where one is, runs its NCCL host-only case (libnccl.so.2 loaded as medtune loads it,
#      ncclGetUniqueId) where the library is installed, checks that `medtune eval --device gpu`
#      names the missing GPU (exit 2),
#      and packs the bundle scripts/gpu-check.sh runs (scripts/gpu-bundle.sh).
#  (b) HIP: compiles every src/gpu/*.cu with Debian's hipcc (ROCm 5.2, clang 15) for gfx90a
#      (MI200) with warnings as errors (build dir build-gpu-hip), links the same op-test binary
#      against the HIP runtime (libamdhip64) with the backend-independent host objects of (a),
#      checks the gfx90a code objects are in it, and runs it (exit 77: no AMD GPU here).
#      hipBLAS: Debian 12 packages none, so src/gpu/blas.cu is compiled against
#      tests/gpu/hip_shim/hipblas/hipblas.h (the four hipBLAS calls we use, declared as hipBLAS
#      declares them) and the binary is linked with tests/gpu/hip_shim/hipblas_stub.cpp, whose
#      calls all return HIPBLAS_STATUS_NOT_SUPPORTED (that binary's GEMM cases could only fail).
#      What (b) does NOT cover: CMake's HIP language (CMake 3.25 looks for ROCm's CMake files
#      under /usr/lib/cmake, Debian installs them elsewhere), the real hipBLAS headers and
#      library (blas.cu is checked against the shim's declarations only), ROCm 6 headers, and
#      running anything on AMD.
#
# Needs nvcc (/usr/local/cuda) and hipcc (`apt-get install -y hipcc`). Prints each stage's time.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
t_start=$(date +%s)
stage_times=()
stamp() { stage_times+=("$1: $(( $(date +%s) - $2 )) s"); }

# Runs the op-test binary $1 where there may be no GPU: 77 (skip) and 0 (passed) are fine.
run_op_tests() {
  local rc=0
  "$1" --quick || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    echo "FAIL: $1 exited $rc"
    exit 1
  fi
}

echo "== (a) CUDA build of the whole project for sm_80 and sm_90"
t=$(date +%s)
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "nvcc not found at $nvcc (set CUDACXX)"; exit 1; }
"$nvcc" --version | tail -n 1
cmake -S . -B build-gpu-cuda -DMEDTUNE_GPU=cuda -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES="80;90" -DMEDTUNE_NATIVE=OFF >/dev/null
cmake --build build-gpu-cuda -j"$jobs" --target medtune medtune-parity medtune-random-llama bench_train_step \
  bench_forward test_gpu_ops test_model test_core test_ops
# Each cubin in the fat binaries records the ptxas options it was built with ("-arch sm_90 ...");
# the toolkit here has no cuobjdump. One cubin per .cu file and architecture is expected.
n_cu=$(ls src/gpu/*.cu | wc -l)
for arch in sm_80 sm_90; do
  n=$(strings build-gpu-cuda/libmedtune_gpu.a | grep -c -- "-arch $arch " || true)
  if [ "$n" -ne "$n_cu" ]; then
    echo "FAIL: $n $arch cubins in libmedtune_gpu.a, expected $n_cu (one per .cu file)"
    exit 1
  fi
done
echo "libmedtune_gpu.a holds sm_80 and sm_90 machine code for all $n_cu GPU sources"
run_op_tests build-gpu-cuda/tests/gpu/test_gpu_ops
# NCCL as medtune opens it (dlopen, every function looked up, ncclGetUniqueId): needs no GPU, so
# its host-only case runs here wherever the toolkit's libnccl.so.2 is installed.
if ldconfig -p 2>/dev/null | grep -q "libnccl.so.2 "; then
  rc=0
  nccl_out=$(build-gpu-cuda/tests/gpu/test_gpu_ops --collectives 2>&1) || rc=$?
  echo "$nccl_out" | head -n 3
  if { [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; } || ! echo "$nccl_out" | grep -q "^\[ OK \] collectives/unique_id"; then
    echo "FAIL: test_gpu_ops --collectives exited $rc"
    exit 1
  fi
else
  echo "NOTE: no libnccl.so.2 on this machine: the NCCL host check (test_gpu_ops --collectives) did not run"
fi
# The model path reaches the GPU backend: without a GPU it must say so and exit 2 (bad input).
rc=0
msg=$(build-gpu-cuda/medtune eval tests/fixtures/hf/llama_gqa/base --data data/fictional/test.jsonl \
  --device gpu --out build-gpu-cuda/eval-no-gpu 2>&1) || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "gpu:0: no GPU is visible" <<< "$msg"; then
  if [ "$rc" -ne 0 ]; then  # exit 0 only where a GPU is visible (and the eval then ran on it)
    echo "FAIL: medtune eval --device gpu exited $rc: $msg"
    exit 1
  fi
fi
echo "medtune eval --device gpu (no GPU here): exit $rc, ${msg##*medtune: }"
bash scripts/gpu-bundle.sh build-gpu-cuda
stamp "(a) CUDA configure + build + link + bundle" "$t"

echo "== (b) HIP compile (gfx90a, Debian hipcc) and link"
t=$(date +%s)
command -v hipcc >/dev/null || { echo "hipcc not found: apt-get install -y hipcc"; exit 1; }
hipcc --version 2>/dev/null | grep -m1 -i "HIP version" || true
mkdir -p build-gpu-hip/obj
# Same warnings as cmake/gpu.cmake gives the HIP build.
# -I tests/gpu/hip_shim: the hipBLAS declarations for blas.cu (see above). It would shadow a real
# hipBLAS in the default paths; Debian has none, the only case this script is for.
hip_flags=(-x hip --offload-arch=gfx90a -std=c++20 -O3 -DNDEBUG -DMEDTUNE_GPU_HIP -DMEDTUNE_WITH_GPU=1 -DMEDTUNE_GPU_WITH_COLLECTIVES=1
  -Isrc -Itests/gpu/hip_shim -Wall -Wextra -Wshadow -Wdouble-promotion -Wnull-dereference -Werror)
export HIP_FLAGS_STR="${hip_flags[*]}"
# One hipcc per file, $jobs at a time; any failure fails the stage.
ls src/gpu/*.cu | xargs -P "$jobs" -I{} sh -c \
  'f={}; o=build-gpu-hip/obj/$(basename "$f").o; hipcc $HIP_FLAGS_STR -c "$f" -o "$o" || exit 255'
echo "compiled $(ls build-gpu-hip/obj/*.o | wc -l) of $(ls src/gpu/*.cu | wc -l) GPU sources for gfx90a"
# Host objects of the op tests and the CPU references include no vendor header: reuse (a)'s.
host_dir=build-gpu-cuda/tests/gpu/CMakeFiles/test_gpu_ops.dir
echo "NOTE: src/gpu/blas.cu compiled against the hipBLAS SHIM (tests/gpu/hip_shim), linked with its"
echo "      stub: Debian's ROCm 5.2 has no hipBLAS. Real hipBLAS is not checked here."
# --offload-arch: without it hipcc asks rocm_agent_enumerator for the local GPU (none here).
hipcc --offload-arch=gfx90a -std=c++20 -Itests/gpu/hip_shim -Wall -Wextra -Werror \
  -c tests/gpu/hip_shim/hipblas_stub.cpp -o build-gpu-hip/hipblas_stub.o
# RCCL: src/gpu/collectives.cu compiles against tests/gpu/hip_shim/rccl/rccl.h (Debian has no
# RCCL) and needs no stub to link: it opens librccl at run time.
# The op-test libraries (cases, runner, AdamW reference: plain C++) come from (a) too; OpenBLAS for the CPU
# attention sources in libmedtune_ops.a (the same library (a) linked).
openblas=$(sed -n 's/^OPENBLAS_LIB:FILEPATH=//p' build-gpu-cuda/CMakeCache.txt)
hipcc --offload-arch=gfx90a -o build-gpu-hip/test_gpu_ops \
  "$host_dir"/main.cpp.o build-gpu-hip/obj/*.o build-gpu-cuda/tests/gpu/libmedtune_gpu_optest.a \
  build-gpu-cuda/tests/gpu/libmedtune_gpu_adamw_ref.a build-gpu-hip/hipblas_stub.o \
  build-gpu-cuda/libmedtune_ops.a build-gpu-cuda/libmedtune_core.a "$openblas" -lgomp
if ! roc-obj-ls build-gpu-hip/test_gpu_ops | grep -q "gfx90a"; then
  echo "FAIL: no gfx90a code object in build-gpu-hip/test_gpu_ops"
  exit 1
fi
echo "build-gpu-hip/test_gpu_ops links against libamdhip64 and holds gfx90a code objects"
run_op_tests build-gpu-hip/test_gpu_ops
stamp "(b) HIP compile + link" "$t"

echo "== GPU compile check passed"
for s in "${stage_times[@]}"; do echo "  $s"; done
echo "  total: $(( $(date +%s) - t_start )) s"
