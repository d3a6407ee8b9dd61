"""The images, built and run: `tools/images_check.py` builds both targets of docker/Dockerfile,
unedited, on a CPU stand-in for the PyTorch base, and runs them (help, doctor, a rendered generation
on the compiled step, Jupyter, TensorBoard, training, the Docker tests inside, the commit). CI
installs buildah, podman and mmdebstrap (.ci/run); elsewhere the test skips, saying why."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("buildah", "podman", "mmdebstrap")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="buildah, podman and mmdebstrap are not installed (.ci/run installs them)")
def test_both_images_build_from_the_dockerfile_and_run(tmp_path):
    out = tmp_path / "images.json"
    r = subprocess.run([sys.executable, str(REPO / "tools" / "images_check.py"), "--require", "--out", str(out)],
                       capture_output=True, text=True, timeout=2400)
    assert out.is_file(), r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["failed"] == [], result
    assert r.returncode == 0
