#!/usr/bin/env bash
# Every program of the build runs medtune's two startup checks (CMakeLists.txt, --undefined):
#   medtune_check_cpu_baseline  in each program with medtune code (compiled for the x86 baseline)
#   medtune_select_blas_core    in each program that loads OpenBLAS (its kernels for this CPU)
# Both are constructors nothing calls; before session 54 only `medtune` and test_ops linked the
# OpenBLAS one, and the benchmarks ran on OpenBLAS's SSE3 kernels on an Intel CPU it misdetects.
# Usage: startup_checks_linked.sh PROGRAM...
set -euo pipefail
failed=0
checked=0
for program in "$@"; do
  if [ ! -f "$program" ]; then
    echo "not built: $program"
    failed=1
    continue
  fi
  symbols=$(nm --defined-only "$program" 2>/dev/null || true)
  if grep -q ' _ZN7medtune' <<<"$symbols" && ! grep -q ' medtune_check_cpu_baseline$' <<<"$symbols"; then
    echo "missing medtune_check_cpu_baseline: $program"
    failed=1
  fi
  if readelf -d "$program" | grep -q -E 'NEEDED.*\[lib(open)?blas' &&
    ! grep -q ' medtune_select_blas_core$' <<<"$symbols"; then
    echo "missing medtune_select_blas_core: $program (it loads OpenBLAS)"
    failed=1
  fi
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || { echo "no programs given"; exit 1; }
[ "$failed" -eq 0 ] && echo "startup checks linked into all $checked programs"
exit "$failed"
