"""Anticipatory windows and the note vocabulary's masks: every real sequence passes the masks, and
no sequence drawn under them is ill formed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadenza.data.anticipation import AnticipationWindows, TaskMix, choose_controls, melody, top_line
from cadenza.data.midi import DRUMS, Notes
from cadenza.data.prepare import prepare
from cadenza.data.requests import accompany_request, infill_request
from cadenza.data.store import TokenStore
from cadenza.data.tokenizers.note_grid import DURATIONS, GridNotes, Plan
from cadenza.data.tokenizers.notes import NoteTokenizer
from tests.conftest import draw_under_masks, four_voices

tok = NoteTokenizer()


def grid(rows) -> GridNotes:
    """GridNotes from (onset, length in steps, program, pitch) rows."""
    a = np.array(rows, np.int64).reshape(-1, 4)
    duration = np.searchsorted(DURATIONS, a[:, 1])
    g = GridNotes(a[:, 0], duration, a[:, 2], a[:, 3], np.full(len(a), 20))
    return g.take(np.lexsort((g.pitch, g.program, g.onset)))


def test_top_line_skips_inner_voices_under_a_held_note():
    g = grid([(0, 200, 0, 72), (0, 100, 0, 60), (100, 100, 0, 64), (200, 50, 0, 71), (200, 50, 0, 55),
              (200, 50, DRUMS, 80)])
    assert g.pitch[top_line(g)].tolist() == [72, 71]  # 64 sounds under the held 72; drums never count


def test_the_melody_of_several_instruments_is_the_highest_one():
    g = grid([(0, 100, 32, 40), (0, 100, 73, 79), (100, 100, 73, 81), (100, 100, 0, 60), (100, 100, 0, 84)])
    assert g.program[melody(g)].tolist() == [73, 73]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory) -> TokenStore:
    out = tmp_path_factory.mktemp("notes") / "store"
    prepare([midi_folder], out, tokenizer=tok, progress=False, style="test", valid_fraction=0.2)
    return TokenStore(out)


def test_windows_are_reproducible_and_well_formed(store):
    styled = tok.with_styles(["test"])
    ds = AnticipationWindows(store, "train", 256, seed=3, tokenizer=styled, style_dropout=0.1,
                             tasks=TaskMix(1, 1, 1), transpose=2, stretch=0.05)
    seen = set()
    for i in range(60):
        w = ds[i].numpy()
        assert np.array_equal(w, ds[i].numpy()) and w.shape == (257,)
        assert w[0] in (styled.style_id("test"), styled.no_style_id)
        assert w[1] in (tok.autoregress_id, tok.anticipate_id)
        seen.add(int(w[1]))
        body = w[1:][w[1:] != tok.pad_id]
        events, controls, report = tok.decode_grid(body)
        assert report.extra["notes_without_duration"] <= 1  # cut at the window's end
        assert report.extra["durations_without_note"] <= 1  # a cropped window may open on one
        assert (len(controls) > 0) <= (w[1] == tok.anticipate_id)
    assert seen == {tok.autoregress_id, tok.anticipate_id}


def test_task_weights_are_checked():
    with pytest.raises(ValueError, match="task weights"):
        TaskMix(0, 0, 0).probabilities()


def _plans(store):
    """(prompt, plan) pairs from real windows: every sequence the training writes, uncropped."""
    ds = AnticipationWindows(store, "train", 512, seed=0, tokenizer=tok, tasks=TaskMix(1, 1, 1))
    rng = np.random.default_rng(0)
    for k in range(len(ds.pieces)):
        g = ds.notes(k).take(slice(0, 150))
        for task in ("autoregress", "infill", "accompany"):
            given, task = choose_controls(g, task, rng)
            controls = g.take(given) if given is not None else GridNotes.empty()
            controls.velocity = np.zeros_like(controls.velocity)
            yield ds.sequence(g, given, at_start=True, at_end=False, task=task), Plan(controls=controls)


def test_every_real_sequence_passes_the_masks(store):
    for ids, plan in _plans(store):
        g = tok.grammar(1, "cpu", plan=plan)
        g.observe(torch.tensor([ids[:2].tolist()]))  # the task flag and BOS: the prompt
        for t in range(2, len(ids)):
            assert g.allowed()[0, ids[t]], (t, tok.token_name(ids[t]))
            g.observe(torch.tensor([[ids[t]]]))


def test_no_sequence_drawn_under_the_masks_is_ill_formed(store):
    """10,000 tokens drawn at random among the allowed ones, with controls, a span and a cap."""
    ids, plan = next((i, p) for i, p in _plans(store) if len(p.controls) > 10)
    plan = Plan(controls=plan.controls, events_from=50, events_until=2000)
    rows, steps, cap = 8, 1250, 3
    g = tok.grammar(rows, "cpu", max_polyphony=cap, plan=plan)
    g.observe(torch.full((rows, 1), tok.anticipate_id))
    seqs = draw_under_masks(g, rows, steps, seed=0)
    for row in seqs.tolist():
        events, controls, report = tok.decode_grid([tok.anticipate_id] + row)
        assert report.extra["durations_without_note"] == 0
        assert report.repairs <= 1  # at most a note cut by the end of the draw
        placed = plan.controls.take(slice(0, len(controls)))
        assert all(np.array_equal(getattr(placed, f), getattr(controls, f)) for f in ("onset", "duration", "pitch"))
        assert ((events.onset >= 50) & (events.onset < 2000)).all()
        notes = GridNotes.concat([events, controls])
        voice = notes.program * 128 + notes.pitch
        order = np.lexsort((notes.onset, voice))
        v, on, end = voice[order], notes.onset[order], notes.end[order]
        assert not ((v[1:] == v[:-1]) & (on[1:] < end[:-1])).any()  # no voice sounds twice at once
        for t in events.onset:
            assert ((notes.onset <= t) & (notes.end > t)).sum() <= cap


def _chorale() -> Notes:
    """Four voices of quarter notes for 8 s, the soprano holding one note over 1.5-3.5 s."""
    return four_voices(16, hold=1.5, length=0.5, program=0)


def test_an_infill_request_keeps_the_notes_outside_its_span():
    notes = _chorale()
    r = infill_request(tok, notes, 2.0, 4.0)
    assert r.anticipate and (r.plan.events_from, r.plan.events_until, r.stop) == (200, 400, 400)
    kept = (notes.start < 2.0) | (notes.start >= 4.0)
    assert np.array_equal(np.sort(r.given.start), np.sort(notes.start[kept]))
    assert r.plan.controls.onset.min() == 400 and len(r.plan.controls) == int(np.sum(notes.start >= 4.0))
    events, controls, report = tok.decode_grid(np.concatenate([[tok.anticipate_id], r.prompt]))
    assert events.onset.max() == r.clock < 200 and report.repairs == 0
    assert len(controls) == r.plan.placed  # the controls written before the prompt ends
    held = notes.take(notes.end - notes.start == 2.0)
    assert held.start[0] in r.given.start  # a note sounding across the span's start stays whole
    for bad, match in (((3.0, 2.0), "start < end"), ((9.0, 10.0), "after the piece ends")):
        with pytest.raises(ValueError, match=match):
            infill_request(tok, notes, *bad)


def test_an_accompaniment_request_gives_the_top_line():
    notes = _chorale()
    r = accompany_request(tok, notes)
    tops = [notes.pitch[notes.start == t].max() for t in np.unique(notes.start)]
    held = (np.unique(notes.start) > 1.5) & (np.unique(notes.start) < 3.5)  # under the held soprano
    assert np.array_equal(r.given.by_time().pitch, np.array(tops)[~held])
    assert r.stop == int(r.plan.controls.end.max()) and r.plan.events_from == 0
    with pytest.raises(ValueError, match="no melody"):
        accompany_request(tok, Notes.from_arrays([0.0], [1.0], [36], [90], [DRUMS]))


def test_a_transposed_window_stays_inside_its_styles_range(store):
    # transpose_range = "data" on notes: no window leaves the pitch range its style has in training
    from cadenza.data.statistics import pitch_ranges

    ranges = pitch_ranges(store)
    lo, hi = ranges["test"]
    narrow = {"test": (lo - 2, hi + 2)}
    moved = AnticipationWindows(store, "train", 256, seed=0, tokenizer=tok, transpose=12, pitch_ranges=narrow)
    outside = 0
    for i in range(80):
        events, controls, _ = tok.decode_grid(moved[i].numpy())
        pitch = np.concatenate([events.pitch, controls.pitch])
        if pitch.size:
            assert pitch.min() >= lo - 2 and pitch.max() <= hi + 2
            outside += pitch.min() < lo or pitch.max() > hi
    assert outside  # some windows moved past the pieces' own range, none past the one allowed


def test_only_the_styles_asked_for_are_transposed(store):
    from cadenza.data.statistics import pitch_ranges

    lo, hi = pitch_ranges(store)["test"]
    narrow = {"test": (lo - 2, hi + 2)}
    kept = AnticipationWindows(store, "train", 256, seed=0, tokenizer=tok, transpose=12, pitch_ranges=narrow,
                               transpose_styles=["other"])
    for i in range(40):
        events, controls, _ = tok.decode_grid(kept[i].numpy())
        pitch = np.concatenate([events.pitch, controls.pitch])
        assert not pitch.size or (pitch.min() >= lo and pitch.max() <= hi)  # never moved


def test_a_legato_line_rounded_onto_the_grid_is_all_melody():
    # a melody played 20% slower: a 2.4 s note rounds to the 50 ms grid and overlaps the next note a
    # little; it is still one line, so every note is the melody (and comes back when accompanied)
    start = np.array([0.0, 0.6, 1.2, 3.64, 4.2])
    end = np.append(start[1:], 4.8)
    end[2] = 3.64  # 2.44 s: on the 50 ms grid 2.45 s
    notes = Notes.from_arrays(start, end, [74, 72, 76, 71, 72], [80] * 5)
    g, _ = tok.quantize(notes)
    assert g.end[2] > g.onset[3]  # rounding made them overlap
    assert melody(g).all() and top_line(g).all()
