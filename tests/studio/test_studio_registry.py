"""The studio's model registry: runs that appear while the server runs are offered, and an unchanged
runs folder is not walked again on every request."""

from __future__ import annotations

import os
import shutil
import time

from cadenza.models import checkpoint as ckpt
from cadenza.studio.registry import Registry


def settled(root) -> None:
    """Date every folder under `root` a minute back, as if the runs had been written long ago."""
    past = time.time() - 60
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def run_ids(registry: Registry) -> list[str]:
    return [e.id for e in registry.entries() if e.kind == "run"]


def test_a_new_run_or_checkpoint_is_offered_and_an_unchanged_folder_is_not_rescanned(studio_runs, tmp_path,
                                                                                       monkeypatch):
    runs = tmp_path / "runs"
    shutil.copytree(studio_runs, runs)
    settled(runs)
    reads = []
    read_meta = ckpt.read_meta
    monkeypatch.setattr(ckpt, "read_meta", lambda d: reads.append(d) or read_meta(d))
    registry = Registry(runs)
    assert run_ids(registry) == ["run:tiny"]
    scanned = len(reads)
    for _ in range(3):  # a page that polls the model list
        assert run_ids(registry) == ["run:tiny"]
    assert len(reads) == scanned  # nothing read again

    shutil.copytree(runs / "tiny", runs / "group" / "second")  # a run finishes while the server runs
    assert run_ids(registry) == ["run:group/second", "run:tiny"]

    settled(runs)
    step = registry.get("run:tiny").path
    newer = step.with_name("step-999999")
    shutil.copytree(step, newer)  # the run saves a later checkpoint, as good as the best
    assert registry.get("run:tiny").path == newer
