"""Shipped models: export, the registry, and rebuilding the pieces a model card was measured on."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cadenza
import cadenza.data.corpora as C
from cadenza.evaluation.pieces import rebuild_store, store_pieces
from cadenza.models import zoo
from cadenza.training.config import resolve
from cadenza.training.export import export


def abc_book(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    notes = "CDEFGABcd"
    tunes = []
    for i in range(n):
        bars = " | ".join(" ".join(rng.choice(list(notes), 4)) for _ in range(6))
        tunes.append(f"X:{i + 1}\nT:Tune {i}\nM:4/4\nL:1/4\nK:C\n{bars} |]\n")
    return "\n".join(tunes)


@pytest.fixture
def book(tmp_path, monkeypatch):
    root = tmp_path / "m21"
    (root / "book").mkdir(parents=True)
    (root / "book" / "tunes.abc").write_text(abc_book(14))
    monkeypatch.setattr(C, "_music21_corpus_root", lambda: root)
    monkeypatch.setitem(C.CORPORA, "book", C.Corpus("book", ("book",), (".abc",), "a test book"))
    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(zoo, "shipped_root", lambda: tmp_path / "shipped")
    return tmp_path


def test_rebuilt_validation_pieces_reproduce_the_shipped_models_nll(book):
    store = cadenza.prepare(corpus="book", out=book / "store", workers=1, progress=False, valid_fraction=0.3,
                            test_fraction=0.2).store
    cfg = resolve("tiny", overrides=["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64",
                                     "batch_size=4", "max_steps=2", "eval_every=2", "eval_windows=2",
                                     "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\""])
    cadenza.train(cfg, store.path, book / "run", progress=False)
    export(book / "run", book / "shipped" / zoo.DEFAULT, extra_files={"pieces.json": store_pieces(store)})
    card = cadenza.evaluate(zoo.DEFAULT, store.path, split="valid")["nll"]
    # a fresh cache: only the validation tunes are converted again, nothing else
    res = rebuild_store(zoo.DEFAULT, "valid", book / "rebuilt", workers=1, progress=False)
    assert len(res.store) == card["pieces"] and {p.split for p in res.store.pieces} == {"valid"}
    again = cadenza.evaluate(zoo.DEFAULT, res.store.path, split="valid")["nll"]
    assert again["tokens"] == card["tokens"] and again["nll_nats"] == pytest.approx(card["nll_nats"], abs=1e-9)
    assert json.loads((book / "shipped" / zoo.DEFAULT / "pieces.json").read_text())["corpus"] == "book"
