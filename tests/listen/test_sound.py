"""What a listener hears from the SoundFont renderers, checked from the audio itself: each note starts
on time and at its pitch, each General MIDI program sounds like itself (drums too, and past the 15
melodic channels of one MIDI file), and no WAV clips. The default path runs wherever a SoundFont
renderer is installed (midirenderer from pip on a fresh clone), and every other renderer installed too."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from cadenza.cli import main as cadenza_main
from cadenza.data.midi import DRUMS, Notes, write_midi
from cadenza.env import tools
from cadenza.listen import audio as audio_mod
from cadenza.listen.audio import PEAK, RENDERERS, choose_backend, describe_backend, read_wav, synthesize
from cadenza.listen.render import render_file

SR = 22050
PIANO, TRUMPET, FLUTE = 0, 56, 73
QUARTER_TONE = 50  # cents


NO_RENDERER = "no SoundFont renderer installed (pip install midirenderer pretty_midi)"
# the default path first, then every other renderer installed here
SOUNDFONT_PATHS = ["auto"] + [b for b in RENDERERS if tools.available(b) and b != choose_backend()[0]]
needs_soundfont = pytest.mark.skipif(choose_backend()[0] == "numpy", reason=NO_RENDERER)
needs_midirenderer = pytest.mark.skipif(not tools.available("midirenderer"),
                                        reason="midirenderer or pretty_midi not installed")


def known_piece() -> Notes:
    """A C major scale on piano from 0.5 s (silence before it), then C5 twice on the flute and twice on
    the trumpet, and a G4 and an E4 on each: every note 0.35-0.45 s long with a gap after it."""
    scale = [60, 62, 64, 65, 67, 69, 71, 72]
    start = [0.5 + 0.5 * i for i in range(8)] + [4.75 + 0.75 * i for i in range(8)]
    pitch = scale + [72, 72, 72, 72, 67, 67, 64, 64]
    program = [PIANO] * 8 + [FLUTE, TRUMPET] * 4
    end = [s + (0.35 if i < 8 else 0.45) for i, s in enumerate(start)]
    return Notes.from_arrays(start, end, pitch, [90] * 16, program).by_time()


@pytest.fixture(scope="module", params=SOUNDFONT_PATHS)
def heard(request, tmp_path_factory) -> tuple[Notes, np.ndarray]:
    """The known piece written as a MIDI file and rendered to WAV as `cadenza render` does; its audio."""
    if choose_backend()[0] == "numpy":
        pytest.skip(NO_RENDERER)
    folder = tmp_path_factory.mktemp(request.param)
    notes = known_piece()
    wav = render_file(write_midi(notes, folder / "known.mid"), png=False, sample_rate=SR, backend=request.param)["wav"]
    audio, sr = read_wav(wav)
    assert sr == SR and audio.size == round((notes.duration + audio_mod.TAIL_SECONDS) * SR)
    return notes, audio


def levels_db(audio: np.ndarray, sr: int) -> tuple[np.ndarray, np.ndarray]:
    """Short-time level in dB (20 ms windows, 5 ms apart), each stamped with its window's end."""
    hop, win = int(0.005 * sr), int(0.02 * sr)
    frames = np.lib.stride_tricks.sliding_window_view(audio, win)[::hop].astype(np.float64)
    return 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-10), (np.arange(len(frames)) * hop + win) / sr


def onset_delay(db: np.ndarray, times: np.ndarray, start: float, rise_db: float = 6.0) -> float | None:
    """Seconds from `start` until the level first stands `rise_db` above its lowest point in the 30 ms
    before `start`; None when it never does within 100 ms."""
    before = np.flatnonzero((times >= start - 0.03) & (times <= start))
    low = before[np.argmin(db[before])]
    after = np.flatnonzero((times > times[low]) & (times <= start + 0.1) & (db >= db[low] + rise_db))
    return float(times[after[0]] - start) if after.size else None


def fundamental(x: np.ndarray, sr: int) -> float:
    """The fundamental frequency of a steady tone by autocorrelation: the first lag whose peak reaches
    90% of the highest (which avoids octave-low answers), refined by a parabola through its peak."""
    x = (x - x.mean()) * np.hanning(x.size)
    acf = np.fft.irfft(np.abs(np.fft.rfft(x, 2 * x.size)) ** 2)[:x.size]
    lo, hi = int(sr / 2000), int(sr / 50)
    k = lo + int(np.flatnonzero(acf[lo:hi] >= 0.9 * acf[lo:hi].max())[0])
    while acf[k + 1] > acf[k]:
        k += 1
    a, b, c = acf[k - 1], acf[k], acf[k + 1]
    return sr / (k + 0.5 * (a - c) / (a - 2 * b + c))


def spectrum(audio: np.ndarray, start: float, sr: int) -> np.ndarray:
    """The unit-norm magnitude spectrum of 4096 samples from 100 ms into a note."""
    i = int((start + 0.1) * sr)
    m = np.abs(np.fft.rfft(audio[i:i + 4096] * np.hanning(4096)))
    return m / np.linalg.norm(m)


def test_every_note_starts_on_time(heard):
    notes, audio = heard
    db, times = levels_db(audio, SR)
    delays = [onset_delay(db, times, s) for s in notes.start]
    # ~30 ms: the levels are 5 ms apart, and a flute's breathy attack after a trumpet's reverb takes 31 ms
    late = [(round(s, 2), d) for s, d in zip(notes.start, delays) if d is None or not -0.01 <= d <= 0.035]
    assert not late, f"notes whose sound does not rise 6 dB within ~30 ms of their start: {late}"


def test_every_note_sounds_at_its_pitch(heard):
    notes, audio = heard
    off = []
    for s, p, prog in zip(notes.start, notes.pitch, notes.programs):
        i = int((s + 0.08) * SR)  # past the attack, inside the note
        f0 = fundamental(audio[i:i + int(0.2 * SR)], SR)
        cents = 1200 * np.log2(f0 / (440 * 2 ** ((p - 69) / 12)))
        if abs(cents) > QUARTER_TONE:
            off.append((int(prog), int(p), round(float(cents))))
    assert not off, f"(program, pitch, cents off) beyond a quarter tone: {off}"


def test_programs_sound_different(heard):
    notes, audio = heard
    c5 = {int(prog): [s for s, p, q in zip(notes.start, notes.pitch, notes.programs) if p == 72 and q == prog]
          for prog in (PIANO, FLUTE, TRUMPET)}
    spectra = {prog: [spectrum(audio, s, SR) for s in starts] for prog, starts in c5.items()}
    same = max(np.linalg.norm(v[0] - v[-1]) for v in spectra.values() if len(v) > 1)
    assert same < 0.1  # one program playing one pitch twice sounds the same
    for a, b in ((FLUTE, TRUMPET), (PIANO, FLUTE), (PIANO, TRUMPET)):
        assert np.linalg.norm(spectra[a][0] - spectra[b][0]) > max(0.3, 3 * same), (a, b)


def wav_pcm(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int32)


def longest_run(hot: np.ndarray) -> int:
    """The most consecutive True values in a boolean array."""
    edges = np.diff(np.concatenate(([0], hot.astype(np.int8), [0])))
    return int((np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).max(initial=0))


def assert_not_clipped(pcm: np.ndarray) -> None:
    """Peak at -1 dBFS (normalised), so below full scale, and no flat top: a waveform clipped before
    normalisation would hold its peak for a run of samples."""
    peak = int(np.abs(pcm).max())
    assert peak < 32767 and abs(20 * np.log10(peak / 32767) - 20 * np.log10(PEAK)) < 0.1
    assert longest_run(np.abs(pcm) >= 32767) == 0 and longest_run(np.abs(pcm) >= peak - 1) <= 2


@needs_soundfont
def test_known_piece_wav_does_not_clip(tmp_path):
    wav = render_file(write_midi(known_piece(), tmp_path / "known.mid"), png=False, sample_rate=SR)["wav"]
    assert_not_clipped(wav_pcm(wav))


@needs_soundfont
@pytest.mark.parametrize("backend", SOUNDFONT_PATHS)
def test_loud_dense_piece_does_not_clip(tmp_path, backend):
    """64 brass notes at full velocity at once: louder than the renderer's own output range."""
    k = 64
    loud = Notes.from_arrays(np.zeros(k), np.ones(k), 60 + np.arange(k) % 36, np.full(k, 127),
                             np.resize([61, 62, 56, 57], k))
    audio, _ = synthesize(loud, 48000, backend=backend)  # midirenderer's rate: no resampling smooths a clipped top
    assert_not_clipped(wav_pcm(audio_mod.write_wav(audio, tmp_path / "loud.wav", 48000)))


def note_spectra(notes: Notes, backend: str) -> list[np.ndarray]:
    audio, _ = synthesize(notes, SR, backend=backend)
    return [spectrum(audio, s, SR) for s in notes.start]


@needs_soundfont
@pytest.mark.parametrize("backend", SOUNDFONT_PATHS)
def test_many_programs_each_keep_their_instrument(backend):
    """20 programs in one piece, more than one MIDI file's 15 melodic channels: each note sounds as
    its program does alone, not as the program that would share its channel."""
    programs = np.arange(0, 80, 4)
    starts = 1.0 * np.arange(programs.size)  # a second apart: no reverb from one note in the next
    many = Notes.from_arrays(starts, starts + 0.45, np.full(programs.size, 72), np.full(programs.size, 90), programs)
    together = note_spectra(many, backend)
    alone = {k: note_spectra(Notes.from_arrays([0.0], [0.45], [72], [90], [programs[k]]), backend)[0]
             for k in (0, 1, 15, 16)}
    for a, b in ((0, 15), (1, 16)):  # in one file, the 1st and 16th programs would share a channel
        for k, other in ((a, b), (b, a)):
            own, cross = np.linalg.norm(together[k] - alone[k]), np.linalg.norm(together[k] - alone[other])
            assert own < 0.1 and cross > max(0.25, 3 * own), (int(programs[k]), own, cross)


@needs_soundfont
@pytest.mark.parametrize("backend", SOUNDFONT_PATHS)
def test_drums_are_heard(backend):
    kit = Notes.from_arrays([0.0, 0.5, 1.0], [0.2, 0.7, 1.2], [36, 38, 42], [110, 110, 110], DRUMS)
    audio, used = synthesize(kit, SR, backend=backend)
    db, times = levels_db(audio, SR)
    assert used != "numpy" and all(onset_delay(db, times, s) is not None for s in (0.5, 1.0))
    assert db[(times > 0.5) & (times < 0.6)].max() > -20


@needs_midirenderer
def test_pip_renderer_plays_the_pretty_midi_soundfont(monkeypatch):
    """Without FluidSynth the default is midirenderer with the SoundFont in the pretty_midi wheel,
    and the one-line description says so and how to get FluidSynth."""
    monkeypatch.setattr(tools, "fluidsynth_program", lambda: None)
    monkeypatch.setattr(tools, "pyfluidsynth", lambda: None)
    monkeypatch.setattr(tools, "SOUNDFONT_DIRS", ())
    monkeypatch.delenv("CADENZA_SOUNDFONT", raising=False)
    used, sf = choose_backend()
    assert (used, sf) == ("midirenderer", tools.pip_soundfont()) and sf.name == "TimGM6mb.sf2"
    line = describe_backend()
    assert line.startswith("audio: midirenderer") and "apt-get install fluidsynth" in line and "\n" not in line
    audio, used = synthesize(known_piece(), 16000)
    assert used == "midirenderer" and audio.size == round((known_piece().duration + 1.0) * 16000)


@needs_soundfont
def test_cadenza_render_names_the_backend(tmp_path, capsys):
    midi = write_midi(known_piece(), tmp_path / "known.mid")
    assert cadenza_main(["render", str(midi), "--wav"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(midi.with_suffix(".wav"))]
    assert captured.err.splitlines() == [describe_backend()]
    assert captured.err.startswith(f"audio: {choose_backend()[0]} with the SoundFont ")


@pytest.mark.parametrize("rate_in, rate_out", [(48000, 22050), (44100, 22050), (22050, 48000), (48000, 44100)])
def test_the_resampler_matches_scipys_polyphase_filter(rate_in, rate_out):
    from scipy.signal import resample_poly

    from cadenza.listen.soundfont import resample

    x = np.random.default_rng(0).standard_normal((5003, 2)).astype(np.float32)
    g = np.gcd(rate_in, rate_out)
    want = resample_poly(x, rate_out // g, rate_in // g, axis=0)
    got = resample(x, rate_in, rate_out)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-5
