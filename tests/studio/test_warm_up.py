"""The studio builds the compiled decode step in the background; jobs use it once it is there."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from cadenza.generation import compiled
from cadenza.studio.registry import Registry
from cadenza.studio.runner import warm_up


def test_warm_up_does_nothing_when_compiling_is_off(studio_runs, monkeypatch, tmp_path):
    monkeypatch.setenv("CADENZA_NO_COMPILE", "1")
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path))
    status = {}
    warm_up(Registry(studio_runs), "run:tiny", status=status)
    assert not (tmp_path / "decode").exists()
    assert status["compiled_step"].startswith("eager: ")  # /api/health says why, so nobody waits for it


def test_the_warm_up_renders_audio_as_a_job_does_before_the_first_job(studio_runs, monkeypatch, tmp_path):
    from cadenza.studio import runner

    monkeypatch.setenv("CADENZA_NO_COMPILE", "1")
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path))
    rendered = []
    monkeypatch.setattr(runner, "synthesize", lambda notes, sample_rate: rendered.append((len(notes), sample_rate)))
    warm_up(Registry(studio_runs), "run:tiny")
    assert rendered == [(1, runner.Runner.sample_rate)]  # one note, at the rate the job's WAVs have


def test_a_warm_up_for_an_unknown_model_says_decoding_stays_eager(studio_runs, compiling, capsys):
    status = {}
    warm_up(Registry(studio_runs), "run:no-such-run", status=status)
    assert status["compiled_step"].startswith("eager: ")
    assert "decoding eagerly" in capsys.readouterr().err


def test_a_model_the_compiled_step_cannot_serve_is_reported_with_the_reason(studio_runs, compiling, monkeypatch):
    registry = Registry(studio_runs)
    load = registry.load

    def bf16(model_id):  # a copy: the registry's cached model stays as it is
        checkpoint = load(model_id)
        return dataclasses.replace(checkpoint, model=copy.deepcopy(checkpoint.model).to(torch.bfloat16))

    monkeypatch.setattr(registry, "load", bf16)
    status = {}
    warm_up(registry, "run:tiny", rows=(1,), status=status)
    assert status == {"compiled_step": "eager: the compiled decode step is built for float32 weights (torch.bfloat16)"}
    assert not (compiling / "decode").exists()


@pytest.mark.slow
def test_warm_up_builds_the_page_shapes_and_jobs_then_use_them(studio_runs, compiling):
    registry = Registry(studio_runs)
    status = {}
    warm_up(registry, "run:tiny", rows=(1,), status=status)
    assert status == {"compiled_step": "ready"}
    assert len(list((compiling / "decode").glob("step-*.pt2"))) == 1
    model = registry.load("run:tiny").model
    assert compiled.decoder(model, 1, build_missing=False) is not None  # ready for a one-row job
    assert compiled.decoder(model, 3, build_missing=False) is None  # other shapes decode eagerly


def _eager_input_shapes(model, run) -> set:
    """The (rows, length) of every input the eager model is fed while `run()` runs."""
    shapes = set()
    hook = model.register_forward_pre_hook(lambda _, args: shapes.add(tuple(args[0].shape)))
    try:
        run()
    finally:
        hook.remove()
    return shapes


def test_the_warm_up_feeds_the_window_slide_a_long_job_meets(studio_runs):
    """The server warms the eager shape of a window slide at start, so the kernels made for it on
    first use (and kept) are made then, not as memory growth during a later round of jobs: it must be
    the very shape a job past the context feeds."""
    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.sampler import generate_ids, warm_window_slide

    checkpoint = Registry(studio_runs).load("run:tiny")
    model, tok = checkpoint.model, checkpoint.tokenizer
    style = tok.styles[0]
    for rows in (1, 2):
        prompt = torch.tensor([tok.window_prefix(style) + [tok.bos_id]] * rows)
        past_context = SamplingConfig(max_tokens=2 * model.config.context, stop_at_eos=False)  # slides at least once
        job = _eager_input_shapes(model, lambda: generate_ids(model, prompt, tok, past_context,
                                                              seeds=list(range(rows))))
        warm = _eager_input_shapes(model, lambda: warm_window_slide(model, rows, keep=len(tok.window_prefix(None))))
        slide = {s for s in job if s[1] > prompt.shape[1]}  # a job's eager inputs: its prompt, then each slide
        assert len(warm) == 1 and warm == slide, (warm, job)
