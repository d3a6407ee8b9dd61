"""Shared fixtures: small MIDI files built in code, and the optional shared data folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import symusic
from symusic import ControlChange, Note, Score, Tempo, Track

REPO = Path(__file__).resolve().parents[1]
# Building the compiled decode step takes tens of seconds per model: the suite decodes eagerly (the
# reference path) except in tests/generation/test_static.py, which builds it on purpose.
os.environ.setdefault("CADENZA_NO_COMPILE", "1")
SHARED_DATA = Path(os.environ.get("CADENZA_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared(*parts: str) -> Path:
    """A path in ../shared/data; skips the test when it is absent (e.g. outside the workplace)."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not present: {p}")
    return p


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package), for tests of what it does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02):
    """`predicate()` once it is true (returned), polled every `interval` seconds; fails the test after
    `timeout` seconds. Tests wait through this, so none can hang."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout:g} s for {getattr(predicate, '__qualname__', predicate)}")
        time.sleep(interval)
    return value


def make_score(notes_per_track, tpq: int = 480, tempos=((0, 120.0),), drums=(), pedals=None) -> Score:
    """notes_per_track: list of [(start_tick, dur_ticks, pitch, velocity), ...]."""
    s = Score(tpq)
    for i, notes in enumerate(notes_per_track):
        t = Track(f"t{i}", 0, i in drums)
        for st, du, p, v in notes:
            t.notes.append(Note(st, du, p, v))
        for (on, off) in (pedals or {}).get(i, []):
            t.controls.append(ControlChange(on, 64, 127))
            t.controls.append(ControlChange(off, 64, 0))
        s.tracks.append(t)
    for tick, qpm in tempos:
        s.tempos.append(Tempo(tick, qpm))
    return s


def write_score(score: Score, path: Path) -> Path:
    path.write_bytes(bytes(score.dumps_midi()))
    return path


def random_piece(rng: np.random.Generator, n: int = 200, tpq: int = 480) -> Score:
    """A dense random polyphonic piece with chords, repeated pitches and long gaps."""
    notes, t = [], 0
    for _ in range(n):
        t += int(rng.choice([0, 0, 60, 120, 240, 480, 1200, 2500]))
        notes.append((t, int(rng.integers(1, 1500)), int(rng.integers(21, 109)), int(rng.integers(1, 128))))
    return make_score([notes], tpq=tpq)


@pytest.fixture(scope="session")
def midi_folder(tmp_path_factory) -> Path:
    """A folder of varied MIDI files plus one corrupt, one empty and one non-MIDI file."""
    d = tmp_path_factory.mktemp("midi")
    rng = np.random.default_rng(0)
    for i in range(6):
        write_score(random_piece(rng, 150 + 20 * i), d / f"piece{i}.mid")
    sub = d / "nested" / "deeper"
    sub.mkdir(parents=True)
    write_score(make_score([[(0, 480, 60, 90), (480, 480, 64, 70)], [(0, 960, 36, 100)]],
                           tempos=((0, 90.0), (480, 150.0))), sub / "two_tracks.MID")
    write_score(make_score([[(0, 240, 60, 80)], [(0, 120, 38, 100), (240, 120, 42, 100)]], drums=(1,)),
                d / "with_drums.midi")
    (d / "corrupt.mid").write_bytes(b"MThd\x00\x00\x00\x06\x00\x01\x00\x02\x01\xe0MTrk\x00\x00\xff\xff\x90")
    (d / "empty.mid").write_bytes(bytes(Score(480).dumps_midi()))
    (d / "notes.txt.mid").write_text("this is not a MIDI file\n")
    (d / "readme.txt").write_text("ignored: not a MIDI suffix\n")
    return d


TUNES = """X:1
T:First
M:4/4
L:1/4
K:C
C D E F | G A B c |]

X:2
T:Second
M:3/4
L:1/4
K:G
G A B | d2 B |]
"""


@pytest.fixture
def fake_corpus(tmp_path, monkeypatch):
    """A built-in corpus named "fake": two ABC tunes and one file music21 cannot parse."""
    import cadenza.data.corpora as C

    root = tmp_path / "m21corpus"
    (root / "fakefolk").mkdir(parents=True)
    (root / "fakefolk" / "tunes.abc").write_text(TUNES)
    (root / "fakefolk" / "broken.abc").write_bytes(b"\x00\x01 not abc at all \xff")
    monkeypatch.setattr(C, "_music21_corpus_root", lambda: root)
    monkeypatch.setitem(C.CORPORA, "fake", C.Corpus("fake", ("fakefolk",), (".abc",), "test corpus"))
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path / "cache"))
    return root


def styled_pieces(root: Path, per_style: int, notes: int, seed: int = 0, styles=("jig", "chorale")) -> Path:
    """A folder of random pieces, a subfolder per style (what `prepare(styles_from_folders=True)` reads)."""
    rng = np.random.default_rng(seed)
    for style in styles:
        (root / style).mkdir(parents=True)
        for i in range(per_style):
            write_score(random_piece(rng, notes), root / style / f"{i}.mid")
    return root


def four_voices(beats: int, hold: float, length: float, velocities=(80, 80, 80, 80), program=None):
    """A chorale-like texture: four voices (from C5, F4, C4, C3, rising 0-2 semitones) on half-second
    beats, each note `length` s long, the soprano holding one note for 2 s from `hold` s. -> Notes"""
    from cadenza.data.midi import Notes

    rows = []
    for beat in range(beats):
        t = beat * 0.5
        for voice, base in enumerate((72, 65, 60, 48)):
            if voice == 0 and hold < t < hold + 2:
                continue
            rows.append((t, t + (2.0 if voice == 0 and t == hold else length), base + beat % 3, velocities[voice]))
    s, e, p, v = map(np.array, zip(*rows))
    return Notes.from_arrays(s, e, p, v, None if program is None else np.full(len(rows), program, np.int64))


def tiny_config(context: int, steps: int):
    """The tiny preset shrunk to train `steps` steps in a second or two on the CPU, in fp32."""
    from cadenza.training.config import resolve

    return resolve("tiny", overrides=[f"context={context}", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64",
                                      "batch_size=4", f"max_steps={steps}", f"eval_every={steps}", "eval_windows=2",
                                      "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\""])


def draw_under_masks(grammar, rows: int, steps: int, seed: int):
    """`steps` tokens per row, each drawn at random among those `grammar` allows (once it has seen
    the prompt); the grammar observes each draw."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    seqs = torch.zeros(rows, steps, dtype=torch.long)
    for s in range(steps):
        allowed = grammar.allowed()
        assert allowed.any(1).all()
        seqs[:, s] = torch.multinomial(allowed.float(), 1, generator=gen)[:, 0]
        grammar.observe(seqs[:, s:s + 1])
    return seqs


@pytest.fixture(scope="session")
def studio_runs(tmp_path_factory):
    """runs/tiny: a model with two styles, trained for a few steps on generated music (the studio's)."""
    import cadenza

    root = tmp_path_factory.mktemp("studio")
    folder = styled_pieces(root / "in", per_style=6, notes=80)
    store = cadenza.prepare(folder, root / "store", styles_from_folders=True, workers=1, progress=False,
                            valid_fraction=0.2, test_fraction=0.0).store
    cadenza.train(tiny_config(context=64, steps=6), store.path, root / "runs" / "tiny", progress=False)
    return root / "runs"


@pytest.fixture(scope="session")
def studio_edit_runs(studio_runs, tmp_path_factory):
    """runs/notes: a model on the note vocabulary (it can infill and accompany) with the same two
    styles, trained a few steps with anticipation; beside it a copy of runs/tiny, which cannot."""
    import shutil

    import cadenza

    root = tmp_path_factory.mktemp("studio-edits")
    store = cadenza.prepare(studio_runs.parent / "in", root / "store", styles_from_folders=True, workers=1,
                            progress=False, tokenizer="notes", valid_fraction=0.2, test_fraction=0.0).store
    cadenza.train(tiny_config(context=96, steps=4), store.path, root / "runs" / "notes", progress=False)
    shutil.copytree(studio_runs / "tiny", root / "runs" / "tiny")
    return root / "runs"


@pytest.fixture
def tokenizer():
    from cadenza.data.tokenizers import PerformanceTokenizer

    return PerformanceTokenizer()


__all__ = ["draw_under_masks", "four_voices", "make_score", "random_piece", "shared", "styled_pieces", "symusic",
           "tiny_config", "wait_until", "write_score"]


def allow_compiling(mp: pytest.MonkeyPatch, cache: Path) -> None:
    """Compiling on (the suite decodes eagerly, above), into the cache folder `cache`; skips the test
    where no compiled decode step can be built (no C++ compiler)."""
    from cadenza.generation import compiled

    mp.delenv("CADENZA_NO_COMPILE", raising=False)
    mp.setenv("CADENZA_CACHE", str(cache))
    if reason := compiled.unavailable_reason():
        pytest.skip(f"compiled decode step unavailable: {reason}")


@pytest.fixture(scope="module")
def compile_here(tmp_path_factory):
    """`allow_compiling` into a private cache shared by one test module's tests (builds are slow)."""
    mp = pytest.MonkeyPatch()
    try:
        allow_compiling(mp, tmp_path_factory.mktemp("cache"))
        yield
    finally:
        mp.undo()


@pytest.fixture
def compiling(monkeypatch, tmp_path):
    """`allow_compiling` into an empty cache, tmp_path (returned), for one test."""
    allow_compiling(monkeypatch, tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def metrical_run(tmp_path_factory):
    """Two styles of random pieces on the metrical vocabulary with lookahead, a tiny model on them.
    -> (the loaded checkpoint, the store)"""
    import cadenza
    from cadenza.data.tokenizers.metrical import MetricalTokenizer
    from cadenza.models import checkpoint as ckpt

    root = tmp_path_factory.mktemp("metrical")
    styled_pieces(root / "in", per_style=8, notes=40)
    store = cadenza.prepare(root / "in", root / "store", styles_from_folders=True, workers=1, progress=False,
                            tokenizer=MetricalTokenizer(lookahead=True), valid_fraction=0.3,
                            test_fraction=0.2).store
    cadenza.train(tiny_config(context=256, steps=4), store.path, root / "run", progress=False)
    return ckpt.load(root / "run", "cpu"), store
