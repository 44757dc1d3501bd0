#!/usr/bin/env bash
# The main job on the embedded default: set up, build, then run the bundled real model
# (SmolLM2-135M-Instruct) on a clinical question: model info, and a streamed answer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
./build/medtune info "$MODEL"
echo
QUESTION="A 45-year-old man has crushing chest pain radiating to his left arm for 30 minutes. What is the first test to order?"
echo "Q: $QUESTION"
echo -n "A: "
./build/medtune generate "$MODEL" --chat --system "You are a clinician. Answer briefly." -p "$QUESTION" -n 64
