"""The accompaniment benchmark's report (`evaluation.accompaniment`): every held-out melody comes
back in every variation, each result is measured, and with a classifier each is called a style;
live, each melody note is answered where it sounds."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.evaluation.accompaniment import AccompanyConfig, Variation, accompany_report
from cadenza.evaluation.styles import classifier_report


@pytest.mark.parametrize("live", [False, True])
def test_every_melody_comes_back_in_every_variation_and_each_result_is_called_a_style(metrical_run, live):
    checkpoint, store = metrical_run
    clf, _ = classifier_report(store, 30.0)
    cfg = AccompanyConfig(style="chorale", pieces=2, variations=[Variation(), Variation(-3, 1.2)], compile=False,
                          live=live)
    report = accompany_report(checkpoint, store, cfg, classifier=clf)
    assert report["pieces"] == 2 and report["accompaniments"] == 4
    assert report["melody_returned"] == 4  # given notes are the prompt's: they come back whatever the model
    assert {r["variation"] for r in report["rows"]} == {"+0 st, x1", "-3 st, x1.2"}
    assert all(r["called"] in store.styles for r in report["rows"])
    for side in ("generated", "real"):
        assert 0.0 <= report[side]["called_style"] <= 1.0
        assert 0.0 <= report[side]["consonant"] <= 1.0 or np.isnan(report[side]["consonant"])
    assert report["settings"]["live"] is live
    assert np.isfinite(report["melody_gain"]["gain"])
