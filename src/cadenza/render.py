"""Hear and see MIDI: WAV audio, a piano-roll PNG and, with MuseScore 3, a score PNG.

Audio goes through FluidSynth with a General MIDI SoundFont when both are installed (the
``fluidsynth`` program, else the pyfluidsynth module); otherwise through a small numpy additive
synthesizer, so rendering never fails for want of a system package. Every backend returns the
same length: last note end + `TAIL_SECONDS`. (symusic 0.6's Synthesizer is broken, so it is not
used.) See docs/rendering.md. Every file is written atomically through `cadenza.atomic`.
"""

from __future__ import annotations

import argparse
import io
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

from cadenza.atomic import atomic_path, write_bytes
from cadenza.midi import MidiReadError, Notes, note_name, notes_to_score, read_notes, score_to_bytes, score_to_notes

log = logging.getLogger(__name__)

SAMPLE_RATE = 22050
TAIL_SECONDS = 1.0  # kept after the last note end so releases and reverb can ring out
RELEASE_SECONDS = 0.3  # the numpy synth's release: a note fades to silence this long after its end
BACKENDS = ("auto", "fluidsynth", "pyfluidsynth", "numpy")
FLUIDSYNTH_GAIN = 0.6
SOUNDFONT_PATHS = ("/usr/share/sounds/sf2/FluidR3_GM.sf2", "/usr/share/sounds/sf2/TimGM6mb.sf2")
SOUNDFONT_GLOBS = ("/usr/share/soundfonts/*.sf2",)
SOUNDFONT_FALLBACKS = ("/usr/share/sounds/sf2/default-GM.sf2",)
MUSESCORE_BINARIES = ("mscore3", "musescore3", "mscore")
INSTALL_HINT = "apt-get install fluidsynth fluid-soundfont-gm, or set CADENZA_SOUNDFONT=/path/to/GM.sf2"
FIGSIZE, DPI = (10.0, 4.0), 100  # piano rolls are always 1000 x 400 pixels


# -- finding the optional tools ---------------------------------------------------------------------

def find_soundfont(explicit: str | os.PathLike | None = None) -> Path | None:
    """The SoundFont to use: ``explicit``, else ``$CADENZA_SOUNDFONT``, else a Debian GM SoundFont.

    An explicit path that does not exist is an error; a stale environment variable is only
    logged, since it may be set machine-wide.
    """
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"SoundFont not found: {p}")
        return p
    if env := os.environ.get("CADENZA_SOUNDFONT"):
        p = Path(env).expanduser()
        if p.is_file():
            return p
        log.warning("CADENZA_SOUNDFONT=%s is not a file; looking in the system folders", env)
    candidates = [Path(p) for p in SOUNDFONT_PATHS]
    for pattern in SOUNDFONT_GLOBS:
        folder, _, glob = pattern.rpartition("/")
        candidates += sorted(Path(folder).glob(glob)) if Path(folder).is_dir() else []
    candidates += [Path(p) for p in SOUNDFONT_FALLBACKS]
    return next((p for p in candidates if p.is_file()), None)


def _pyfluidsynth():
    try:
        import fluidsynth  # pyfluidsynth; importing fails without libfluidsynth too
    except (ImportError, OSError):
        return None
    return fluidsynth if hasattr(fluidsynth, "Synth") else None


def choose_backend(backend: str = "auto", soundfont: str | os.PathLike | None = None) -> tuple[str, Path | None]:
    """The synthesizer ``synthesize`` will use, and the SoundFont for it."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown synth backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "numpy":
        return "numpy", None
    sf = find_soundfont(soundfont)
    have = {"fluidsynth": shutil.which("fluidsynth") is not None, "pyfluidsynth": _pyfluidsynth() is not None}
    if backend != "auto":
        if not have[backend] or sf is None:
            missing = "a General MIDI SoundFont" if have[backend] else backend
            raise RuntimeError(f"{missing} is not installed ({INSTALL_HINT})")
        return backend, sf
    if sf is not None:
        for name in ("fluidsynth", "pyfluidsynth"):
            if have[name]:
                return name, sf
    return "numpy", None


def fluidsynth_note(soundfont: str | os.PathLike | None = None) -> str | None:
    """A one-line note when audio will fall back to the numpy synth, saying how to get FluidSynth."""
    backend, _ = choose_backend("auto", soundfont)
    if backend != "numpy":
        return None
    what = "no General MIDI SoundFont found" if shutil.which("fluidsynth") or _pyfluidsynth() else "FluidSynth not found"
    return f"note: {what}; using the built-in numpy synthesizer ({INSTALL_HINT})"


# -- audio ----------------------------------------------------------------------------------------------

def _as_notes(source) -> Notes:
    if isinstance(source, Notes):
        return source
    if isinstance(source, (str, os.PathLike, bytes, bytearray)):
        return read_notes(source)[0]
    return score_to_notes(source)[0]


def n_samples(notes: Notes, sample_rate: int = SAMPLE_RATE) -> int:
    """Length of rendered audio: round((last note end + TAIL_SECONDS) * sample_rate)."""
    return int(round((notes.duration + TAIL_SECONDS) * sample_rate))


def numpy_synth(notes: Notes, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A plucked-string additive synth: six harmonics, each decaying faster than the one below.

    Harmonic k has amplitude 1/k^1.5 and decays at rate d (1 + (k-1)/2), d = 0.6 + 2.5 f/kHz per
    second (time constant 1/d: 1.4 s at A1, 0.6 s at A4, 0.2 s at A6). Envelope: 5 ms linear
    attack, then a linear release over RELEASE_SECONDS after the note ends. Amplitude
    ~ (velocity/127)^1.5. The mix is scaled down only if it would clip, so velocity stays audible.
    """
    sr = sample_rate
    out = np.zeros(n_samples(notes, sr), np.float32)
    n_rel = int(round(RELEASE_SECONDS * sr))
    for s, e, p, v in zip(notes.start, notes.end, notes.pitch, notes.velocity):
        i0 = int(round(s * sr))
        n_on = max(int(round(e * sr)) - i0, 1)
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


def _fluidsynth_cli(midi: Path, sf: Path, sr: int) -> np.ndarray:
    with tempfile.TemporaryDirectory(prefix="cadenza-fs-") as d:
        wav = Path(d) / "out.wav"
        cmd = ["fluidsynth", "-ni", "-g", str(FLUIDSYNTH_GAIN), "-F", str(wav), "-T", "wav", "-O", "s16",
               "-r", str(sr), str(sf), str(midi)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0 or not wav.is_file():
            raise RuntimeError(f"fluidsynth failed ({res.returncode}): {(res.stderr or res.stdout).strip()[-300:]}")
        return read_wav(wav)[0]


def _pyfluidsynth_render(notes: Notes, sf: Path, sr: int, n: int) -> np.ndarray:
    fluidsynth = _pyfluidsynth()
    synth = fluidsynth.Synth(gain=FLUIDSYNTH_GAIN, samplerate=float(sr))
    try:
        sfid = synth.sfload(str(sf))
        synth.program_select(0, sfid, 0, 0)
        on = np.rint(notes.start * sr).astype(np.int64)
        off = np.rint(notes.end * sr).astype(np.int64)
        times = np.concatenate((off, on))
        kinds = np.concatenate((np.zeros(len(notes)), np.ones(len(notes))))  # offs before ons at a tie
        pitch, vel = np.tile(notes.pitch, 2), np.tile(notes.velocity, 2)
        chunks, now = [], 0
        for i in np.lexsort((kinds, times)):
            if times[i] > now:
                chunks.append(synth.get_samples(int(times[i] - now)))
                now = int(times[i])
            synth.noteon(0, int(pitch[i]), int(vel[i])) if kinds[i] else synth.noteoff(0, int(pitch[i]))
        if n > now:
            chunks.append(synth.get_samples(n - now))
    finally:
        synth.delete()
    stereo = np.concatenate(chunks).astype(np.float32).reshape(-1, 2) if chunks else np.zeros((0, 2), np.float32)
    return stereo.mean(axis=1) / 32768.0


def synthesize(notes_or_path, sample_rate: int = SAMPLE_RATE, soundfont: str | os.PathLike | None = None,
               backend: str = "auto") -> tuple[np.ndarray, str]:
    """Render notes (or a MIDI path / symusic Score) to mono float32 audio in [-1, 1].

    Returns (audio, backend used). Length is always `n_samples` = round((last note end +
    TAIL_SECONDS) * sample_rate). ``backend``: auto (FluidSynth program, then pyfluidsynth, then
    numpy), or one of them by name (an error when it is not installed).
    """
    notes = _as_notes(notes_or_path)
    used, sf = choose_backend(backend, soundfont)
    n = n_samples(notes, sample_rate)
    if used == "numpy":
        return numpy_synth(notes, sample_rate), used
    if used == "pyfluidsynth":
        audio = _pyfluidsynth_render(notes, sf, sample_rate, n)
    elif isinstance(notes_or_path, (str, os.PathLike)):
        audio = _fluidsynth_cli(Path(notes_or_path), sf, sample_rate)  # the file itself: its programs
    else:
        with tempfile.TemporaryDirectory(prefix="cadenza-fs-") as d:
            midi = Path(d) / "in.mid"
            midi.write_bytes(score_to_bytes(notes_to_score(notes)))
            audio = _fluidsynth_cli(midi, sf, sample_rate)
    return np.clip(_fit_length(audio.astype(np.float32), n, sample_rate), -1.0, 1.0), used


def write_wav(audio: np.ndarray, path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write float audio in [-1, 1] (shape (n,) or (n, channels)) as 16-bit PCM WAV, atomically."""
    a = np.asarray(audio, dtype=np.float64)
    a = a[:, None] if a.ndim == 1 else a
    pcm = np.rint(np.clip(a, -1.0, 1.0) * 32767).astype("<i2")
    with atomic_path(path) as tmp:
        with wave.open(str(tmp), "wb") as w:
            w.setnchannels(a.shape[1])
            w.setsampwidth(2)
            w.setframerate(int(sample_rate))
            w.writeframes(pcm.tobytes())
    return Path(path)


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV as mono float32 in [-1, 1] (channels averaged), and its sample rate."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported, not {8 * w.getsampwidth()}-bit")
        ch, sr, frames = w.getnchannels(), w.getframerate(), w.readframes(w.getnframes())
    pcm = np.frombuffer(frames, "<i2").reshape(-1, ch)
    return (pcm.mean(axis=1) / 32768.0).astype(np.float32), sr


# -- pictures ------------------------------------------------------------------------------------------

def piano_roll(notes, path: str | os.PathLike | None = None, title: str | None = None,
               seconds: float | None = None) -> np.ndarray:
    """Draw notes as a piano roll; return the RGB image (H, W, 3) uint8 and write a PNG if ``path``.

    Pitch over time in seconds (x up to ``seconds``, default the piece's end), C's labelled
    (C4 = 60), velocity as colour with a colourbar. Always FIGSIZE * DPI = 1000 x 400 pixels, so
    TensorBoard (``add_image(..., dataformats="HWC")``) shows samples at one scale.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure  # no pyplot: no global figure state, any thread
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    notes = _as_notes(notes)
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if len(notes):
        lo, hi = int(notes.pitch.min()) - 2, int(notes.pitch.max()) + 2
    else:
        lo, hi = 58, 62
        ax.text(0.5, 0.5, "no notes", transform=ax.transAxes, ha="center", va="center", color="0.4")
    if hi - lo < 14:  # at least an octave, so some C is labelled
        mid = (lo + hi) // 2
        lo, hi = mid - 7, mid + 7
    x0, x1, y = notes.start, notes.end, notes.pitch.astype(np.float64)
    verts = np.stack([np.column_stack(c) for c in ((x0, y - 0.4), (x1, y - 0.4), (x1, y + 0.4), (x0, y + 0.4))], 1)
    coll = PolyCollection(verts, array=notes.velocity.astype(np.float64), cmap="viridis", edgecolors="none")
    coll.set_clim(0, 127)
    ax.add_collection(coll)
    fig.colorbar(coll, ax=ax, pad=0.01, fraction=0.04).set_label("velocity")
    ax.set_xlim(0, seconds or max(notes.duration, 1.0))
    ax.set_ylim(lo - 0.5, hi + 0.5)
    cs = list(range(math.ceil(lo / 12) * 12, hi + 1, 12))
    ax.set_yticks(cs, [note_name(c) for c in cs])
    ax.set_yticks(range(lo, hi + 1), minor=True)
    ax.grid(axis="y", which="major", color="0.85", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("pitch")
    if title:
        ax.set_title(title)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    if path is not None:
        from PIL import Image  # a matplotlib dependency

        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="png")  # the very pixels returned, as RGB
        write_bytes(path, buf.getvalue())
    return image


def find_musescore() -> str | None:
    return next((p for p in map(shutil.which, MUSESCORE_BINARIES) if p), None)


def render_score(midi_path: str | os.PathLike, png_path: str | os.PathLike, timeout: float = 120.0) -> Path | None:
    """Engrave a MIDI file to PNG with MuseScore 3; None (reason logged) when it is absent or fails.

    MuseScore writes one ``name-N.png`` per page: page 1 becomes ``png_path``, later pages
    ``<stem>-N.png`` beside it. Performance MIDI is quantised by MuseScore's importer, so expect
    a readable sketch, not an edition.
    """
    exe = find_musescore()
    if exe is None:
        log.info("no score PNG: MuseScore 3 is not installed (apt-get install musescore3)")
        return None
    png_path = Path(png_path)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")  # headless: no X server needed
    with tempfile.TemporaryDirectory(prefix="cadenza-ms-") as d:
        env.setdefault("XDG_RUNTIME_DIR", d)
        cmd = [exe, "-o", str(Path(d) / "score.png"), "-T", "10", str(Path(midi_path).resolve())]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=d)
        except subprocess.TimeoutExpired:
            log.warning("no score PNG for %s: MuseScore took over %.0f s", midi_path, timeout)
            return None
        pages = sorted(Path(d).glob("score-*.png"), key=lambda p: int(p.stem.rpartition("-")[2]))
        if res.returncode != 0 or not pages:
            log.warning("no score PNG for %s: MuseScore failed (%d): %s", midi_path, res.returncode,
                        (res.stderr or res.stdout).strip()[-300:])
            return None
        for i, page in enumerate(pages, 1):
            dest = png_path if i == 1 else png_path.with_name(f"{png_path.stem}-{i}{png_path.suffix}")
            with atomic_path(dest) as tmp:
                shutil.copyfile(page, tmp)
    return png_path


def render_file(path: str | os.PathLike, wav: bool = True, png: bool = True, score: bool = False,
                soundfont: str | os.PathLike | None = None, out_dir: str | os.PathLike | None = None,
                sample_rate: int = SAMPLE_RATE, backend: str = "auto") -> dict[str, Path]:
    """Render one MIDI file to ``<stem>.wav``, ``<stem>.png`` (piano roll), ``<stem>.score.png``.

    Files go to ``out_dir`` (default: beside the MIDI file). Returns {"wav"|"png"|"score": path}
    for what was written; "score" is missing when MuseScore is absent.
    """
    path = Path(path)
    out = Path(out_dir) if out_dir is not None else path.parent
    notes = read_notes(path)[0]
    written: dict[str, Path] = {}
    if wav:
        used, _ = choose_backend(backend, soundfont)
        audio, _ = synthesize(path if used == "fluidsynth" else notes, sample_rate, soundfont, used)
        written["wav"] = write_wav(audio, out / f"{path.stem}.wav", sample_rate)
    if png:
        piano_roll(notes, out / f"{path.stem}.png", title=path.name)
        written["png"] = out / f"{path.stem}.png"
    if score and (p := render_score(path, out / f"{path.stem}.score.png")) is not None:
        written["score"] = p
    return written


# -- command line ----------------------------------------------------------------------------------------

def _cmd_render(a: argparse.Namespace) -> int:
    wav, png, score = a.wav, a.png, a.score
    if not (wav or png or score):
        wav = png = True
    if wav and a.synth == "auto" and (note := fluidsynth_note(a.soundfont)):
        print(note, file=sys.stderr)
    if score and find_musescore() is None:
        print("note: MuseScore 3 not found, no score PNG (apt-get install musescore3)", file=sys.stderr)
    failed = 0
    for f in a.files:
        try:
            written = render_file(f, wav=wav, png=png, score=score, soundfont=a.soundfont, out_dir=a.out,
                                  sample_rate=a.sample_rate, backend=a.synth)
        except MidiReadError as e:
            print(f"cadenza render: skipped {e}", file=sys.stderr)
            failed += 1
            continue
        for p in written.values():
            print(p)
    return 1 if failed else 0


def register(subparsers) -> None:
    """Add ``cadenza render`` to the CLI's subparsers."""
    s = subparsers.add_parser(
        "render", help="MIDI -> WAV audio, piano-roll PNG, score PNG",
        description="Render MIDI files to WAV (FluidSynth, else a built-in synthesizer), a piano-roll PNG "
                    "and, with MuseScore 3 installed, a score PNG. With no --wav/--png/--score: WAV and PNG.")
    s.add_argument("files", nargs="+", metavar="FILE.mid", help="MIDI files")
    s.add_argument("--wav", action="store_true", help="write <name>.wav")
    s.add_argument("--png", action="store_true", help="write <name>.png, a piano roll")
    s.add_argument("--score", action="store_true", help="write <name>.score.png with MuseScore 3")
    s.add_argument("--soundfont", help="General MIDI .sf2 (default: $CADENZA_SOUNDFONT, then system SoundFonts)")
    s.add_argument("--out", help="output folder (default: beside each MIDI file)")
    s.add_argument("--sample-rate", type=int, default=SAMPLE_RATE, help="WAV sample rate (default %(default)s)")
    s.add_argument("--synth", choices=BACKENDS, default="auto",
                   help="audio backend (default auto: FluidSynth if installed, else numpy)")
    s.set_defaults(func=_cmd_render)
