#!/usr/bin/env bash
# `medtune doctor` on the build under test: it lists the CPU backend (threads, SIMD, BLAS) and,
# in a CPU-only build, says plainly that no GPU backend was compiled in and how to build one; in
# a GPU build it lists that backend (its op tests need a device: not run here, --no-op-tests).
# Usage (CTest): doctor.sh MEDTUNE_BIN PARITY_BIN
set -u
MT=$1
fail=0

check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

text=$("$MT" doctor --no-op-tests 2>&1)
rc=$?
echo "$text"
check "doctor exits 0 (rc $rc)" test "$rc" -eq 0
check "text names the cpu backend and its BLAS" grep -qE "^  cpu .*OpenMP threads" <<<"$text"
check "text names OpenBLAS" grep -q "BLAS: OpenBLAS" <<<"$text"

json=$("$MT" doctor --json --no-op-tests 2>/dev/null)
rc=$?
check "doctor --json exits 0 (rc $rc)" test "$rc" -eq 0
# Parsed with python3 when present (it is on the development machine), else structural greps.
if command -v python3 >/dev/null; then
  check "json: cpu backend with threads >= 1, SIMD lists, BLAS" python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
cpu = r["backends"][0]
assert cpu["name"] == "cpu" and cpu["threads"] >= 1, cpu
assert isinstance(cpu["simd"]["compiled"], list) and isinstance(cpu["simd"]["detected"], list)
# every extension the binary was compiled for must be on this CPU, or it would not have run
assert set(cpu["simd"]["compiled"]) <= set(cpu["simd"]["detected"]), cpu["simd"]
assert cpu["blas"]["library"] == "OpenBLAS" and cpu["blas"]["config"], cpu["blas"]
# run-time dispatch (core/cpu_features.h): the path taken is one this CPU can take
simd = cpu["simd"]
assert "scalar" in simd["kernel_paths"] and simd["active_path"] in simd["kernel_paths"], simd
assert simd["compiled_baseline"] and "int8" in simd["precisions"], simd
# vendor, family and model as /proc/cpuinfo gives them (where the kernel lists them)
try:
    info = open("/proc/cpuinfo").read().split("\n\n")[0]
    fields = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
except OSError:
    fields = {}
if "cpu family" in fields and "model" in fields:
    assert simd["cpu"]["family"] == int(fields["cpu family"]) and simd["cpu"]["model"] == int(fields["model"]), (simd["cpu"], fields)
    vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(fields.get("vendor_id"), "other")
    assert simd["cpu"]["vendor"] == vendor, (simd["cpu"], fields)
# --precision auto: fp32 where results are compared with transformers; int8 for generate and
# serve on a quantized base, unless MEDTUNE_ISA caps the int8 kernels to the scalar reference
assert simd["precision_auto"]["eval train medtune-parity"] == "fp32", simd
want = "fp32" if simd["active_path"] == "scalar" else "int8"
assert simd["precision_auto"]["generate serve"].startswith(want + " "), simd
# the int8 attention names its kernel: transposed-key scores for prompts where AVX-512 is taken
attention = simd["kernels"]["int8 attention (fixed order, half KV cache)"]
assert ("transposed keys" in attention) == (simd["active_path"] == "avx512vnni"), attention
assert r["ok"] is True
if r["gpu_compiled"]:
    assert r["backends"][1]["name"] in ("cuda", "hip"), r["backends"]
else:
    assert len(r["backends"]) == 1
    assert "no GPU backend was compiled" in r["gpu_hint"] and "MEDTUNE_GPU=cuda" in r["gpu_hint"]
' <<<"$json"
  gpu=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["gpu_compiled"])' <<<"$json")
else
  check "json: names the cpu backend" grep -q '"name": "cpu"' <<<"$json"
  gpu=$(grep -q '"gpu_compiled": true' <<<"$json" && echo True || echo False)
fi
if [ "$gpu" = False ]; then
  check "CPU-only build says so, and how to build a GPU one" \
    grep -q "no GPU backend was compiled into this build.*-DMEDTUNE_GPU=cuda" <<<"$text"
fi

# MEDTUNE_ISA caps the kernel path; a path this CPU lacks (or an unknown name) is refused by name.
text=$(MEDTUNE_ISA=scalar "$MT" doctor --no-op-tests 2>&1)
check "MEDTUNE_ISA=scalar: doctor takes the scalar path" grep -q "taking: scalar (capped by MEDTUNE_ISA)" <<<"$text"
check "MEDTUNE_ISA=scalar: the int8 attention over the keys' rows" \
  grep -q "int8 attention (fixed order, half KV cache): avx2 loops over the keys' rows" <<<"$text"
text=$(MEDTUNE_ISA=avx3 "$MT" doctor --no-op-tests 2>&1)
rc=$?
check "MEDTUNE_ISA=avx3 exits 2 (rc $rc)" test "$rc" -eq 2
check "MEDTUNE_ISA=avx3 is named" grep -q "MEDTUNE_ISA: 'avx3' is not a kernel path" <<<"$text"

# Unknown flags are usage errors (exit 2), as for every subcommand.
"$MT" doctor --no-such-flag >/dev/null 2>&1
rc=$?
check "unknown flag exits 2 (rc $rc)" test "$rc" -eq 2

exit $fail
