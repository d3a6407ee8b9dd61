"""The note vocabulary's masks without given notes, as a plain generation of the shipped model runs
them (a style, the task flag, BOS): every sequence drawn under them is well formed and keeps the
longest-note and polyphony limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadenza.data.tokenizers.note_grid import DURATIONS
from cadenza.data.tokenizers.notes import NoteTokenizer
from tests.conftest import draw_under_masks

base = NoteTokenizer()
tok = base.with_styles(["bach", "palestrina", "irish", "german", "chinese"])


def draw(rows: int, steps: int, seed: int, **limits) -> list[list[int]]:
    """`steps` tokens per row, each drawn at random among the ones the masks allow."""
    g = tok.grammar(rows, "cpu", **limits)
    g.observe(torch.tensor([tok.window_prefix("bach") + [tok.bos_id]] * rows))
    return draw_under_masks(g, rows, steps, seed).tolist()


@pytest.mark.parametrize("cap, longest", [(None, None), (3, 1.0), (6, 0.25)])
def test_no_sequence_drawn_without_given_notes_is_ill_formed(cap, longest):
    for row in draw(8, 1000, seed=cap or 0, max_polyphony=cap, max_note_seconds=longest, allow_eos=False):
        assert not set(row) & {tok.eos_id, tok.pad_id, tok.bos_id, *tok.style_prefix("bach")}
        events, controls, report = base.decode_grid([base.autoregress_id] + row)
        assert not len(controls) and report.extra["durations_without_note"] == 0
        assert report.repairs <= 1  # at most a note cut by the end of the draw
        assert np.all(np.diff(events.onset) >= 0) and events.onset.min(initial=0) >= 0
        if longest is not None:
            steps = longest * base.steps_per_second
            assert np.all((DURATIONS[events.duration] <= steps) | (events.duration == 0))
        voice = events.program * 128 + events.pitch
        order = np.lexsort((events.onset, voice))
        v, on, end = voice[order], events.onset[order], events.end[order]
        assert not ((v[1:] == v[:-1]) & (on[1:] < end[:-1])).any()  # no voice sounds twice at once
        if cap is not None:
            for t in events.onset:
                assert ((events.onset <= t) & (events.end > t)).sum() <= cap


def test_eos_ends_only_a_whole_note():
    """Where EOS is allowed, the rows that draw it have no note left open."""
    ended = 0
    for row in draw(8, 400, seed=5):
        if tok.eos_id in row:
            ended += 1
            _, _, report = base.decode_grid([base.autoregress_id] + row[:row.index(tok.eos_id)])
            assert report.repairs == 0
    assert ended  # with 718 ids and one EOS, some of 8 rows of 400 draw it


@pytest.mark.parametrize("programs", [[0], [40, 42], [128]])
def test_samples_keep_to_the_programs_asked_for(programs):
    # a style's samples use its own instruments: no note on a program it was not asked for, even
    # before any INSTRUMENT token (the events' program starts at 0, which [40, 42] leaves out)
    for row in draw(8, 600, seed=1, programs=programs, allow_eos=False):
        events, _, _ = base.decode_grid([base.autoregress_id] + row)
        assert len(events) and set(events.program.tolist()) <= set(programs)
