#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build with every test (including the
# real-model tests), then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the fuzzers over their committed corpora (regression only, no new fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MEDTUNE_SMOLLM2_GGUF=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f ../shared/data/medqa/dev.jsonl ]; then
  export MEDTUNE_MEDQA_DEV=$PWD/../shared/data/medqa/dev.jsonl
fi
jobs=$(nproc)

echo "== Release build and all tests"
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== Unit tests under AddressSanitizer + UBSan"
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh -DMEDTUNE_SANITIZE=ON -DMEDTUNE_NATIVE=ON
# OpenBLAS and OpenMP keep thread-local pools alive at exit; those are not our leaks.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L cpu -LE slow

echo "== Fuzz targets over their corpora"
CC=clang-14 CXX=clang++-14 BUILD_DIR=build-fuzz bash scripts/build.sh -DMEDTUNE_FUZZ=ON
for f in build-fuzz/fuzz/fuzz_*; do
  name=$(basename "$f"); corpus=fuzz/corpus/${name#fuzz_}
  "$f" -runs=0 "$corpus" >/dev/null 2>&1 || { echo "fuzz regression failed: $name"; "$f" -runs=0 "$corpus"; exit 1; }
  echo "$name: corpus $(ls "$corpus" | wc -l) inputs ok"
done
