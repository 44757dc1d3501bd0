#!/usr/bin/env bash
# Soak of `medtune serve`: 32 concurrent clients x 100 rounds (3,200 streaming requests, with the
# drops and garbage of serve_load.sh); memory, threads and fds must not grow. Minutes: labelled
# soak, outside the default CI run (ctest -L soak runs it).
set -euo pipefail
exec bash tests/e2e/serve_load.sh "${1:?usage: soak_serve.sh MEDTUNE_BIN [PARITY_BIN]}" "${2:-}" 32 100
