#!/usr/bin/env bash
# GPU check (under 5 minutes on one GPU): see benchmarks/gpu_check.py. Run from the repo root.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
"$PY" -m cadenza doctor --device cuda --no-smoke || { echo "cadenza doctor found a blocking problem (above)"; exit 2; }
exec "$PY" benchmarks/gpu_check.py --device cuda "$@"
