"""The old-beside-new measurements: each computes what it says, on hand-made notes and sequences,
and the whole report runs on two tiny models (one per vocabulary) trained on the same pieces."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import cadenza
from cadenza.data.midi import Notes
from cadenza.data.tokenizers.note_grid import GridNotes
from cadenza.data.tokenizers.notes import NoteTokenizer
from cadenza.evaluation.anticipation import duration_shares, evaluate_anticipation
from cadenza.evaluation.harmony import harmony, under_melody
from cadenza.evaluation.spans import Span, encodings, given_only, span_music, span_nll
from tests.conftest import styled_pieces, tiny_config


def test_duration_shares_count_long_notes_and_notes_closed_by_the_cap():
    d = np.array([0.5] * 994 + [2.0, 3.0, 3.0, 3.0, 8.1, 8.09])
    shares = duration_shares(d, longest=2.0, cap=8.1, step=0.01)
    assert shares["notes"] == 1000
    assert shares["longer_than_real_p999"] == pytest.approx(0.005)  # 2.0 itself is not longer
    assert shares["closed_by_cap"] == pytest.approx(0.001)  # 8.09 s ended on its own
    assert duration_shares(d, longest=10.0, cap=None, step=0.01)["closed_by_cap"] == 0


def test_intervals_under_the_melody_count_the_bass_and_the_voices():
    tune = Notes.from_arrays([0, 1, 2, 3], [1, 2, 3, 4], [72, 72, 72, 72], [80] * 4)
    # at 0: C3 and E4 under C5 (octaves: consonant); at 1: D3 (a minor seventh: not); at 2: the
    # A2 held from 1.5 and a G5 above (a minor third); at 3 nothing sounds below
    others = Notes.from_arrays([0, 0, 1, 1.5, 2, 3], [1, 1, 1.5, 3, 3, 4], [48, 64, 50, 45, 79, 84], [80] * 6)
    u = under_melody(tune, others)
    assert u["interval"].tolist() == [0, 10, 3, -1]
    assert u["voices"].tolist() == [2, 1, 1, 0]
    assert u["above"].tolist() == [False, False, True, True]
    h = harmony(tune, others)
    assert h["consonant"] == pytest.approx(2 / 3) and h["voices_under"] == 1.0 and h["above"] == 0.5


def _hand_made_span() -> tuple[NoteTokenizer, Span]:
    """Notes at 0 (the prefix), 1.0 and 1.5 s (the span, 1-2 s), 2.5, 6 and 8 s: the 6 s note's
    control (5 s early) falls inside the span, the 8 s note's after it."""
    onset, pitch = np.array([0, 100, 150, 250, 600, 800]), np.array([60, 62, 64, 65, 70, 67])
    g = GridNotes(onset, np.full(6, 9), np.zeros(6, np.int64), pitch, np.full(6, 20))
    return NoteTokenizer(anticipation=5.0), Span(g, 100, 200, piece=0, style=None, at_start=True)


def test_the_span_music_is_the_events_from_the_prefix_to_the_clock_at_the_span_end():
    tok, span = _hand_made_span()
    enc = encodings(tok, span)
    d = "DURATION_9"
    for name, flag in (("plain", "AUTOREGRESS"), ("anticipatory", "ANTICIPATE")):
        ids, mask = enc[name]
        assert [tok.token_name(i) for i in ids[:2]] == [flag, "BOS"]
        # from after the prefix note's duration to the shift that takes the clock from 1.5 s past 2 s
        assert [tok.token_name(i) for i in ids[mask]] == ["SHIFT_100", "NOTE_62", d, "SHIFT_50", "NOTE_64", d,
                                                          "SHIFT_100"], name
    ids, mask = enc["anticipatory"]
    inside = [tok.token_name(i) for i in ids[np.flatnonzero(mask)[0]:np.flatnonzero(mask)[-1] + 1]]
    assert "CONTROL_NOTE_70" in inside and "CONTROL_NOTE_65" not in inside  # the 6 s note's control: not scored


def test_a_span_the_clock_never_reaches_cannot_be_scored():
    tok, span = _hand_made_span()
    body = tok.encode_grid(span.notes.take(span.notes.onset < 150))  # nothing after 1.5 s
    assert not span_music(tok, body, 0, 1, 200).any()


def test_the_span_nll_scores_each_marked_token_given_the_tokens_before_it(notes_model):
    model = notes_model
    tok, span = _hand_made_span()
    ids, mask = encodings(tok, span)["anticipatory"]
    total, n = span_nll(model, ids, mask)
    assert n == 7
    by_hand = 0.0
    with torch.no_grad():
        for k in np.flatnonzero(mask):  # each token alone, from a forward pass over its own prefix
            logits, _ = model(torch.as_tensor(ids[:k])[None])
            by_hand -= float(torch.log_softmax(logits[0, -1].double(), -1)[ids[k]])
    assert total == pytest.approx(by_hand, rel=1e-6)


def test_a_span_is_scored_among_the_ids_the_model_may_write(notes_model):
    # the sampler never lets the model write a given note's id: the span's tokens are scored with
    # those ids left out and the rest renormalised, which can only make each marked token likelier
    tok, span = _hand_made_span()
    ids, mask = encodings(tok, span)["anticipatory"]
    never = given_only(tok)
    never = np.pad(never, (0, notes_model.config.vocab_size - never.size))  # the model's style ids come after
    assert never[tok.control_offset] and not never[tok.note_offset] and not never[ids[mask]].any()
    total, n = span_nll(notes_model, ids, mask, never)
    by_hand = 0.0
    with torch.no_grad():
        for k in np.flatnonzero(mask):
            logits = notes_model(torch.as_tensor(ids[:k])[None])[0][0, -1].double()
            p = torch.softmax(logits, -1)
            by_hand -= float(torch.log(p[ids[k]] / p[torch.as_tensor(~never)].sum()))
    assert n == 7 and total == pytest.approx(by_hand, rel=1e-6)
    assert total < span_nll(notes_model, ids, mask)[0]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One folder of pieces in two styles prepared with both vocabularies, and a tiny model trained a
    few steps on each."""
    root = tmp_path_factory.mktemp("old_new")
    styled_pieces(root / "in", per_style=6, notes=45)
    runs = {}
    for name, tokenizer in (("old", "performance"), ("new", "notes")):
        store = cadenza.prepare(root / "in", root / f"store-{name}", styles_from_folders=True, workers=1,
                                progress=False, tokenizer=tokenizer, valid_fraction=0.3, test_fraction=0.2).store
        cadenza.train(tiny_config(context=128, steps=4), store.path, root / name, progress=False)
        runs[name] = (root / name, store.path)
    return root, runs


@pytest.fixture(scope="module")
def notes_model(two_runs):
    from cadenza.models import checkpoint as ckpt

    return ckpt.load(two_runs[1]["new"][0], "cpu").model.double()


def test_the_report_measures_old_beside_new(two_runs):
    root, runs = two_runs
    (old, old_data), (new, new_data) = runs["old"], runs["new"]
    r = evaluate_anticipation(old, new, old_data, new_data, out=root / "report", samples=2, seconds=4.0, spans=4,
                              pieces=2, accompany_style="chorale", compile=False)
    for style in ("jig", "chorale"):
        d = r["durations"][style]
        assert d["new"]["closed_by_cap"] == 0 and d["new"]["cap_seconds"] is None  # notes carry their lengths
        assert d["old"]["cap_seconds"] > 0 and d["real_notes"] > 0
    for m in ("old", "new"):
        lik = r["likelihood"][m]
        assert lik["nats_per_note"] == pytest.approx(lik["nats_per_token"] * lik["tokens"] / lik["notes"])
    assert r["likelihood"]["old"]["notes"] == r["likelihood"]["new"]["notes"]  # the same pieces
    f = r["infilling"]
    assert f["spans"] == 4 and all(4.0 <= s <= 8.0 for s in f["span_seconds"])
    assert all(np.isfinite(f["nll_plain"])) and all(n > 0 for n in f["tokens_anticipatory"])
    a = r["accompaniment"]
    assert a["pieces"] == 2 and a["melody_returned"] == 2
    assert 0 <= a["generated"]["consonant"] <= 1 and a["real"]["above"] == 0  # the real melody is the top line
    assert set(r["goals"]) >= {"durations_longer_than_real_p999", "infilling_nll", "accompaniment_texture"}
    json.dumps(r)  # the report is plain JSON
    assert (root / "report" / "durations.png").stat().st_size > 1000
    assert (root / "report" / "infilling.png").stat().st_size > 1000
