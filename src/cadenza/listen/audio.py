"""Audio: notes or MIDI -> mono float samples -> 16-bit WAV.

Audio comes from the first SoundFont renderer installed, each note on its General MIDI program:
FluidSynth with a system SoundFont (the ``fluidsynth`` program, else the pyfluidsynth module),
then midirenderer from PyPI with the SoundFont in the pretty_midi wheel, and a small numpy additive
synthesizer as the last resort, so rendering never fails for want of a package. Every backend
returns the same length: last note end + `TAIL_SECONDS`; a SoundFont rendering is peak-normalised
to `PEAK` (-1 dBFS), so no WAV clips. See docs/rendering.md. Files are written atomically.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from cadenza.atomic import atomic_path
from cadenza.data.midi import DRUMS, Notes, read_notes, score_to_notes

# The choice of synthesizer lives with the other optional tools, where `cadenza doctor` reads it too;
# it is part of this module's API.
from cadenza.env.tools import BACKENDS, RENDERERS, choose_backend, describe_backend  # noqa: F401
from cadenza.listen import soundfont as renderers

SAMPLE_RATE = 22050
TAIL_SECONDS = 1.0  # kept after the last note end so releases and reverb can ring out
RELEASE_SECONDS = 0.3  # the numpy synth's release: a note fades to silence this long after its end
PEAK = 10 ** (-1 / 20)  # -1 dBFS: a SoundFont rendering's peak after normalisation


def n_samples(notes: Notes, sample_rate: int = SAMPLE_RATE) -> int:
    """Length of rendered audio: round((last note end + TAIL_SECONDS) * sample_rate)."""
    return round((notes.duration + TAIL_SECONDS) * sample_rate)


def numpy_synth(notes: Notes, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A plucked-string additive synth: six harmonics, each decaying faster than the one below.

    Harmonic k has amplitude 1/k^1.5 and decays at rate d (1 + (k-1)/2), d = 0.6 + 2.5 f/kHz per
    second (time constant 1/d: 1.4 s at A1, 0.6 s at A4, 0.2 s at A6). Envelope: 5 ms linear
    attack, then a linear release over RELEASE_SECONDS after the note ends. Amplitude
    ~ (velocity/127)^1.5. The mix is scaled down only if it would clip, so velocity stays audible.
    """
    sr = sample_rate
    out = np.zeros(n_samples(notes, sr), np.float32)
    n_rel = round(RELEASE_SECONDS * sr)
    for s, e, p, v in zip(notes.start.tolist(), notes.end.tolist(), notes.pitch.tolist(), notes.velocity.tolist()):
        i0 = round(s * sr)
        n_on = max(round(e * sr) - i0, 1)
        n = min(n_on + n_rel, out.size - i0)
        if n <= 0:
            continue
        idx = np.arange(n)
        f = 440.0 * 2.0 ** ((p - 69) / 12.0)
        decay = 0.6 + 2.5 * f / 1000.0
        phase = (2 * np.pi * f / sr) * idx  # float64: long notes keep an accurate phase
        # sin(k x) by the Chebyshev recurrence and each decay as a running product: 4 transcendental
        # functions per note instead of 12 (2x faster on a 27-minute MAESTRO performance)
        sin_k, sin_prev = np.sin(phase).astype(np.float32), np.zeros(n, np.float32)
        two_cos = (2 * np.cos(phase)).astype(np.float32)
        decay_k = np.exp(-decay / sr * idx).astype(np.float32)
        faster = np.exp(-0.5 * decay / sr * idx).astype(np.float32)
        voice = sin_k * decay_k
        for k in range(2, 7):
            if k * f >= sr / 2:  # no harmonics above Nyquist (aliasing)
                break
            sin_k, sin_prev = two_cos * sin_k - sin_prev, sin_k
            decay_k *= faster
            voice += sin_k * decay_k / np.float32(k**1.5)
        env = np.minimum(idx / (0.005 * sr), 1.0) * np.clip(1.0 - (idx - n_on) / n_rel, 0.0, 1.0)
        out[i0:i0 + n] += (0.12 * (v / 127.0) ** 1.5 * env).astype(np.float32) * voice
    peak = float(np.abs(out).max(initial=0.0))
    if peak > 0.95:
        out *= np.float32(0.95 / peak)
    return out


def _fit_length(audio: np.ndarray, n: int, sr: int) -> np.ndarray:
    """Pad with silence or cut to n samples; a cut ends with a 50 ms fade so it does not click."""
    if audio.size >= n:
        audio = audio[:n].copy()
        fade = min(int(0.05 * sr), n)
        audio[n - fade:] *= np.linspace(1.0, 0.0, fade, dtype=audio.dtype)
        return audio
    return np.concatenate((audio, np.zeros(n - audio.size, audio.dtype)))


def with_programs(source) -> Notes:
    """`Notes` from `Notes`, a symusic Score, or a MIDI path/bytes, each note keeping its track's
    program and drums kept (`DRUMS`), so every instrument is heard as itself."""
    if isinstance(source, Notes):
        return source
    if isinstance(source, (str, os.PathLike, bytes, bytearray)):
        return read_notes(source, programs=True)[0]
    return score_to_notes(source, programs=True)[0]


def _soundfont_audio(used: str, source, notes: Notes, sf: Path, sr: int, n: int) -> np.ndarray:
    """The named SoundFont renderer's audio of `notes`, mixed to mono, before fitting and levels."""
    if used == "midirenderer":
        frames = renderers.midirenderer_render(notes, sf, sr, until=n / sr)
    elif used == "pyfluidsynth":
        frames = renderers.pyfluidsynth_render(notes, sf, sr, n)
    elif isinstance(source, (str, os.PathLike)):
        frames = renderers.fluidsynth_cli(Path(source), sf, sr)  # the file itself: its pedals and controllers too
    else:
        frames = renderers.fluidsynth_notes(notes, sf, sr)
    return frames.mean(axis=1)


def synthesize(notes_or_path, sample_rate: int = SAMPLE_RATE, soundfont: str | os.PathLike | None = None,
               backend: str = "auto") -> tuple[np.ndarray, str]:
    """Render notes (or a MIDI path / bytes / symusic Score) to mono float32 audio in [-1, 1].

    Returns (audio, backend used). Length is always `n_samples` = round((last note end +
    TAIL_SECONDS) * sample_rate). ``backend``: see `choose_backend`. A SoundFont renderer plays
    each note's General MIDI program and the drums, and its audio peaks at `PEAK`; the numpy synth
    plays every pitched note with one voice and keeps its own level (dynamics between renders).
    """
    notes = with_programs(notes_or_path)
    used, sf = choose_backend(backend, soundfont)
    n = n_samples(notes, sample_rate)
    if used == "numpy" or not len(notes):
        pitched = notes if notes.program is None else notes.take(notes.program != DRUMS)
        return _fit_length(numpy_synth(pitched, sample_rate), n, sample_rate), used
    audio = _fit_length(_soundfont_audio(used, notes_or_path, notes, sf, sample_rate, n), n, sample_rate)
    peak = float(np.abs(audio).max(initial=0.0))
    return (audio * np.float32(PEAK / peak) if peak > 0 else audio), used


def write_wav(audio: np.ndarray, path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write float audio in [-1, 1] (shape (n,) or (n, channels)) as 16-bit PCM WAV, atomically."""
    a = np.asarray(audio, dtype=np.float64)
    a = a[:, None] if a.ndim == 1 else a
    pcm = np.rint(np.clip(a, -1.0, 1.0) * 32767).astype("<i2")
    with atomic_path(path) as tmp, wave.open(str(tmp), "wb") as w:
        w.setnchannels(a.shape[1])
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
    return Path(path)


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV as mono float32 in [-1, 1] (channels averaged), and its sample rate."""
    frames, sr = renderers.pcm_frames(path)
    return frames.mean(axis=1), sr
