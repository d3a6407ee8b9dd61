"""Musical metrics of one piece, and distances between sets of pieces (Yang & Lerch 2020).

Every metric is a pure function of `Notes` returning a float, NaN on empty input. Drums never
reach them: `read_notes` / `score_to_notes` drop drum tracks, which is how muspy's "drum tracks
are ignored" is honoured here. Definitions follow muspy 0.5 (``muspy/metrics/metrics.py``) where
it has the metric, and Yang & Lerch 2020 for the set comparison. See docs/metrics.md.

Time grid. Metrics about beats and bars need a tempo that performance MIDI does not carry: notes
are in seconds. They take ``qpm`` (beats per minute, default 120) and ``resolution`` (time steps
per beat, default 24 = muspy's default), and quantise with ``step = round(seconds * qpm/60 *
resolution)``, so a piece maps onto exactly the time steps of a ``muspy.Music`` with that
resolution (`quantize`). At the defaults one step is 1/48 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from cadenza.data.midi import Notes, as_notes

DEFAULT_QPM = 120.0
RESOLUTION = 24  # time steps per beat, muspy's default
BEATS_PER_MEASURE = 4
ONSET_TOLERANCE = 1e-3  # seconds: onsets closer than this are one chord (symusic rounds ticks to seconds)

NAN = float("nan")


def quantize(notes: Notes, qpm: float = DEFAULT_QPM, resolution: int = RESOLUTION) -> tuple[np.ndarray, np.ndarray]:
    """Onsets and offsets in integer time steps of ``resolution`` per beat at ``qpm``."""
    scale = qpm / 60.0 * resolution
    return np.rint(notes.start * scale).astype(np.int64), np.rint(notes.end * scale).astype(np.int64)


# -- pitch ----------------------------------------------------------------------------------------

def pitch_range(notes: Notes) -> float:
    """max(pitch) - min(pitch), in semitones (muspy ``pitch_range``, which returns 0 when empty)."""
    return float(notes.pitch.max() - notes.pitch.min()) if len(notes) else NAN


def n_pitches_used(notes: Notes) -> float:
    """Number of distinct MIDI pitches (muspy ``n_pitches_used``; Yang & Lerch 2020 "pitch count")."""
    return float(np.unique(notes.pitch).size) if len(notes) else NAN


def n_pitch_classes_used(notes: Notes) -> float:
    """Number of distinct pitch classes, pitch mod 12 (muspy ``n_pitch_classes_used``)."""
    return float(np.unique(notes.pitch % 12).size) if len(notes) else NAN


def pitch_mean(notes: Notes) -> float:
    """Mean MIDI pitch of the notes (each note counts once, whatever its length)."""
    return float(notes.pitch.mean()) if len(notes) else NAN


def pitch_class_entropy(notes: Notes) -> float:
    """Shannon entropy, in bits, of the note-count pitch-class histogram (muspy).

    H = -sum_{i=0..11} P(pc = i) log2 P(pc = i), P from note counts (not durations); 0 for a
    single pitch class, log2(12) ~ 3.585 for all twelve equally often.
    Ref: S.-L. Wu and Y.-H. Yang, "The Jazz Transformer on the Front Line", ISMIR 2020.
    """
    if not len(notes):
        return NAN
    p = np.bincount(notes.pitch % 12, minlength=12) / len(notes)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


_MAJOR = np.array([1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1], bool)
_MINOR = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0], bool)  # natural minor, as muspy
SCALES = np.stack([np.roll(s, root) for s in (_MAJOR, _MINOR) for root in range(12)])  # (24, 12)


def scale_consistency(notes: Notes) -> float:
    """Largest fraction of notes that lie in one of the 24 major / natural-minor scales (muspy).

    max_{root, mode} #(notes in scale) / #(notes); 1.0 for diatonic music.
    Ref: O. Mogren, "C-RNN-GAN: Continuous recurrent neural networks with adversarial
    training", NeurIPS Constructive Machine Learning Workshop, 2016.
    """
    if not len(notes):
        return NAN
    counts = np.bincount(notes.pitch % 12, minlength=12)
    return float((SCALES @ counts).max() / len(notes))


# -- time grid (muspy time steps) -------------------------------------------------------------------

def _sounding(notes: Notes, qpm: float, resolution: int) -> np.ndarray:
    """Distinct pitches sounding at each time step: muspy's binary piano roll summed over pitch.

    Same-pitch overlaps are merged first (a roll cell is on or off), then one +1/-1 per interval;
    O(n log n + steps), where a (steps x 128) roll took ~50 ms for a 10-minute piece.
    """
    on, off = quantize(notes, qpm, resolution)
    length = int(off.max()) if len(notes) else 0  # muspy: the last offset, zero-length notes included
    keep = off > on  # shorter than half a step: not on the grid, as in muspy
    order = np.lexsort((on[keep], notes.pitch[keep]))
    on, off, pitch = on[keep][order], off[keep][order], notes.pitch[keep][order]
    # furthest offset so far within each pitch (pitch * span keeps the running max per pitch)
    span = length + 1
    reach = np.maximum.accumulate(pitch * span + off) - pitch * span
    first = np.ones(on.size, bool)
    first[1:] = (pitch[1:] != pitch[:-1]) | (on[1:] > reach[:-1])
    last = np.append(np.flatnonzero(first)[1:] - 1, on.size - 1) if on.size else np.zeros(0, np.int64)
    delta = np.bincount(on[first], minlength=span) - np.bincount(reach[last], minlength=span)
    return np.cumsum(delta[:-1])


def polyphony(notes: Notes, qpm: float = DEFAULT_QPM, resolution: int = RESOLUTION) -> float:
    """Mean number of pitches sounding, over the time steps where at least one sounds (muspy).

    polyphony = #(pitch-steps on) / #(time steps with >= 1 pitch on); 1.0 for a melody, ~4 for
    a chorale. Notes shorter than half a step vanish on the grid, as in muspy.
    """
    counts = _sounding(notes, qpm, resolution)
    active = np.count_nonzero(counts)
    return float(counts.sum() / active) if active else NAN


def polyphony_rate(notes: Notes, threshold: int = 2, qpm: float = DEFAULT_QPM,
                   resolution: int = RESOLUTION) -> float:
    """Fraction of all time steps (silent ones included) where MORE than ``threshold`` pitches sound.

    #(steps with > threshold pitches on) / #(steps). muspy's code and default (MuseGAN's
    "polyphonicity": more than two pitches); muspy's docstring says "multiple", its code is ``>``.
    Ref: H.-W. Dong et al., "MuseGAN", AAAI 2018.
    """
    counts = _sounding(notes, qpm, resolution)
    return float(np.count_nonzero(counts > threshold) / counts.size) if counts.size else NAN


def empty_beat_rate(notes: Notes, qpm: float = DEFAULT_QPM, resolution: int = RESOLUTION) -> float:
    """Fraction of the piece's beats in which no note sounds.

    #(empty beats) / #(beats), beats = ceil(last offset / beat). A note sounds in beat b when it
    overlaps [b, b+1) beats. Differs from muspy 0.5 only at beat boundaries: muspy counts a note
    ending exactly on a beat line as sounding in the next beat too (so the rest after a crotchet
    is "not empty") and adds one extra beat when the piece ends on a beat line.
    Ref: H.-W. Dong, W.-Y. Hsiao and Y.-H. Yang, "Pypianoroll", ISMIR LBD 2018.
    """
    if not len(notes):
        return NAN
    on, off = quantize(notes, qpm, resolution)
    off = np.maximum(off, on + 1)  # a note shorter than one step was still played
    n_beats = -(-int(off.max()) // resolution)
    delta = np.bincount(on // resolution, minlength=n_beats + 1) - np.bincount(
        (off - 1) // resolution + 1, minlength=n_beats + 1)
    return float(np.count_nonzero(np.cumsum(delta[:-1]) == 0) / n_beats)


def groove_consistency(notes: Notes, measure_resolution: int | None = None, qpm: float = DEFAULT_QPM,
                       resolution: int = RESOLUTION) -> float:
    """1 - mean Hamming distance between the onset patterns of neighbouring bars (muspy).

    G_i is the binary onset vector of bar i (``measure_resolution`` steps, default 4 beats);
    groove = 1 - sum_i d(G_i, G_{i+1}) / (measure_resolution * (T - 1)), T = number of bars =
    ceil(last offset / bar). NaN below two bars. muspy uses T = floor(last offset / bar) + 1,
    one more bar (empty) when the piece ends exactly on a bar line.
    Ref: S.-L. Wu and Y.-H. Yang, "The Jazz Transformer on the Front Line", ISMIR 2020.
    """
    mres = int(measure_resolution or BEATS_PER_MEASURE * resolution)
    if mres < 1:
        raise ValueError("measure_resolution must be a positive number of time steps")
    if not len(notes):
        return NAN
    on, off = quantize(notes, qpm, resolution)
    n_bars = max(-(-int(off.max()) // mres), int(on.max()) // mres + 1)
    if n_bars < 2:
        return NAN
    grooves = np.zeros((n_bars, mres), bool)
    grooves[on // mres, on % mres] = True
    return float(1.0 - np.count_nonzero(grooves[:-1] != grooves[1:]) / (mres * (n_bars - 1)))


# -- time in seconds ------------------------------------------------------------------------------

def note_density(notes: Notes) -> float:
    """Notes per second, n / (max(end) - min(start)): leading silence does not dilute it."""
    return float(len(notes) / (notes.end.max() - notes.start.min())) if len(notes) else NAN


def inter_onset_intervals(notes: Notes, tolerance: float = ONSET_TOLERANCE) -> np.ndarray:
    """Seconds between consecutive distinct onsets (a chord is one onset).

    Onsets within ``tolerance`` of the previous one join its chord. Yang & Lerch 2020 "IOI".
    """
    onsets = np.unique(notes.start)
    if onsets.size < 2:
        return np.zeros(0)
    leaders = onsets[np.concatenate(([True], np.diff(onsets) > tolerance))]
    return np.diff(leaders)


def mean_ioi(notes: Notes, tolerance: float = ONSET_TOLERANCE) -> float:
    """Mean inter-onset interval in seconds (`inter_onset_intervals`); NaN below two onsets.

    Ref: L.-C. Yang and A. Lerch, "On the evaluation of generative models in music", NCA 2020.
    """
    ioi = inter_onset_intervals(notes, tolerance)
    return float(ioi.mean()) if ioi.size else NAN


def mean_note_duration(notes: Notes) -> float:
    """Mean of (end - start) in seconds (after sustain pedal, when read with `read_notes`)."""
    return float((notes.end - notes.start).mean()) if len(notes) else NAN


METRICS: dict[str, Callable[..., float]] = {f.__name__: f for f in (
    pitch_range, n_pitches_used, n_pitch_classes_used, pitch_mean, pitch_class_entropy, scale_consistency,
    polyphony, polyphony_rate, note_density, mean_ioi, mean_note_duration, empty_beat_rate, groove_consistency,
)}
_GRID_METRICS = {"polyphony", "polyphony_rate", "empty_beat_rate", "groove_consistency"}


def compute_all(notes, names: Sequence[str] | None = None, qpm: float = DEFAULT_QPM,
                resolution: int = RESOLUTION) -> dict[str, float]:
    """Every metric (or those in ``names``) of one piece: `Notes`, a symusic Score or a MIDI path."""
    notes = as_notes(notes)
    grid = {"qpm": qpm, "resolution": resolution}
    return {n: METRICS[n](notes, **grid) if n in _GRID_METRICS else METRICS[n](notes) for n in names or METRICS}


# -- comparing sets (Yang & Lerch 2020) ------------------------------------------------------------

def _mixture(x: np.ndarray, centres: np.ndarray, bw: float) -> np.ndarray:
    """Mean of Gaussians N(centre, bw) on x; what gaussian_kde.evaluate computes in 1-D, ~50x faster."""
    out = np.zeros_like(x)
    for c in np.array_split(centres, centres.size * x.size // 4_000_000 + 1):  # <= 32 MB at a time
        out += np.exp(-0.5 * ((x[:, None] - c[None, :]) / bw) ** 2).sum(axis=1)
    return out / (centres.size * bw * math.sqrt(2 * math.pi))


def _densities(a, b):
    """Finite values of two sets and their Gaussian KDEs on a common grid (x, p_a, p_b).

    Bandwidths are scipy.stats.gaussian_kde's (Scott's rule). The grid is None when a set is empty
    (after dropping NaN) or both are constant. A constant set (or one value) has no spread to take
    a bandwidth from: it becomes one Gaussian at its value with the other set's bandwidth.
    """
    from scipy.stats import gaussian_kde

    a, b = (np.asarray(v, np.float64).ravel() for v in (a, b))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    bws = [float(np.sqrt(gaussian_kde(v).covariance[0, 0])) if v.size > 1 and np.ptp(v) > 0 else 0.0
           for v in (a, b)]
    if not a.size or not b.size or max(bws) == 0:
        return a, b, None
    bws = [bw or max(bws) for bw in bws]
    lo, hi = min(a.min(), b.min()) - 5 * max(bws), max(a.max(), b.max()) + 5 * max(bws)
    # >= 8 points per narrowest bandwidth, so a sharp density is not under-sampled
    x = np.linspace(lo, hi, int(np.clip(8 * (hi - lo) / min(bws), 2048, 1 << 17)))
    return a, b, (x, _mixture(x, a, bws[0]), _mixture(x, b, bws[1]))


def overlapping_area(a: Sequence[float], b: Sequence[float]) -> float:
    """Overlapping area of the Gaussian-KDE densities of two sets of metric values.

    OA = integral of min(p_a(x), p_b(x)) dx, in [0, 1]: 1 for identical distributions, 0 for
    disjoint ones. NaNs are dropped; NaN if a set is then empty. The grid extends 5 bandwidths past
    both sets, so identical sets give ~1 (the paper's code integrates only between the data
    extremes). Two constant sets: 1.0 if equal, else 0.0.
    Ref: L.-C. Yang and A. Lerch, "On the evaluation of generative models in music", Neural
    Computing and Applications 32, 2020.
    """
    from scipy.integrate import trapezoid

    a, b, d = _densities(a, b)
    if d is None:
        return float(np.isclose(a[0], b[0])) if a.size and b.size else NAN
    x, pa, pb = d
    return float(np.clip(trapezoid(np.minimum(pa, pb), x), 0.0, 1.0))


def kl_divergence(a: Sequence[float], b: Sequence[float], floor: float = 1e-12) -> float:
    """KL(P_a || P_b) in nats between the KDE densities of two sets (Yang & Lerch 2020).

    integral p_a log(p_a / p_b) dx, with p_b floored at ``floor`` so disjoint supports give a large
    finite number, not inf. Two constant sets: 0 if equal, inf otherwise. Not symmetric.
    """
    from scipy.integrate import trapezoid

    a, b, d = _densities(a, b)
    if d is None:
        return (0.0 if np.isclose(a[0], b[0]) else math.inf) if a.size and b.size else NAN
    x, pa, pb = d
    integrand = np.where(pa > 0, pa * np.log(np.maximum(pa, floor) / np.maximum(pb, floor)), 0.0)
    return float(max(trapezoid(integrand, x), 0.0))


def compare_sets(generated: Sequence, reference: Sequence, names: Sequence[str] | None = None,
                 qpm: float = DEFAULT_QPM, resolution: int = RESOLUTION) -> dict[str, dict[str, float]]:
    """Each metric's mean and std over both sets and the overlapping area of its distributions.

    Items are `Notes`, symusic Scores or MIDI paths. Means and stds skip NaN pieces (e.g. groove
    of a one-bar piece); std is the population std (ddof=0).
    """
    names = list(names or METRICS)
    gen = [compute_all(n, names, qpm, resolution) for n in generated]
    ref = [compute_all(n, names, qpm, resolution) for n in reference]
    out = {}
    for name in names:
        g, r = (np.array([m[name] for m in ms], np.float64) for ms in (gen, ref))
        g, r = g[np.isfinite(g)], r[np.isfinite(r)]
        out[name] = {
            "generated_mean": float(g.mean()) if g.size else NAN,
            "generated_std": float(g.std()) if g.size else NAN,
            "reference_mean": float(r.mean()) if r.size else NAN,
            "reference_std": float(r.std()) if r.size else NAN,
            "overlap": overlapping_area(g, r),
        }
    return out


def mean_overlap(generated: Sequence, reference: Sequence) -> float:
    """The overlapping area of two sets' metric distributions (`compare_sets`), averaged over the
    metrics that have one: one number for how alike two sets of pieces are."""
    vals = [m["overlap"] for m in compare_sets(generated, reference).values() if np.isfinite(m["overlap"])]
    return float(np.mean(vals)) if vals else NAN
