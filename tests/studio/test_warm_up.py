"""The studio builds the compiled decode step in the background; jobs use it once it is there."""

from __future__ import annotations

import pytest

from cadenza.generation import compiled
from cadenza.studio.registry import Registry
from cadenza.studio.runner import warm_up


def test_warm_up_does_nothing_when_compiling_is_off(studio_runs, monkeypatch, tmp_path):
    monkeypatch.setenv("CADENZA_NO_COMPILE", "1")
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path))
    warm_up(Registry(studio_runs), "run:tiny")
    assert not (tmp_path / "decode").exists()


@pytest.mark.slow
def test_warm_up_builds_the_page_shapes_and_jobs_then_use_them(studio_runs, monkeypatch, tmp_path):
    monkeypatch.delenv("CADENZA_NO_COMPILE", raising=False)
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path))
    if compiled.available():
        pytest.skip(f"compiled decode step unavailable: {compiled.available()}")
    registry = Registry(studio_runs)
    warm_up(registry, "run:tiny", rows=(1,))
    assert len(list((tmp_path / "decode").glob("step-*.pt2"))) == 1
    model, _ = registry.load("run:tiny")
    assert compiled.decoder(model, 1, build_missing=False) is not None  # ready for a one-row job
    assert compiled.decoder(model, 3, build_missing=False) is None  # other shapes decode eagerly
