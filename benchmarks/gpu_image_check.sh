#!/usr/bin/env bash
# The GPU path of the images: build the runtime target on the real pytorch/pytorch base and run
# `cadenza doctor --device cuda` in it with the GPUs. Where no registry can be reached, or no
# Docker or podman is installed, it says so and exits 0. Writes $OUT/image_check.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results/gpu}"; mkdir -p "$OUT"
record() { printf '{"status": "%s", "detail": "%s", "seconds": %s}\n' "$1" "$2" "$SECONDS" > "$OUT/image_check.json";
           echo "image_check: $1 ($2)"; }
if command -v docker >/dev/null 2>&1; then ENGINE=docker; GPUS=(--gpus all)
elif command -v podman >/dev/null 2>&1; then ENGINE=podman; GPUS=(--device nvidia.com/gpu=all)
else record skipped "neither docker nor podman is installed"; exit 0; fi
# the registry answers 401 to an anonymous /v2/ when it is reachable
code=$(curl -s -o /dev/null -m 10 -w '%{http_code}' https://registry-1.docker.io/v2/ || true)
if [ "$code" != 401 ] && [ "$code" != 200 ]; then record skipped "no image registry reachable (docker.io answered '$code')"; exit 0; fi
if ! timeout 900 "$ENGINE" build -f docker/Dockerfile --target runtime -t cadenza:gpu-check \
     --build-arg GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)" . > "$OUT/image_build.log" 2>&1; then
  record failed "the runtime build failed: $OUT/image_build.log"; exit 1; fi
if timeout 300 "$ENGINE" run --rm "${GPUS[@]}" cadenza:gpu-check doctor --device cuda > "$OUT/image_doctor.txt" 2>&1; then
  record ok "built on the real base; doctor --device cuda passed in it ($OUT/image_doctor.txt)"
else record failed "doctor --device cuda failed in the image: $OUT/image_doctor.txt"; exit 1; fi
