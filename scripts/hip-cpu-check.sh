#!/usr/bin/env bash
# Runs GPU op cases on the CPU under HIP-CPU: the attention cases (tests/gpu/cases_attention.cpp:
# the tiled kernel, the GEMM attention, the split-key decode kernel) and the decode GEMV's
# (tests/gpu/cases_gemv.cpp); tests/gpu/hip_cpu/README.md says what that checks and what it
# cannot. Not part of CI (HIP-CPU is not packaged).
#   scripts/hip-cpu-check.sh HIPCPU_DIR [FILTER]
# HIPCPU_DIR: a copy of https://github.com/ROCm/HIP-CPU (its include/ is used). Needs libtbb-dev
# and the CPU build in build/ (its libmedtune_ops.a and libmedtune_core.a: the references).
set -euo pipefail
cd "$(dirname "$0")/.."
hipcpu=${1:?usage: scripts/hip-cpu-check.sh HIPCPU_DIR [FILTER]}
filter=${2:-}
[[ -f "$hipcpu/include/hip/hip_runtime.h" ]] || { echo "no include/hip/hip_runtime.h under $hipcpu"; exit 2; }
for lib in build/libmedtune_ops.a build/libmedtune_core.a; do
  [[ -f $lib ]] || { echo "$lib missing: build the project first (scripts/build.sh)"; exit 2; }
done
out=build-hip-cpu
mkdir -p "$out"
# An ordinary C++ compiler has no triple chevrons: kernel<<<g, b, shmem, stream>>>(args) becomes
# hipLaunchKernelGGL(kernel, g, b, shmem, stream, args), kernel<T> too. Every launch in these files
# has all four.
for f in attention attention_gemm attention_split gemv runtime; do
  sed -E 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<([^,]+), ([^,]+), ([^,]+), ([^>]+)>>>\(/hipLaunchKernelGGL(\1, \3, \4, \5, \6, /' \
    "src/gpu/$f.cu" > "$out/$f.cpp"
  if grep -q '<<<' "$out/$f.cpp"; then echo "src/gpu/$f.cu: a launch the rewrite missed"; exit 1; fi
done
# HIP-CPU's device properties have no gcnArchName; its stream-creation flags are an enum.
sed -i -e 's/d\.arch = prop\.gcnArchName;/d.arch = "hip-cpu";/' \
  -e 's/gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking)/gpuStreamCreateWithFlags(\&s, static_cast<hipStreamFlags>(gpuStreamNonBlocking))/' \
  "$out/runtime.cpp"
flags=(-std=c++20 -O2 -DMEDTUNE_GPU_HIP -Itests/gpu/hip_cpu -I"$hipcpu/include" -Isrc -Itests/gpu -Itests)
objs=()
for src in "$out/attention.cpp" "$out/attention_gemm.cpp" "$out/attention_split.cpp" "$out/gemv.cpp" \
           "$out/runtime.cpp" tests/gpu/hip_cpu/host_blas.cpp tests/gpu/hip_cpu/main.cpp \
           tests/gpu/op_test.cpp tests/gpu/run.cpp tests/gpu/cases_attention.cpp tests/gpu/cases_gemv.cpp; do
  obj="$out/$(basename "${src%.*}").o"
  # -w: HIP-CPU's kernels by value draw "unsupported argument type for simd" notes from GCC.
  g++ "${flags[@]}" -w -c "$src" -o "$obj"
  objs+=("$obj")
done
g++ -o "$out/hip_cpu_cases" "${objs[@]}" build/libmedtune_ops.a build/libmedtune_core.a \
  -lopenblas -lgomp -ltbb -lpthread
"$out/hip_cpu_cases" "$filter"
