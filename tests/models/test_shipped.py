"""The style model shipped in the package: it loads, plays every style, and its card's figures
reproduce from a store rebuilt from music21's corpus (docs/models.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cadenza
from cadenza.evaluation.pieces import rebuild_store
from cadenza.models import checkpoint as ckpt
from cadenza.models import zoo

ROOT = Path(__file__).resolve().parents[2]
CARD_NLL = ROOT / "benchmarks" / "results" / "styles" / "valid-nll.json"


@pytest.fixture(scope="module")
def shipped() -> dict:
    models = {m["name"]: m for m in zoo.list_models()}
    assert zoo.DEFAULT in models, "the package ships no style model (see tools/ship_model.py)"
    return models[zoo.DEFAULT]


def test_the_shipped_model_is_small_verified_and_carries_its_record(shipped):
    folder = zoo.resolve_model(zoo.DEFAULT)
    assert sum(f.stat().st_size for f in folder.iterdir()) < 20e6
    loaded = ckpt.load(zoo.DEFAULT, "cpu")  # by name; checks the weights' checksum
    assert loaded.path == str(folder)
    assert loaded.meta["dtype"] == "float16" and next(loaded.model.parameters()).dtype.is_floating_point
    run = json.loads((folder / "run.json").read_text())
    env = run["environment"]
    assert env["git_commit"] and env["torch"] and run["data_fingerprint"] and run["command"].startswith("cadenza train")
    card = json.loads((folder / "classifier.json").read_text())
    assert card["styles"] == shipped["styles"] == list(loaded.tokenizer.styles)
    assert set(card["reference"]) == set(shipped["styles"])
    data = json.loads((folder / "data.json").read_text())
    assert set(data["styles"]) == set(shipped["styles"])
    pieces = json.loads((folder / "pieces.json").read_text())
    assert pieces["valid"] and all(o.partition(":")[2] for o in pieces["valid"] + pieces["test"])


def test_every_style_plays(shipped, tmp_path):
    for style in shipped["styles"]:
        g = cadenza.generate(style=style, seconds=4, seed=0, stop_at_eos=False, out=tmp_path / style)
        score = g.scores[0]
        notes = [n for t in score.tracks for n in t.notes]
        # a Palestrina opening is one voice in half notes before the others enter: 3 notes in 4 s
        assert len(notes) >= 3, f"{style}: {len(notes)} notes in 4 seconds"
        assert g.paths[0].is_file() and g.paths[0].stat().st_size > 0
        assert g.stats[0]["seconds"] == pytest.approx(4, abs=1.0)


def test_a_style_the_model_does_not_know_is_a_clear_error(shipped):
    with pytest.raises(ValueError, match="unknown style 'polka'; this model knows " + shipped["styles"][0]):
        cadenza.generate(style="polka", seconds=2)


@pytest.mark.slow
def test_the_cards_valid_nll_reproduces_from_a_store_rebuilt_from_the_corpora(shipped, tmp_path):
    card = json.loads(CARD_NLL.read_text())["nll"]
    res = rebuild_store(zoo.DEFAULT, "valid", tmp_path / "valid", progress=False)
    got = cadenza.evaluate(zoo.DEFAULT, res.store.path, split="valid")["nll"]
    assert got["pieces"] == card["pieces"] and got["tokens"] == card["tokens"]
    assert got["nll_nats"] == pytest.approx(card["nll_nats"], abs=0.01)
