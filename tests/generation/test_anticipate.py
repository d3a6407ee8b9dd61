"""Infill and accompany with a model trained on the note vocabulary: the given notes come back as
they went in, the new ones stay where they belong, and bad requests get one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cadenza
from cadenza.cli import main
from cadenza.data.midi import Notes, read_notes, write_midi
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Accompany, Infill, Prompt, parse_span
from cadenza.generation.sampler import generate_ids
from cadenza.models import checkpoint as ckpt
from cadenza.settings import SettingError
from tests.conftest import four_voices, styled_pieces, tiny_config


@pytest.fixture(scope="module")
def notes_run(tmp_path_factory):
    """A tiny model on the note vocabulary with two styles, trained a few steps with anticipation."""
    root = tmp_path_factory.mktemp("notes")
    folder = styled_pieces(root / "in", per_style=4, notes=80)
    store = cadenza.prepare(folder, root / "store", styles_from_folders=True, workers=1, progress=False,
                            tokenizer="notes", valid_fraction=0.25, test_fraction=0.0).store
    cadenza.train(tiny_config(context=96, steps=4), store.path, root / "run", progress=False)
    return root / "run"


@pytest.fixture(scope="module")
def chorale(tmp_path_factory):
    """Four voices, 12 s: quarter notes, the soprano holding a note across 3.5-5.5 s."""
    notes = four_voices(24, hold=3.5, length=0.45, velocities=(70, 71, 72, 73))
    return write_midi(notes, tmp_path_factory.mktemp("c") / "chorale.mid")


def _keyed(notes: Notes) -> set:
    return {(round(s, 3), round(e, 3), int(p), int(v)) for s, e, p, v in
            zip(notes.start, notes.end, notes.pitch, notes.velocity)}


def test_an_infill_keeps_every_note_outside_its_span(notes_run, chorale):
    g = cadenza.infill(chorale, 4, 8, checkpoint=notes_run, num_samples=3, seed=2, style="chorale", compile=False)
    original, _ = read_notes(chorale, programs=True)
    outside = original.take((original.start < 4.0) | (original.start >= 8.0))
    for notes in g.notes:
        new = notes.take((notes.start >= 4.0) & (notes.start < 8.0))
        kept = notes.take((notes.start < 4.0) | (notes.start >= 8.0))
        assert _keyed(kept) == _keyed(outside)  # including the soprano held across 4 s, whole
        assert len(new) > 0
        voice = notes.programs * 128 + notes.pitch
        for v in np.unique(voice):  # no instrument plays a pitch twice at once, across the span's edges too
            same = notes.take(voice == v).by_time()
            assert (same.start[1:] >= same.end[:-1] - 1e-6).all()
    again = cadenza.infill(chorale, 4, 8, checkpoint=notes_run, num_samples=3, seed=2, style="chorale", compile=False)
    assert [_keyed(n) for n in again.notes] == [_keyed(n) for n in g.notes]  # the same seed, the same notes


def test_an_accompaniment_returns_the_melody_note_for_note(notes_run, chorale):
    g = cadenza.accompany(chorale, checkpoint=notes_run, num_samples=2, seed=0, compile=False)
    original, _ = read_notes(chorale, programs=True)
    tops = original.take(np.isin(original.pitch, [72, 73, 74]))  # the soprano is the top line
    for notes in g.notes:
        assert _keyed(tops) <= _keyed(notes)
        assert len(notes) > len(tops)  # voices were written under it
        assert notes.start.max() < original.end.max()


def test_given_notes_are_forced_the_same_with_and_without_the_cache(notes_run, chorale):
    checkpoint = ckpt.load(notes_run, torch.device("cpu"))
    model, tok = checkpoint.model.double(), checkpoint.tokenizer
    prompt = Prompt.encode(tok, Accompany(tok.read(chorale)[0]))
    ids = torch.tensor([prompt.ids] * 2)
    runs = [generate_ids(model, ids, prompt.tokenizer, prompt.decoding(SamplingConfig(use_cache=cache)),
                         generator=torch.Generator().manual_seed(3), plan=prompt.request.plan)
            for cache in (True, False)]
    assert runs[0] == runs[1]


def test_bad_requests_get_one_line_errors(notes_run, chorale, studio_runs, tmp_path):
    notes = read_notes(chorale, programs=True)[0]
    with pytest.raises(SettingError, match="infill must be START:END"):
        parse_span("8-16")
    with pytest.raises(SettingError, match="infill must have 0 <= START < END"):
        Infill(notes, 6, 2)
    with pytest.raises(ValueError, match="starts after the piece ends"):
        cadenza.infill(chorale, 30, 40, checkpoint=notes_run, compile=False)
    with pytest.raises(ValueError, match="cannot infill: its performance vocabulary"):
        cadenza.infill(chorale, 1, 2, checkpoint=studio_runs / "tiny", compile=False)
    drums = tmp_path / "drums.mid"
    write_midi(Notes.from_arrays([0.0], [0.5], [36], [90], [128]), drums)
    with pytest.raises(ValueError, match="no melody"):
        cadenza.accompany(drums, checkpoint=notes_run, compile=False)
    (tmp_path / "text.mid").write_text("not midi")
    assert main(["generate", "--checkpoint", str(notes_run), "--accompany", str(tmp_path / "text.mid")]) == 2
    assert main(["generate", "--checkpoint", str(notes_run), "--infill", "1:2"]) == 2  # no piece to fill


def test_the_command_line_infills_and_accompanies(notes_run, chorale, tmp_path):
    assert main(["generate", "--checkpoint", str(notes_run), "--primer", str(chorale), "--infill", "2:6",
                 "--no-compile", "--quiet", "--out", str(tmp_path / "fill")]) == 0
    assert main(["generate", "--checkpoint", str(notes_run), "--accompany", str(chorale), "--style", "jig",
                 "--no-compile", "--quiet", "--out", str(tmp_path / "acc")]) == 0
    for folder in ("fill", "acc"):
        notes, _ = read_notes(tmp_path / folder / "sample-000.mid")
        assert len(notes) > 0


def test_fine_tuning_may_change_the_anticipation_but_not_the_ids(notes_run, tmp_path):
    from cadenza.data.tokenizers.notes import NoteTokenizer
    from cadenza.training.config import resolve

    styled_pieces(tmp_path / "in", per_style=4, notes=60, seed=5, styles=("jig",))
    cfg = resolve("tiny", overrides=["max_steps=1", "batch_size=2", "eval_every=1", "eval_windows=1",
                                     "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\""])
    cfg.train.init = str(notes_run)
    before = ckpt.load_tokenizer(notes_run, prefer="latest")
    store = cadenza.prepare(tmp_path / "in", tmp_path / "later", styles_from_folders=True, workers=1,
                            progress=False, tokenizer=NoteTokenizer(anticipation=before.anticipation + 1),
                            valid_fraction=0.25, test_fraction=0.0).store
    tuned = cadenza.train(cfg, store.path, tmp_path / "tuned", progress=False)
    tok = ckpt.load_tokenizer(tuned.run_dir, prefer="latest")
    assert tok.anticipation == before.anticipation + 1  # the windows now place controls 1 s earlier
    assert tok.styles == before.styles  # the model's style ids are kept
    other = cadenza.prepare(tmp_path / "in", tmp_path / "other", workers=1, progress=False,
                            valid_fraction=0.25, test_fraction=0.0).store  # the 388-event vocabulary
    with pytest.raises(ValueError, match="tokenized differently"):
        cadenza.train(cfg, other.path, tmp_path / "refused", progress=False)


def test_infill_and_accompany_are_generate_with_those_tasks(notes_run, chorale):
    same = {"style": "chorale", "seed": 3, "max_tokens": 120}
    notes = ckpt.load_tokenizer(notes_run).read(chorale)[0]
    a = cadenza.infill(chorale, 4, 8, checkpoint=notes_run, **same)
    b = cadenza.generate(notes_run, prompt=Infill(notes, 4, 8), **same)
    assert _keyed(a.notes[0]) == _keyed(b.notes[0])
    a = cadenza.accompany(chorale, checkpoint=notes_run, **same)
    b = cadenza.generate(notes_run, prompt=Accompany(notes), **same)
    assert _keyed(a.notes[0]) == _keyed(b.notes[0])
