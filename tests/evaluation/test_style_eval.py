"""The style classifier and `cadenza evaluate --styles`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_score, write_score

import cadenza
from cadenza.data.midi import Notes
from cadenza.evaluation.classifier import StyleClassifier
from cadenza.evaluation.features import N_FEATURES, excerpt, style_features
from cadenza.training.config import resolve


def melody(rng, scale, step: float, n: int = 48, chord: bool = False):
    t, notes = 0.0, []
    for _ in range(n):
        p = int(rng.choice(scale)) + 12 * int(rng.integers(0, 2))
        notes.append((int(t * 960), int(step * 960 * 0.9), p, 90))
        if chord:
            length = int(step * 960 * 0.9)
            notes += [(int(t * 960), length, p - 4, 80), (int(t * 960), length, p - 7, 80)]
        t += step
    return make_score([notes])


@pytest.fixture(scope="module")
def two_styles(tmp_path_factory):
    """Fast pentatonic tunes and slow chorale-like chords: easy to tell apart."""
    root = tmp_path_factory.mktemp("style_eval")
    rng = np.random.default_rng(0)
    for name, scale, step, chord in (("pentatonic", [60, 62, 64, 67, 69], 0.25, False),
                                     ("chords", [60, 62, 64, 65, 67, 69, 71], 1.0, True)):
        (root / "in" / name).mkdir(parents=True)
        for i in range(24):
            write_score(melody(rng, scale, step, chord=chord), root / "in" / name / f"{i}.mid")
    store = cadenza.prepare(root / "in", root / "store", styles_from_folders=True, workers=1, progress=False,
                            valid_fraction=0.15, test_fraction=0.25).store
    return root, store


def test_features_are_finite_and_describe_what_they_say():
    assert style_features(Notes.empty()).shape == (N_FEATURES,) and not style_features(Notes.empty()).any()
    n = Notes.from_arrays([0, 0.5, 1.0, 1.5], [0.5, 1.0, 1.5, 2.0], [60, 62, 64, 67], [80] * 4)
    f = style_features(n)
    assert np.isfinite(f).all() and f[:12].sum() == pytest.approx(1.0)
    assert f[12:24].tolist()[:4] == [0.25] * 4 and f[16] == 0  # four pitch classes, equally often
    assert len(excerpt(n, 0.5, 1.0)) == 2 and excerpt(n, 0.5, 1.0).start.min() == 0


def test_classifier_separates_clear_styles_and_round_trips_as_json(two_styles):
    from cadenza.evaluation.styles import classifier_report

    _, store = two_styles
    clf, real = classifier_report(store, seconds=8.0)
    assert real["report"]["accuracy"] == 1.0 and set(clf.styles) == {"pentatonic", "chords"}
    again = StyleClassifier.from_dict(json.loads(json.dumps(clf.to_dict())))
    x = np.array([style_features(n) for _, n in real["test"]])
    assert again.predict(x) == clf.predict(x)


def test_evaluate_styles_reports_every_style(two_styles):
    root, store = two_styles
    cfg = resolve("tiny", overrides=["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64",
                                     "batch_size=4", "max_steps=4", "eval_every=4", "eval_windows=4",
                                     "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\""])
    cadenza.train(cfg, store.path, root / "run", progress=False)
    rep = cadenza.evaluate(root / "run", store.path, split="valid", styles=True, per_style=3, seconds=4.0,
                           guidance=2.0, out=root / "report")
    s = rep["styles"]
    assert set(s["styles"]) == {"pentatonic", "chords"} and 0 <= s["style_accuracy_guided"] <= 1
    assert all(0 <= v["overlap"] <= 1 and v["memorisation"]["max"] >= 0 for v in s["styles"].values())
    assert set(rep["nll"]["per_style"]) == {"pentatonic", "chords"}
    assert (root / "report" / "confusion-real.png").stat().st_size > 1000
    assert json.loads((root / "report" / "styles.json").read_text())["classifier_weights"]["styles"]
