#!/bin/bash
# Prompt and decode tokens/s of llama.cpp (llama-cpp-python) and medtune at fp32, int8 and bf16 on
# the same GGUFs, every engine alternating within each round (a shared machine's load then slows
# them alike). Prints one line per engine and round; bench/forward_rounds_summary.py gives medians
# and per-round ratios to llama.cpp.
#
#   bench/forward_rounds.sh VENV_PYTHON ROUNDS MODEL.gguf [MODEL.gguf ...] > rounds.log
# Run from the repository root after scripts/build.sh; unset OMP_WAIT_POLICY as a user's shell has it.
# On a CPU with AMX the peer must be built without its AMX kernels (they crash there, below):
# bench/setup_peers.sh does so (VENV_PYTHON = DIR/llama/bin/python).
set -euo pipefail
py=$1 rounds=$2
shift 2
for r in $(seq 1 "$rounds"); do
  for m in "$@"; do
    n=$(basename "$m")
    # The peer's failure is reported, not left as an empty line: llama.cpp's AMX build segfaults
    # in ggml_backend_amx_mul_mat on some Intel hosts (session 37; llama.cpp issue 20824).
    if out=$("$py" bench/llama_cpp_forward.py "$m" 256 64 2 2 2>/tmp/llama_cpp_forward.err); then
      echo "r$r $n llama.cpp $(tail -1 <<<"$out")"
    else
      echo "r$r $n llama.cpp FAILED (exit $?): $(tail -1 /tmp/llama_cpp_forward.err)"
    fi
    for p in fp32 int8 bf16; do
      build/bench/bench_forward "$m" --prompt-tokens 256 --decode-tokens 64 --repeats 2 --threads 2 --precision $p |
        python3 -c "import json,sys; j=json.load(sys.stdin); print('r$r $n $p prompt', round(j['prompt_tokens_per_s_median'],1), 'decode', round(j['decode_tokens_per_s_median'],1))"
    done
  done
done
