#!/usr/bin/env bash
# NF4 against the live bitsandbytes package, when it is installed (exit 77 = skip otherwise):
# tools/make_nf4_fixtures.py --check re-runs bnb's CPU quantize/dequantize on every fixture input
# and compares with the committed tests/fixtures/nf4/ files byte for byte; test_core's Nf4 suite
# compares medtune with those same files, so together they tie medtune to the live package.
# Usage: bash tests/e2e/nf4_live_bnb.sh MEDTUNE_BIN PARITY_BIN (binaries unused).
set -uo pipefail
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
# TORCHDYNAMO_DISABLE: bnb then dequantizes odd-length rows eagerly instead of through
# torch.compile (same fp32 ops; both were checked to give identical bytes), 15 s faster.
CUDA_VISIBLE_DEVICES="" TORCHDYNAMO_DISABLE=1 python3 tools/make_nf4_fixtures.py --check
