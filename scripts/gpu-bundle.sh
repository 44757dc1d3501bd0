#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on the GPU machine, from a CUDA build made here:
#   bash scripts/gpu-bundle.sh [BUILD_DIR]     (default build-gpu-cuda, as gpu-compile-check.sh makes it)
# writes BUILD_DIR/medtune-gpu-bundle.tar.xz: bin/ (medtune, medtune-parity, medtune-random-llama,
# bench_train_step, bench_forward, test_gpu_ops, test_core, test_ops) and lib/ (the shared libraries
# they need that a bare GPU image lacks: OpenBLAS, ICU, yaml-cpp, PCRE2, libcrypto, libgomp,
# libgfortran...; not glibc or libstdc++, which the GPU image has in newer versions, nor cuBLAS,
# which comes with its CUDA toolkit).
# The GPU machine has no network and none of the Debian packages the project builds against, so
# the binaries travel: pass the tarball in the device tool's `carry` (64 MiB limit; the script
# fails above it). Built with MEDTUNE_NATIVE=OFF (gpu-compile-check.sh does it so): the GPU
# machine's CPU may lack what this one has.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu-cuda}
limit=$((64 * 1024 * 1024))
# test_core and test_ops: the CPU kernels' unit tests, for the GPU machine's host CPU (gpu-check.sh's
# stage cpu); source_dir: where they look for their fixtures (the folder this bundle was built from).
bins=(medtune medtune-parity medtune-random-llama bench/bench_train_step bench/bench_forward tests/gpu/test_gpu_ops
  tests/test_core tests/test_ops)
if ! grep -q "MEDTUNE_NATIVE:BOOL=OFF" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "gpu-bundle: $build was not configured with -DMEDTUNE_NATIVE=OFF (run scripts/gpu-compile-check.sh)"
  exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/medtune-gpu/bin" "$stage/medtune-gpu/lib"
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "gpu-bundle: $build/$b is missing (build it first)"; exit 1; }
  cp "$build/$b" "$stage/medtune-gpu/bin/"
done
# The non-system libraries the binaries load, resolved here.
for b in "$stage"/medtune-gpu/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.* | libcublas* | libcublasLt* | libcuda.so.*) ;;
    *) cp -L "$lib" "$stage/medtune-gpu/lib/" ;;
  esac
done
pwd > "$stage/medtune-gpu/source_dir"
git rev-parse HEAD > "$stage/medtune-gpu/commit" 2>/dev/null || echo unknown > "$stage/medtune-gpu/commit"
out="$build/medtune-gpu-bundle.tar.xz"
tar -C "$stage" -cf - medtune-gpu | xz -T0 -6 > "$out"
size=$(stat -c %s "$out")
echo "gpu-bundle: $out, $((size / 1024 / 1024)) MiB ($(ls "$stage/medtune-gpu/lib" | wc -l) libraries)"
if [ "$size" -gt "$limit" ]; then
  echo "gpu-bundle: larger than the device tool's 64 MiB carry limit"
  exit 1
fi
