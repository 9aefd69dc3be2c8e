#!/usr/bin/env bash
# The main job: trains the agent on the real market data (examples/data) and prints its
# out-of-sample result. On the GPU when there is one, else on the CPU at a small size.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/examples/foxhunt-trainer "$@"
