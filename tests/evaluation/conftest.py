"""Fixtures of the evaluation tests: a tiny model on the metrical vocabulary."""

from __future__ import annotations

import pytest

import cadenza
from cadenza.data.tokenizers.metrical import MetricalTokenizer
from cadenza.models import checkpoint as ckpt
from tests.conftest import styled_pieces, tiny_config


@pytest.fixture(scope="session")
def metrical_run(tmp_path_factory):
    """Two styles of random pieces on the metrical vocabulary with lookahead, a tiny model on them."""
    root = tmp_path_factory.mktemp("metrical")
    styled_pieces(root / "in", per_style=8, notes=40)
    store = cadenza.prepare(root / "in", root / "store", styles_from_folders=True, workers=1, progress=False,
                            tokenizer=MetricalTokenizer(lookahead=True), valid_fraction=0.3,
                            test_fraction=0.2).store
    cadenza.train(tiny_config(context=256, steps=4), store.path, root / "run", progress=False)
    return ckpt.load(root / "run", "cpu"), store
