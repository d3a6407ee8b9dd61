"""cadenza.evaluation.metrics: hand-computed values, NaN on empty, cross-checks against muspy, and
set distances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cadenza.data.midi import Notes, write_midi
from cadenza.evaluation import metrics as M

# At qpm 120 and 24 steps per beat: 1 beat = 0.5 s = 24 steps, 1 step = 1/48 s, 1 bar = 96 steps = 2 s.
# (start s, end s, pitch): a melody, a two-note passage, a two-beat rest, one short note.
PIECE = Notes.from_arrays(
    [0.0, 0.5, 1.0, 1.0, 1.5, 3.0],
    [0.5, 1.0, 2.0, 1.5, 2.0, 3.25],
    [60, 64, 67, 72, 71, 66],
    [80, 80, 80, 80, 80, 80],
)
# steps: C4 0-24, E4 24-48, G4 48-96, C5 48-72, B4 72-96, F#4 144-156
CHROMATIC = Notes.from_arrays(np.arange(12) * 0.25, np.arange(1, 13) * 0.25, np.arange(60, 72), np.full(12, 64))

EXPECTED = {
    "pitch_range": 72 - 60,
    "n_pitches_used": 6,
    "n_pitch_classes_used": 5,  # {0, 4, 6, 7, 11}; C twice
    "pitch_mean": 400 / 6,  # (60+64+67+72+71+66)/6
    # counts C:2, E, F#, G, B: 1 each -> -(1/3 log2 1/3) - 4 (1/6 log2 1/6) = log2(3)/3 + 2 log2(6)/3
    "pitch_class_entropy": math.log2(3) / 3 + 2 * math.log2(6) / 3,
    "scale_consistency": 1.0,  # all in G major
    # 48 steps with 1 note, 48 with 2, 48 silent, 12 with 1: (48 + 96 + 12) / (48 + 48 + 12)
    "polyphony": 156 / 108,
    "polyphony_rate": 0.0,  # never more than 2 pitches
    "note_density": 6 / 3.25,  # 6 notes over 0 .. 3.25 s
    "mean_ioi": 3.0 / 4,  # onsets 0, .5, 1, 1.5, 3 -> IOIs .5 .5 .5 1.5
    "mean_note_duration": 3.25 / 6,  # .5 + .5 + 1 + .5 + .5 + .25
    "empty_beat_rate": 2 / 7,  # ceil(156/24) = 7 beats; beats 4 and 5 (2.0-3.0 s) empty
    # 2 bars; onset positions bar 0 {0, 24, 48, 72}, bar 1 {48}: Hamming 3 -> 1 - 3/96
    "groove_consistency": 1 - 3 / 96,
}


def test_metrics_match_hand_computed_values():
    got = M.compute_all(PIECE)
    assert set(got) == set(M.METRICS) == set(EXPECTED)
    for name, value in EXPECTED.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_more_hand_computed_values():
    assert M.scale_consistency(CHROMATIC) == pytest.approx(7 / 12)  # any 7-note scale holds 7 of 12
    assert M.pitch_class_entropy(CHROMATIC) == pytest.approx(math.log2(12))
    assert M.pitch_class_entropy(Notes.from_arrays([0, 1], [1, 2], [60, 72], [9, 9])) == 0.0  # one class
    # More than 1 pitch: steps 48-96 of 156 total
    assert M.polyphony_rate(PIECE, threshold=1) == pytest.approx(48 / 156)
    np.testing.assert_allclose(M.inter_onset_intervals(PIECE), [0.5, 0.5, 0.5, 1.5])
    # onsets 0 and 0.0004 s are one chord (tolerance 1 ms): IOIs [1.0], not [0.0004, 0.9996]
    chord = Notes.from_arrays([0.0, 0.0004, 1.0], [1, 1, 2], [60, 64, 67], [9, 9, 9])
    np.testing.assert_allclose(M.inter_onset_intervals(chord), [1.0])
    # at 60 qpm a beat is 1 s = 24 steps: 4 beats (ceil(3.25)), beat 2 (2-3 s) empty
    assert M.empty_beat_rate(PIECE, qpm=60) == pytest.approx(1 / 4)
    # one bar of 2 s at qpm 120 -> NaN (needs two bars); with 1-beat bars (24 steps) 7 "bars":
    # bar patterns {0},{0},{0},{0},{},{},{0} -> Hamming 1+0+0+... = 2 over 6 * 24 steps
    assert math.isnan(M.groove_consistency(Notes.from_arrays([0], [1.9], [60], [9])))
    assert M.groove_consistency(PIECE, measure_resolution=24) == pytest.approx(1 - 2 / (6 * 24))


def test_nan_on_empty():
    for name, fn in M.METRICS.items():
        assert math.isnan(fn(Notes.empty())), name
    assert M.inter_onset_intervals(Notes.empty()).size == 0
    assert math.isnan(M.mean_ioi(Notes.from_arrays([0, 0], [1, 1], [60, 64], [9, 9])))  # one onset


def test_metrics_from_path_skip_drums(tmp_path):
    from conftest import make_score, write_score

    path = write_score(make_score([[(0, 480, 60, 90), (480, 480, 67, 90)], [(0, 120, 36, 100)]], drums=(1,)),
                       tmp_path / "drums.mid")
    got = M.compute_all(path)
    assert got["pitch_range"] == 7 and got["n_pitches_used"] == 2  # the kick drum (36) is not counted
    assert M.compute_all(write_midi(PIECE, tmp_path / "p.mid")) == pytest.approx(EXPECTED)


# -- muspy cross-check ------------------------------------------------------------------------------

muspy = pytest.importorskip("muspy")


def to_muspy(notes: Notes, qpm: float = M.DEFAULT_QPM, resolution: int = M.RESOLUTION):
    """The same notes as a muspy.Music: times in muspy steps via cadenza's own quantisation."""
    on, off = M.quantize(notes, qpm, resolution)
    track = muspy.Track(notes=[muspy.Note(time=int(a), pitch=int(p), duration=int(b - a), velocity=int(v))
                               for a, b, p, v in zip(on, off, notes.pitch, notes.velocity)])
    return muspy.Music(resolution=resolution, tracks=[track])


def random_notes(rng: np.random.Generator, n: int) -> Notes:
    """Random notes on the step grid, same-pitch overlaps included; no note ends on a beat line,
    where muspy's empty-beat and bar counts differ from cadenza's by design (see below)."""
    on = rng.integers(0, 400, n)
    off = on + rng.integers(1, 60, n)
    off += off % 24 == 0
    step = 1 / 48
    low = int(rng.integers(30, 80))  # a narrow range now and then: many same-pitch overlaps
    return Notes.from_arrays(on * step, off * step, rng.integers(low, low + rng.integers(2, 40), n),
                             rng.integers(1, 128, n))


@pytest.mark.parametrize("seed", range(10))
def test_matches_muspy(seed):
    rng = np.random.default_rng(seed)
    notes = random_notes(rng, int(rng.integers(1, 60)))
    music = to_muspy(notes)
    pairs = {
        "pitch_range": muspy.pitch_range, "n_pitches_used": muspy.n_pitches_used,
        "n_pitch_classes_used": muspy.n_pitch_classes_used, "pitch_class_entropy": muspy.pitch_class_entropy,
        "scale_consistency": muspy.scale_consistency, "polyphony": muspy.polyphony,
        "polyphony_rate": muspy.polyphony_rate, "empty_beat_rate": muspy.empty_beat_rate,
    }
    for name, fn in pairs.items():
        assert M.METRICS[name](notes) == pytest.approx(fn(music), abs=1e-12, nan_ok=True), name
    for threshold in (0, 1, 3):
        assert M.polyphony_rate(notes, threshold) == pytest.approx(muspy.polyphony_rate(music, threshold))
    for mres in (96, 72, 24):
        assert M.groove_consistency(notes, mres) == pytest.approx(
            muspy.groove_consistency(music, mres), nan_ok=True), mres


def test_documented_differences_from_muspy():
    """muspy 0.5 counts a note ending on a beat line as sounding in the next beat, and an extra
    bar when the piece ends on a bar line. PIECE's G4 ends at step 96 (a bar line)."""
    music = to_muspy(PIECE)
    assert muspy.empty_beat_rate(music) == pytest.approx(1 / 7)  # beat 4 (rest) marked "played"
    assert M.empty_beat_rate(PIECE) == pytest.approx(2 / 7)
    bar_end = Notes.from_arrays([0.0, 2.0], [2.0, 4.0], [60, 62], [9, 9])  # two whole bars
    assert M.groove_consistency(bar_end) == 1.0  # onsets at position 0 in both bars
    assert muspy.groove_consistency(to_muspy(bar_end), 96) == pytest.approx(1 - 1 / (96 * 2))  # a third, empty bar


# -- comparing sets -------------------------------------------------------------------------------------

def test_overlapping_area():
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, 300)
    assert M.overlapping_area(a, a) == pytest.approx(1.0, abs=1e-3)
    assert M.overlapping_area(a, a + 100) < 1e-6
    # two unit normals one apart overlap by 2 Phi(-1/2) = 0.617; KDE smooths a little
    b = rng.normal(1, 1, 2000)
    assert M.overlapping_area(rng.normal(0, 1, 2000), b) == pytest.approx(0.617, abs=0.05)
    assert M.overlapping_area(a, b) == pytest.approx(M.overlapping_area(b, a))
    assert M.overlapping_area(list(a) + [np.nan], a) == pytest.approx(1.0, abs=1e-3)  # NaNs dropped
    assert math.isnan(M.overlapping_area([np.nan], a)) and math.isnan(M.overlapping_area([], a))


def test_densities_are_scipys_gaussian_kde():
    from scipy.stats import gaussian_kde

    rng = np.random.default_rng(2)
    a, b = rng.normal(0, 1, 50), rng.gamma(2, 1, 80)
    _, _, (x, pa, pb) = M._densities(a, b)
    np.testing.assert_allclose(pa, gaussian_kde(a)(x), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(pb, gaussian_kde(b)(x), rtol=1e-9, atol=1e-15)


def test_overlapping_area_degenerate_sets():
    assert M.overlapping_area([4, 4, 4], [4.0]) == 1.0
    assert M.overlapping_area([4, 4, 4], [5, 5]) == 0.0
    # a constant set borrows the other's bandwidth: inside the other's range it overlaps, far away not
    assert 0.2 < M.overlapping_area([4, 4, 4], [2, 3, 4, 5, 6]) < 1.0
    assert M.overlapping_area([40, 40], [2, 3, 4, 5, 6]) < 1e-6


def test_kl_divergence():
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, 500)
    assert M.kl_divergence(a, a) == pytest.approx(0.0, abs=1e-6)
    assert M.kl_divergence(a, a + 1) == pytest.approx(0.5, abs=0.15)  # KL(N(0,1) || N(1,1)) = 1/2
    assert M.kl_divergence(a, a + 100) > 10
    assert M.kl_divergence([3, 3], [3]) == 0.0 and math.isinf(M.kl_divergence([3], [4]))


def test_compare_sets():
    shift = lambda n, k: Notes(n.start, n.end, n.pitch + k, n.velocity)  # noqa: E731
    gen = [PIECE, shift(PIECE, 2), CHROMATIC]
    res = M.compare_sets(gen, gen)
    assert set(res) == set(M.METRICS)
    assert set(res["pitch_range"]) == {"generated_mean", "generated_std", "reference_mean", "reference_std", "overlap"}
    assert res["pitch_range"]["generated_mean"] == pytest.approx((12 + 12 + 11) / 3)
    assert res["pitch_mean"]["overlap"] == pytest.approx(1.0, abs=1e-3)
    far = M.compare_sets([shift(PIECE, 40)], [PIECE, shift(PIECE, 1)], names=["pitch_mean"])
    assert far["pitch_mean"]["overlap"] < 1e-3
    # groove of a one-bar piece is NaN: skipped in the stats, not poisoning them
    one_bar = Notes.from_arrays([0], [1], [60], [9])
    g = M.compare_sets([PIECE, one_bar], [PIECE], names=["groove_consistency"])["groove_consistency"]
    assert g["generated_mean"] == pytest.approx(EXPECTED["groove_consistency"]) and g["generated_std"] == 0
