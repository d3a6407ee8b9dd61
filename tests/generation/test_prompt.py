"""What a generation starts from (`cadenza.generation.prompt`): the shipped model's continue, infill
and accompany give the same notes for the same seed as before the tasks moved out of
`SamplingConfig` (pinned below), and every sample says which of its notes were given."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import cadenza
from cadenza.data.midi import Notes, write_midi
from cadenza.data.requests import given_mask
from cadenza.generation.config import SamplingConfig
from cadenza.generation.generate import sample
from cadenza.generation.prompt import Accompany, Continue, Infill, Prompt, describe
from cadenza.models import zoo
from cadenza.settings import SettingError

# (notes, digest) per sample, from commit ada8d4a (SamplingConfig(primer=..., infill=...,
# accompany=...)), the shipped model in float64 so that no CPU's rounding moves a draw.
PINS = {
    "free": [(27, "109925489a9c15b6"), (60, "86fd6ecaa1ae15b7")],
    "continue": [(12, "f9704b8230928ba3"), (14, "dfd5eb51c6f807c1")],
    "infill": [(32, "c47efd2c3cc215f0")],
    "accompany": [(48, "fd8b216cd3bc4a9e"), (73, "979e6c98ad08f49e")],  # voices under the melody
}
SETTINGS = {"free": dict(style="bach", seconds=4, seed=5, num_samples=2),
            "continue": dict(style="irish", seconds=4, seed=3, num_samples=2),
            "infill": dict(style="irish", seed=1, num_samples=1),
            "accompany": dict(style="bach", seed=2, num_samples=2)}


def _scale() -> Notes:
    """32 eighth notes at 120 bpm up and down a C major scale."""
    start = np.arange(32) * 0.5
    return Notes.from_arrays(start, start + 0.5, [[60, 62, 64, 65, 67, 69, 71, 72][i % 8] for i in range(32)],
                             [80] * 32, [0] * 32)


def _tune() -> Notes:
    start = np.arange(12) * 0.75
    return Notes.from_arrays(start, start + 0.75, [67, 69, 71, 72, 74, 72, 71, 69, 67, 66, 67, 67], [90] * 12,
                             [0] * 12)


def _digest(notes: Notes) -> tuple[int, str]:
    n = notes.by_time()
    rows = [(round(float(s), 6), round(float(e), 6), int(p), int(v), int(g))
            for s, e, p, v, g in zip(n.start, n.end, n.pitch, n.velocity, n.programs)]
    return len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def shipped():
    if zoo.DEFAULT not in {m["name"] for m in zoo.list_models()}:
        pytest.skip("the package ships no style model")
    checkpoint = cadenza.load(zoo.DEFAULT, "cpu")
    checkpoint.model.double()
    return checkpoint


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The pins' inputs as MIDI files, read as the model reads them (as a user's files are)."""
    root = tmp_path_factory.mktemp("prompt")
    return {"scale": write_midi(_scale(), root / "scale.mid"), "tune": write_midi(_tune(), root / "tune.mid")}


def _tasks(tok, files) -> dict:
    scale, tune = tok.read(files["scale"])[0], tok.read(files["tune"])[0]
    return {"free": None, "continue": Continue(scale, 3.0), "infill": Infill(scale, 4.0, 8.0),
            "accompany": Accompany(tune)}


@pytest.mark.parametrize("kind", list(PINS))
def test_the_same_seed_gives_the_notes_it_gave_before(shipped, files, kind):
    task = _tasks(shipped.tokenizer, files)[kind]
    g = sample(shipped, SamplingConfig(compile=False, **SETTINGS[kind]).validate(), task)
    assert [_digest(n) for n in g.notes] == [tuple(p) for p in PINS[kind]]


def test_every_sample_marks_its_given_notes(shipped, files, tmp_path):
    tok = shipped.tokenizer
    tasks = _tasks(tok, files)
    cfg = dict(compile=False, num_samples=1, seed=4, max_tokens=200)
    scale = tasks["infill"].notes
    fill = cadenza.generate(shipped, prompt=tasks["infill"], style="irish", out=tmp_path / "fill", **cfg)
    kept = scale.take((scale.start < 4.0) | (scale.start >= 8.0))
    notes, given = fill.notes[0], fill.given[0]
    assert given.sum() == len(kept)
    assert not given[(notes.start >= 4.0) & (notes.start < 8.0)].any()  # what the model wrote in the span
    record = json.loads((tmp_path / "fill" / "generation.json").read_text())
    assert record["prompt"] == {"task": "infill", "source": None, "notes": len(scale), "start": 4.0, "end": 8.0}
    assert record["samples"][0]["given"] == len(kept)

    melody = tasks["accompany"].notes
    acc = cadenza.generate(shipped, prompt=tasks["accompany"], style="bach", **cfg)
    assert acc.given[0].sum() == len(melody) and len(acc.notes[0]) > len(melody)

    cont = cadenza.generate(shipped, prompt=tasks["continue"], style="irish", **cfg)
    primer = cont.prompt.given
    assert len(primer) > 0 and cont.given[0].sum() == len(primer)
    assert cont.notes[0].start[cont.given[0]].max() < 3.0  # the primer's first 3 s, then the model's notes
    assert not cadenza.generate(shipped, prompt=Continue(), **cfg).given[0].any()


def test_the_given_mask_matches_onset_instrument_and_pitch():
    notes = Notes.from_arrays([0.0, 0.5, 0.5, 1.0], [0.5, 1.0, 1.0, 2.0], [60, 62, 62, 64], [80] * 4, [0, 0, 40, 0])
    given = Notes.from_arrays([0.0004, 0.5, 1.0], [9.0, 0.6, 2.0], [60, 62, 65], [1, 1, 1], [0, 0, 0])
    # onsets within half a step match, lengths and velocities do not matter, instruments and pitches do
    assert given_mask(notes, given, 1000).tolist() == [True, True, False, False]


def test_a_task_is_recorded_and_refused_in_the_settings_words(shipped):
    scale = _scale()
    assert describe(Continue(scale, 2.5, source="a.mid")) == {"task": "continue", "source": "a.mid", "notes": 32,
                                                              "seconds": 2.5}
    assert Infill(scale, 8, 16.5).span == "8:16.5"
    with pytest.raises(SettingError, match="^infill must have 0 <= START < END seconds, got 8:4$"):
        Infill(scale, 8, 4)
    with pytest.raises(ValueError, match="starts after the piece ends"):
        Prompt.encode(shipped.tokenizer, Infill(scale, 40, 50), "irish")


def test_an_infill_of_several_samples_finishes_when_one_ends_first(shipped, tmp_path):
    """Issue 45, item 7: a sample that reached the span's end was fed PAD while the grammar forced a
    given note's tokens on it, and the next lookup ran past them (an IndexError: 12 of 54 such
    infills at ada8d4a, this one among them)."""
    start = np.arange(32) * 0.5
    path = write_midi(Notes.from_arrays(start, start + 0.25, np.arange(60, 92), [80] * 32, [0] * 32),
                      tmp_path / "chromatic.mid")
    notes = shipped.tokenizer.read(path)[0]
    g = sample(shipped, SamplingConfig(compile=False, style="bach", num_samples=2, seed=0).validate(),
               Infill(notes, 4.0, 8.0))
    kept = notes.take((notes.start < 4.0) | (notes.start >= 8.0))
    assert [int(given.sum()) for given in g.given] == [len(kept)] * 2
