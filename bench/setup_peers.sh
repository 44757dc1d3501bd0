#!/bin/bash
# The peers of the side-by-side benchmarks, pinned to the versions BENCHMARKS.md quotes, in two
# virtual environments under DIR (default build/peers), for bench/cpu_goals.py and the other
# bench/*.py scripts:
#   DIR/torch   torch (PyPI's CPU+CUDA wheel; the CUDA libraries are downloaded, not used),
#               transformers, peft, tokenizers, gguf (transformers' GGUF loader)
#   DIR/llama   llama-cpp-python, compiled here for this CPU: GGML_NATIVE=ON, except on a CPU with
#               AMX, where llama.cpp's AMX kernels crash (BENCHMARKS.md, session 37; llama.cpp issue
#               20824): there the AVX-512 kernels without AMX
#
#   bash bench/setup_peers.sh [DIR]
# An environment that already imports its packages is kept. Needs PyPI; llama.cpp's compile
# takes 10-20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/peers}
mkdir -p "$dir"

if ! "$dir/torch/bin/python" -c "import torch, transformers, peft, gguf" 2>/dev/null; then
  rm -rf "$dir/torch"
  python3 -m venv "$dir/torch"
  "$dir/torch/bin/pip" install -q torch==2.15.0 transformers==5.25.0 peft==0.21.2 tokenizers gguf numpy
fi

if ! "$dir/llama/bin/python" -c "import llama_cpp" 2>/dev/null; then
  rm -rf "$dir/llama"
  python3 -m venv "$dir/llama"
  if grep -qw amx_tile /proc/cpuinfo; then
    cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
    cmake_args+=" -DGGML_AVX512_VBMI=ON -DGGML_AVX_VNNI=ON"
  else
    cmake_args="-DGGML_NATIVE=ON"
  fi
  CMAKE_ARGS="$cmake_args" "$dir/llama/bin/pip" install -q --no-cache-dir llama_cpp_python==0.3.36 numpy
fi

echo "peers in $dir:"
"$dir/torch/bin/python" -c "import torch, transformers, peft; print('  torch', torch.__version__, \
'transformers', transformers.__version__, 'peft', peft.__version__)"
"$dir/llama/bin/python" -c "import llama_cpp; print('  llama-cpp-python', llama_cpp.__version__)"
