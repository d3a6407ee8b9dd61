"""SoundFont renderers: notes -> General MIDI -> float audio, each note on its program, drums on the kit.

Three renderers play a SoundFont: the ``fluidsynth`` program, pyfluidsynth in-process, and
midirenderer (a wheel from PyPI around the Rust synthesizer rustysynth), which plays the General
MIDI SoundFont inside the pretty_midi wheel when no other is installed. Each returns float32
frames (n, channels) at the asked sample rate, at the renderer's own level: `cadenza.listen.audio`
fits the length and normalises the level. docs/rendering.md says which is used when, and why.
"""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import symusic
from numpy.lib.stride_tricks import as_strided

from cadenza.data.midi import DRUMS, Notes, notes_to_score, score_to_bytes
from cadenza.env.tools import midirenderer, pyfluidsynth

FLUIDSYNTH_GAIN = 0.6
MIDIRENDERER_RATE = 48000  # midirenderer always renders 16-bit stereo at 48 kHz
DRUM_CHANNEL = 9  # General MIDI's channel 10
MELODIC_CHANNELS = tuple(c for c in range(16) if c != DRUM_CHANNEL)
# Every renderer here clamps to 16 bits inside, where no later normalisation can undo a clip: a
# clipped render is played again, 12 dB quieter each time, up to this many times.
RETRIES = 3
CLAMPED = 32767 / 32768  # a 16-bit sample at full scale


def _quieter(render: Callable[[int], list[np.ndarray]]) -> np.ndarray:
    """The mix of the parts `render(step)` plays `12 * step` dB below its usual level, at the first
    step at which no sample reached the clamp. Every part at one step, so they keep their balance."""
    for step in range(RETRIES + 1):
        parts = render(step)
        if max(np.abs(p).max(initial=0.0) for p in parts) < CLAMPED:
            break
    return _sum(parts)


def _gain(step: int) -> float:
    """FluidSynth's gain `12 * step` dB below its usual level."""
    return FLUIDSYNTH_GAIN * 10 ** (-12 * step / 20)


def _volume(step: int) -> int | None:
    """The channel volume (CC 7) `12 * step` dB below General MIDI's default 100 (SoundFont volume is
    40 log10(cc / 127) dB); None at step 0: the file sets none."""
    return round(100 * 10 ** (-12 * step / 40)) if step else None


def program_parts(notes: Notes) -> list[Notes]:
    """`notes` in parts that each fit one MIDI file's 16 channels: up to 15 programs, plus the drums
    in the first part. One part for all but the rarest pieces; the parts are rendered and summed."""
    if notes.program is None:
        return [notes]
    melodic = np.unique(notes.program[notes.program != DRUMS])
    n = len(MELODIC_CHANNELS)
    chunks = [melodic[i:i + n] for i in range(0, len(melodic), n)] or [melodic]
    return [notes.take(np.isin(notes.program, chunk) | ((notes.program == DRUMS) & (k == 0)))
            for k, chunk in enumerate(chunks)]


def pcm_frames(source: str | os.PathLike | bytes) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV (a path or its bytes) as float32 frames (n, channels) in [-1, 1), its rate."""
    name = "<bytes>" if isinstance(source, bytes) else str(source)
    with wave.open(io.BytesIO(source) if isinstance(source, bytes) else str(source), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{name}: only 16-bit PCM WAV is supported, not {8 * w.getsampwidth()}-bit")
        ch, sr, frames = w.getnchannels(), w.getframerate(), w.readframes(w.getnframes())
    return (np.frombuffer(frames, "<i2").reshape(-1, ch) / 32768.0).astype(np.float32), sr


def _sum(parts: list[np.ndarray]) -> np.ndarray:
    """Parts of one piece mixed: the shorter ones padded with silence."""
    out = np.zeros((max(p.shape[0] for p in parts), parts[0].shape[1]), np.float32)
    for p in parts:
        out[:p.shape[0]] += p
    return out


def _midi_bytes(notes: Notes, until: float | None = None, volume: int | None = None) -> bytes:
    """The MIDI file of `notes` (`notes_to_score`); with `until`, a no-op event (sustain off) at that
    time so a renderer that stops at the last event plays on to it; with `volume`, CC 7 on every track."""
    score = notes_to_score(notes).to("second")
    for track in score.tracks if volume is not None else ():
        track.controls.append(symusic.ControlChange(0.0, 7, volume, ttype="second"))
    if until is not None and len(score.tracks):
        score.tracks[0].controls.append(symusic.ControlChange(until, 64, 0, ttype="second"))
    return score_to_bytes(score.to("tick"))


def midirenderer_render(notes: Notes, sf: Path, sample_rate: int, until: float) -> np.ndarray:
    """midirenderer's audio of `notes` up to `until` seconds, resampled from 48 kHz to `sample_rate`."""
    module = midirenderer()
    sf2 = sf.read_bytes()  # read per call: a cache would hold the SoundFont (6-140 MB) in every server
    mix = _quieter(lambda step: [pcm_frames(module.render_wave_from(sf2, _midi_bytes(part, until, _volume(step))))[0]
                                 for part in program_parts(notes)])
    return resample(mix, MIDIRENDERER_RATE, sample_rate)


def resample(frames: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Frames (n, channels) from `rate_in` to `rate_out` by polyphase filtering: scipy's
    `resample_poly` (its Kaiser beta 5 lowpass) in numpy alone, because importing scipy.signal
    would hold 65 MB in every studio server for this one function."""
    if rate_in == rate_out:
        return frames
    g = np.gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g
    half = 10 * max(up, down)
    fc = 1.0 / max(up, down)
    h = fc * np.sinc(fc * np.arange(-half, half + 1)) * np.kaiser(2 * half + 1, 5.0)
    pre = down - half % down  # zeros before h: its delay becomes a whole number of output samples
    h = np.concatenate((np.zeros(pre), h / h.sum() * up))
    taps = -(-len(h) // up)
    h = np.concatenate((h, np.zeros(taps * up - len(h))))
    n_out = -(-len(frames) * up // down)
    x = np.concatenate((np.zeros((taps, frames.shape[1])), np.asarray(frames, np.float64),
                        np.zeros((taps + down, frames.shape[1]))))
    y = np.empty((n_out, frames.shape[1]))
    first = (half + pre) // down  # output samples of the filter's delay, dropped
    for k in range(min(up, n_out)):  # outputs k, k + up, ...: one phase of h each
        t = (k + first) * down
        rows = len(range(k, n_out, up))
        start = t // up + 1  # the oldest input sample of the first window, after the padding
        win = as_strided(x[start:], (rows, taps, x.shape[1]), (x.strides[0] * down, *x.strides), writeable=False)
        y[k::up] = np.einsum("rjc,j->rc", win, h[t % up::up][::-1])
    return y.astype(np.float32)


def fluidsynth_cli(midi: Path, sf: Path, sample_rate: int) -> np.ndarray:
    """The ``fluidsynth`` program's rendering of a MIDI file (its own programs, drums, pedals)."""
    return _quieter(lambda step: [_fluidsynth_run(midi, sf, sample_rate, _gain(step))])


def _fluidsynth_run(midi: Path, sf: Path, sample_rate: int, gain: float) -> np.ndarray:
    """One run of the ``fluidsynth`` program on a MIDI file, to a 16-bit WAV read back as frames."""
    with tempfile.TemporaryDirectory(prefix="cadenza-fs-") as d:
        wav = Path(d) / "out.wav"
        cmd = ["fluidsynth", "-ni", "-g", f"{gain:.4g}", "-F", str(wav), "-T", "wav", "-O", "s16",
               "-r", str(sample_rate), str(sf), str(midi)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0 or not wav.is_file():
            raise RuntimeError(f"fluidsynth failed ({res.returncode}): {(res.stderr or res.stdout).strip()[-300:]}")
        return pcm_frames(wav)[0]


def fluidsynth_notes(notes: Notes, sf: Path, sample_rate: int) -> np.ndarray:
    """The ``fluidsynth`` program's rendering of `notes`, through the MIDI file of each part."""
    with tempfile.TemporaryDirectory(prefix="cadenza-fs-") as d:
        files = []
        for k, part in enumerate(program_parts(notes)):
            files.append(Path(d) / f"part-{k}.mid")
            files[-1].write_bytes(_midi_bytes(part))
        return _quieter(lambda step: [_fluidsynth_run(f, sf, sample_rate, _gain(step)) for f in files])


def pyfluidsynth_render(notes: Notes, sf: Path, sample_rate: int, n: int) -> np.ndarray:
    """pyfluidsynth's rendering of `notes` (n frames, stereo), each program on its own channel."""
    return _quieter(lambda step: [_pyfluidsynth_part(part, sf, sample_rate, n, _gain(step))
                                  for part in program_parts(notes)])


def _pyfluidsynth_part(part: Notes, sf: Path, sample_rate: int, n: int, gain: float) -> np.ndarray:
    """One part (up to 15 programs and the drums) played by a fresh in-process synthesizer."""
    synth = pyfluidsynth().Synth(gain=gain, samplerate=float(sample_rate))
    try:
        sfid = synth.sfload(str(sf))
        channel = _select_programs(part, lambda ch, bank, p: synth.program_select(ch, sfid, bank, p))
        return _play(part, channel, synth, sample_rate, n)
    finally:
        synth.delete()


def _select_programs(part: Notes, select: Callable[[int, int, int], object]) -> np.ndarray:
    """Each note's channel: a melodic channel per program in order, drums on the drum channel
    (SoundFont bank 128); `select(channel, bank, program)` sets each channel's instrument."""
    programs = np.unique(part.programs)
    channel_of = {}
    for program, ch in zip(programs[programs != DRUMS], MELODIC_CHANNELS):
        select(ch, 0, int(program))
        channel_of[int(program)] = ch
    if (programs == DRUMS).any():
        select(DRUM_CHANNEL, 128, 0)
        channel_of[DRUMS] = DRUM_CHANNEL
    return np.array([channel_of[int(p)] for p in part.programs], np.int64)


def _play(notes: Notes, channel: np.ndarray, synth, sr: int, n: int) -> np.ndarray:
    """Note-ons and note-offs sent at their sample times (offs first at a tie), n frames pulled."""
    on = np.rint(notes.start * sr).astype(np.int64)
    off = np.rint(notes.end * sr).astype(np.int64)
    times = np.concatenate((off, on))
    kinds = np.concatenate((np.zeros(len(notes)), np.ones(len(notes))))  # offs before ons at a tie
    pitch, vel, chan = np.tile(notes.pitch, 2), np.tile(notes.velocity, 2), np.tile(channel, 2)
    chunks, now = [], 0
    for i in np.lexsort((kinds, times)):
        if times[i] > now:
            chunks.append(synth.get_samples(int(times[i] - now)))
            now = int(times[i])
        if kinds[i]:
            synth.noteon(int(chan[i]), int(pitch[i]), int(vel[i]))
        else:
            synth.noteoff(int(chan[i]), int(pitch[i]))
    if n > now:
        chunks.append(synth.get_samples(n - now))
    if not chunks:
        return np.zeros((0, 2), np.float32)
    return (np.concatenate(chunks).astype(np.float32) / 32768.0).reshape(-1, 2)
