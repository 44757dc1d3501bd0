#!/usr/bin/env python3
"""Writes llama.cpp-quantized variants of a GGUF with llama.cpp's own quantizer (llama-cpp-python).

The benchmarks and accuracy runs against llama.cpp use files that llama.cpp itself wrote, so that
both programs read the same blocks. The bundled model is Q4_1; requantizing it directly would
quantize Q4_1's rounding again, so the F16 file is made first and every other type from it.

Usage: llama_quantize.py SRC.gguf OUT_DIR TYPE [TYPE ...]
  TYPE is a llama.cpp ftype name without its prefix: F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M
  Q4_K_S Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS ... (llama_cpp.LLAMA_FTYPE_MOSTLY_<TYPE>).
Writes OUT_DIR/<stem>.<TYPE>.gguf; the F16 intermediate is OUT_DIR/<stem>.F16.gguf.
"""
import ctypes
import os
import re
import sys


def output_path(src: str, out_dir: str, ftype_name: str) -> str:
    """OUT_DIR/<stem>.<TYPE>.gguf for SRC: "Llama-3.1-8B.Q4_1.gguf" -> stem "Llama-3.1-8B" (the
    extension and a type suffix go, other dots stay). Importable without llama_cpp (cpu_goals.py)."""
    stem = re.sub(r"\.(F16|F32|BF16|I?Q\d\w*)$", "", os.path.basename(src).removesuffix(".gguf"))
    return os.path.join(out_dir, f"{stem}.{ftype_name}.gguf")


def quantize(src: str, dst: str, ftype_name: str) -> None:
    import llama_cpp  # here, so that output_path imports without it
    ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype_name, None)
    if ftype is None:
        sys.exit(f"llama_quantize.py: unknown type {ftype_name!r} (no LLAMA_FTYPE_MOSTLY_{ftype_name})")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        sys.exit(f"llama_quantize.py: llama_model_quantize({src} -> {ftype_name}) returned {rc}")
    print(dst)


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    src, out_dir, types = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    f16 = output_path(src, out_dir, "F16")
    if not os.path.exists(f16):
        quantize(src, f16, "F16")
    for t in types:
        if t != "F16":
            quantize(f16, output_path(src, out_dir, t), t)


if __name__ == "__main__":
    main()
