"""benchmarks/gpu_check.py --dry-run: the GPU check's own code paths on CPU at tiny sizes, so the
one run a GPU machine gets does not fail on the script itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    env = {**os.environ, "CADENZA_CACHE": str(tmp_path / "cache"), "CADENZA_NO_COMPILE": "1", "OMP_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=env)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = report["checks"]
    assert r.returncode == 0, {k: v for k, v in checks.items() if v["status"] == "fail"} or r.stderr[-3000:]
    assert report["dry_run"] and list(checks) == ["environment", "matmul_peak", "store", "train_resume", "precisions",
                                                  "lstm_bf16", "attention_2048", "generate", "compile", "ddp"]
    assert {k for k, v in checks.items() if v["status"] == "skipped"} == {"compile", "ddp"}
    assert all(v["why"] for v in checks.values() if v["status"] == "skipped")
    assert checks["train_resume"]["bit_exact"]  # on CPU a resumed run reproduces the uninterrupted one
    assert checks["precisions"]["skipped"] == ["fp16"]  # CUDA only, said so
    assert not (tmp_path / "work").exists()  # only the JSON is left


def test_the_image_step_says_why_it_skips_where_it_cannot_build(tmp_path):
    # A machine with no container engine on PATH: a reasoned skip, exit 0, never a failed GPU check.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "mkdir", "printf", "cat", "git", "curl", "timeout"):
        if (found := shutil.which(tool)):
            (bin_dir / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(bin_dir), "OUT": str(tmp_path / "out")}
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_image_check.sh")], capture_output=True, text=True,
                       timeout=60, env=env)
    report = json.loads((tmp_path / "out" / "image_check.json").read_text())
    assert r.returncode == 0 and report["status"] == "skipped" and "docker nor podman" in report["detail"]
