#!/usr/bin/env bash
# The one prepared GPU run: every CUDA path of cadenza in under 8 minutes on one GPU, its JSON in
# $OUT/gpu_check.json ($OUT defaults to benchmarks/results/gpu). What each entry means:
# docs/environment.md, "The GPU check". Run from anywhere:
#   bash benchmarks/gpu_check.sh             # on a GPU machine
#   bash benchmarks/gpu_check.sh --dry-run   # the same code paths on CPU at tiny sizes
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
# A machine whose Python has torch and cadenza's dependencies but not cadenza runs it from here.
"$PY" -c "import cadenza" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# gpu_check.py starts no check after 420 s; this stops whatever still runs at 480 s.
rc=0
timeout 480 "$PY" benchmarks/gpu_check.py --out "${OUT:-benchmarks/results/gpu}" "$@" || rc=$?
# Then the images' GPU path, on its own clock: the runtime image built on the real base where a
# registry is reachable (it says so where not). Not in a dry run.
case " $* " in *" --dry-run "*) ;; *) OUT="${OUT:-benchmarks/results/gpu}" bash benchmarks/gpu_image_check.sh || rc=1 ;; esac
exit $rc
