#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build with every test (including the
# real-model tests), then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the fuzzers over their committed corpora (regression only, no new fuzzing), then the GPU
# compile check (the whole project built with -DMEDTUNE_GPU=cuda, the GPU sources with hipcc; no
# GPU needed; skipped with a message where the CUDA toolkit is absent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-hipcc
export MEDTUNE_SMOLLM2_GGUF=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f ../shared/data/medqa/dev.jsonl ]; then
  export MEDTUNE_MEDQA_DEV=$PWD/../shared/data/medqa/dev.jsonl
fi
jobs=$(nproc)
# CTest runs $jobs tests at once, each with OpenMP threads: with more threads than cores, spinning
# waits at OpenMP barriers cost far more than sleeping ones (docs/decisions/blas.md).
export OMP_WAIT_POLICY=passive
# ccache, in a cache of this checkout's own (a clean clone starts empty): the GPU compile check
# builds the same host sources as the Release build with the same flags, and ccache's preprocessor
# mode serves them from the Release build's objects (the GPU build's extra -D/-I change no
# preprocessed output of a file that does not use them). CMake reads these variables at configure.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/build-ccache} CCACHE_BASEDIR=$PWD CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
fi

echo "== Release build and all tests"
bash scripts/build.sh
# -LE soak: the 2,000-step stability run (tests/e2e/soak_2000_steps.sh) is run by hand: ctest -L soak
ctest --test-dir build --output-on-failure -j"$jobs" -LE soak | tee build/ctest.log
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' build/ctest.log | tail -n 1)
# The dispatched kernels' scalar paths too (core/cpu_features.h), which the CPU's best path hides.
echo "== core and ops unit tests on the scalar kernel path (MEDTUNE_ISA=scalar)"
MEDTUNE_ISA=scalar build/tests/test_core --gtest_brief=1
MEDTUNE_ISA=scalar build/tests/test_ops --gtest_brief=1
# On an AVX-512 CPU the int8 linear layers dispatch to the AVX-512 GEMM; these run the AVX2 one.
echo "== ops unit tests on the AVX2 kernel path (MEDTUNE_ISA=avx2)"
MEDTUNE_ISA=avx2 build/tests/test_ops --gtest_brief=1

echo "== Unit tests under AddressSanitizer + UBSan"
# Only the unit-test binaries (the stage runs nothing else); -g1 (line tables only) keeps the
# sanitizer's stack traces readable at a fraction of full debug info's compile time; -O1, as the
# AddressSanitizer documentation suggests, compiles faster than -O2 (this stage is CI's longest build).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DMEDTUNE_SANITIZE=ON -DMEDTUNE_NATIVE=ON >/dev/null
cmake --build build-asan -j"$jobs" --target unit_tests
# OpenBLAS and OpenMP keep thread-local pools alive at exit; those are not our leaks.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L cpu -LE "slow|e2e"

echo "== Fuzz targets over their corpora"
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEDTUNE_FUZZ=ON >/dev/null
fuzzers=$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
# shellcheck disable=SC2086
cmake --build build-fuzz -j"$jobs" --target $fuzzers
for name in $fuzzers; do
  f=build-fuzz/fuzz/$name
  corpus=fuzz/corpus/${name#fuzz_}
  "$f" -runs=0 "$corpus" >/dev/null 2>&1 || { echo "fuzz regression failed: $name"; "$f" -runs=0 "$corpus"; exit 1; }
  echo "$name: corpus $(ls "$corpus" | wc -l) inputs ok"
done
echo "== GPU compile check (scripts/gpu-compile-check.sh)"
if [ -x "${CUDACXX:-/usr/local/cuda/bin/nvcc}" ]; then
  bash scripts/gpu-compile-check.sh
else
  echo "SKIPPED: no CUDA toolkit (nvcc) on this machine; the CUDA and HIP compile check did not run"
fi
command -v ccache >/dev/null && ccache --show-stats | grep -E "Hits|Misses" || true
echo "all stages passed"
echo "${total:-0} passed, 0 failed"
