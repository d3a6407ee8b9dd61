"""cadenza.listen: numpy synth length and loudness, WAV round trip, piano-roll pixels, SoundFont
lookup, the `render` subcommand; FluidSynth and MuseScore for real only where they are installed."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import cadenza
from cadenza.cli import main as cadenza_main
from cadenza.data.midi import Notes, write_midi
from cadenza.env import tools
from cadenza.env.tools import find_musescore, find_soundfont
from cadenza.listen import audio as audio_mod
from cadenza.listen import score as score_mod
from cadenza.listen.audio import RELEASE_SECONDS, TAIL_SECONDS, n_samples, read_wav, synthesize, write_wav
from cadenza.listen.pianoroll import DPI, FIGSIZE, piano_roll
from cadenza.listen.render import render_file

SR = 22050


def one_note(velocity: int, end: float = 1.0, pitch: int = 60) -> Notes:
    return Notes.from_arrays([0.0], [end], [pitch], [velocity])


@pytest.fixture
def no_fluidsynth(monkeypatch):
    """A machine without any SoundFont renderer (FluidSynth, pyfluidsynth, midirenderer) or SoundFont."""
    monkeypatch.setattr(tools, "find_soundfont", lambda explicit=None: None)
    monkeypatch.setattr(tools, "pyfluidsynth", lambda: None)
    monkeypatch.setattr(tools, "fluidsynth_program", lambda: None)
    monkeypatch.setattr(tools, "midirenderer", lambda: None)


@pytest.fixture
def chord_midi(tmp_path) -> Path:
    notes = Notes.from_arrays([0.0, 0.0, 0.0, 0.5, 1.0], [1.0, 1.0, 1.0, 1.5, 2.25],
                              [48, 64, 67, 72, 60], [90, 70, 70, 110, 40])
    return write_midi(notes, tmp_path / "chord.mid")


def test_numpy_synth_length_is_last_end_plus_tail():
    notes = Notes.from_arrays([0.0, 0.25], [1.0, 1.7], [60, 67], [80, 80])
    audio, used = synthesize(notes, SR, backend="numpy")
    assert used == "numpy" and audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == round((1.7 + TAIL_SECONDS) * SR) == n_samples(notes, SR)
    assert np.abs(audio).max() <= 1.0
    assert np.sqrt(np.mean(audio[: int(1.7 * SR)] ** 2)) > 1e-3  # not silent
    assert np.abs(audio[int((1.7 + RELEASE_SECONDS) * SR) + 1:]).max() == 0  # released: silent tail


def test_numpy_synth_louder_for_higher_velocity():
    soft, _ = synthesize(one_note(40), SR, backend="numpy")
    loud, _ = synthesize(one_note(110), SR, backend="numpy")
    rms = lambda a: float(np.sqrt(np.mean(a ** 2)))  # noqa: E731
    assert rms(loud) > 2 * rms(soft) > 0


def test_numpy_synth_pitch_is_right():
    audio, _ = synthesize(one_note(100, end=1.0, pitch=69), SR, backend="numpy")  # A4 = 440 Hz
    spectrum = np.abs(np.fft.rfft(audio[: SR]))
    assert abs(np.fft.rfftfreq(SR, 1 / SR)[spectrum.argmax()] - 440) <= 1


def test_numpy_synth_does_not_clip_and_handles_empty():
    many = Notes.from_arrays(np.zeros(40), np.ones(40), np.arange(40, 80), np.full(40, 127))
    audio, _ = synthesize(many, SR, backend="numpy")
    assert np.abs(audio).max() <= 0.95 + 1e-6
    silent, _ = synthesize(Notes.empty(), SR, backend="numpy")
    assert silent.size == round(TAIL_SECONDS * SR) and not silent.any()


def test_synthesize_from_path_falls_back_to_numpy(chord_midi, no_fluidsynth):
    audio, used = synthesize(chord_midi, 16000)
    assert used == "numpy" and audio.size == round((2.25 + TAIL_SECONDS) * 16000)
    assert "apt-get install fluidsynth" in audio_mod.describe_backend()
    with pytest.raises(RuntimeError, match="apt-get install"):
        synthesize(chord_midi, backend="fluidsynth")


@pytest.mark.parametrize("channels", [1, 2])
def test_write_wav_round_trips_through_wave(tmp_path, channels):
    rng = np.random.default_rng(0)
    audio = rng.uniform(-1, 1, (1234, channels)).squeeze().astype(np.float32)
    audio[:2] = [1.5, -1.5] if channels == 1 else [[1.5, 1.5], [-1.5, -1.5]]  # clipped, not wrapped
    path = write_wav(audio, tmp_path / "sub" / "x.wav", 16000)
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (channels, 2, 16000, 1234)
        pcm = np.frombuffer(w.readframes(1234), "<i2").reshape(1234, channels)
    assert np.abs(pcm / 32767 - np.clip(audio, -1, 1).reshape(1234, channels)).max() <= 0.5 / 32767 + 1e-6
    mono, sr = read_wav(path)
    assert sr == 16000 and mono.shape == (1234,)
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary file left behind


def test_piano_roll_png_size_and_content(tmp_path, chord_midi):
    path = tmp_path / "roll.png"
    image = piano_roll(chord_midi, path, title="chord")
    w, h = int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI)
    assert image.shape == (h, w, 3) and image.dtype == np.uint8
    with Image.open(path) as png:
        assert png.size == (w, h)
        assert np.array_equal(np.asarray(png.convert("RGB")), image)
    blank = piano_roll(Notes.empty())
    assert blank.shape == image.shape
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # notes, colourbar, text
    assert np.count_nonzero((image != blank).any(axis=2)) > 2000  # the notes were drawn


def test_given_notes_are_drawn_in_their_own_colour(chord_midi):
    from cadenza.data.midi import as_notes
    from cadenza.listen.pianoroll import GIVEN

    notes = as_notes(chord_midi)
    given = np.zeros(len(notes), bool)
    given[0] = True
    colour = np.array([int(GIVEN[i:i + 2], 16) for i in (1, 3, 5)])
    marked = lambda img: np.count_nonzero((np.abs(img.astype(int) - colour) <= 2).all(axis=2))  # noqa: E731
    assert marked(piano_roll(notes)) == 0
    with_given = piano_roll(notes, given=given)
    assert marked(with_given) > 200  # the given note's bar and the legend's swatch
    assert marked(piano_roll(notes, given=~given)) > marked(with_given)  # more given notes, more of the colour


def test_piano_roll_seconds_fixes_the_time_axis():
    a = piano_roll(one_note(80, end=1.0), seconds=10.0)
    b = piano_roll(one_note(80, end=2.0), seconds=10.0)
    assert a.shape == b.shape and (a != b).any()


def test_find_soundfont_order(tmp_path, monkeypatch):
    env_sf, explicit = tmp_path / "env.sf2", tmp_path / "explicit.sf2"
    env_sf.write_bytes(b"RIFF"), explicit.write_bytes(b"RIFF")
    system_dir = tmp_path / "system"
    system_dir.mkdir()
    monkeypatch.setattr(tools, "SOUNDFONT_DIRS", (str(system_dir),))
    monkeypatch.setenv("CADENZA_SOUNDFONT", str(env_sf))
    assert find_soundfont() == env_sf
    assert find_soundfont(explicit) == explicit
    with pytest.raises(FileNotFoundError):
        find_soundfont(tmp_path / "missing.sf2")
    monkeypatch.setenv("CADENZA_SOUNDFONT", str(tmp_path / "gone.sf2"))
    assert find_soundfont() is None
    (system_dir / "other.sf2").write_bytes(b"RIFF")
    system = system_dir / "FluidR3_GM.sf2"
    system.write_bytes(b"RIFF")
    assert find_soundfont() == system  # Debian's GM SoundFont before any other


def run_cli(argv: list[str]) -> int:
    return cadenza_main(argv)  # the command as a user runs it


def test_cli_default_writes_wav_and_png(tmp_path, chord_midi, no_fluidsynth, capsys):
    out = tmp_path / "out"
    assert run_cli(["render", str(chord_midi), "--out", str(out), "--sample-rate", "8000"]) == 0
    captured = capsys.readouterr()
    wav, png = out / "chord.wav", out / "chord.png"
    assert captured.out.split() == [str(wav), str(png)]
    assert "apt-get install fluidsynth fluid-soundfont-gm" in captured.err and len(captured.err.splitlines()) == 1
    assert read_wav(wav)[1] == 8000 and read_wav(wav)[0].size == round((2.25 + TAIL_SECONDS) * 8000)
    with Image.open(png) as im:
        assert im.size == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def test_cli_flags_and_bad_files(tmp_path, chord_midi, capsys):
    bad = tmp_path / "bad.mid"
    bad.write_text("not midi")
    assert run_cli(["render", str(bad), str(chord_midi), "--png", "--out", str(tmp_path / "o")]) == 1
    captured = capsys.readouterr()
    assert captured.out.split() == [str(tmp_path / "o" / "chord.png")]
    assert "bad.mid" in captured.err
    assert run_cli(["render", str(chord_midi), "--wav", "--synth", "numpy"]) == 0  # beside the input
    assert capsys.readouterr().out.split() == [str(chord_midi.with_suffix(".wav"))]


def test_render_score_absent_returns_none(tmp_path, chord_midi, monkeypatch):
    monkeypatch.setattr(score_mod, "find_musescore", lambda: None)
    assert score_mod.render_score(chord_midi, tmp_path / "s.png") is None
    assert "score" not in render_file(chord_midi, wav=False, png=False, score=True, out_dir=tmp_path)


# -- real external tools: skipped where they are not installed (e.g. fresh CI machines) --------------

needs_fluidsynth = pytest.mark.skipif(not tools.available("fluidsynth"), reason="FluidSynth not installed")


@needs_fluidsynth
def test_fluidsynth_cli_renders(chord_midi):
    for source in (chord_midi, Notes.from_arrays([0.0], [0.5], [60], [100])):
        audio, used = synthesize(source, SR, backend="fluidsynth")
        end = 2.25 if source is chord_midi else 0.5
        assert used == "fluidsynth" and audio.size == round((end + TAIL_SECONDS) * SR)
        assert np.sqrt(np.mean(audio ** 2)) > 1e-3 and np.abs(audio).max() <= 1.0


@pytest.mark.skipif(not tools.available("pyfluidsynth"), reason="pyfluidsynth not installed")
def test_pyfluidsynth_renders(chord_midi):
    audio, used = synthesize(chord_midi, SR, backend="pyfluidsynth")
    assert used == "pyfluidsynth" and audio.size == round((2.25 + TAIL_SECONDS) * SR)
    assert np.sqrt(np.mean(audio ** 2)) > 1e-3


@pytest.mark.skipif(find_musescore() is None, reason="MuseScore 3 not installed")
def test_musescore_renders_score(tmp_path, chord_midi):
    out = score_mod.render_score(chord_midi, tmp_path / "score.png")
    assert out == tmp_path / "score.png"
    with Image.open(out) as im:
        assert im.size[0] > 100 and im.size[1] > 50
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["score.png"]  # one page, no name-1.png left


def test_render_library_call_matches_the_cli(tmp_path, chord_midi, no_fluidsynth):
    """`cadenza.render` does what `cadenza render` does: files written, bad files skipped and named."""
    bad = tmp_path / "bad.mid"
    bad.write_text("not midi")
    res = cadenza.render([bad, chord_midi], out_dir=tmp_path / "o", sample_rate=8000)
    assert [sorted(w) for w in res.written] == [["png", "wav"]]
    assert res.written[0]["wav"] == tmp_path / "o" / "chord.wav" and res.written[0]["wav"].exists()
    assert res.skipped and res.skipped[0][0] == str(bad) and "bad.mid" in res.skipped[0][1]
    assert any("apt-get install fluidsynth" in n for n in res.notes)
