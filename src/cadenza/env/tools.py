"""Optional tools cadenza uses when they are installed: FluidSynth, SoundFonts, MuseScore, and the
SoundFont renderer from PyPI (midirenderer) with the General MIDI SoundFont in the pretty_midi wheel.

Rendering and `cadenza doctor` both look here, so they always agree on what is available and on
which synthesizer renders audio (`choose_backend`, `describe_backend`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

SOUNDFONT_DIRS = ("/usr/share/sounds/sf2", "/usr/share/soundfonts")
# Debian's General MIDI SoundFonts, best first (fluid-soundfont-gm, timgm6mb-soundfont, the alternatives link)
PREFERRED_SOUNDFONTS = ("FluidR3_GM.sf2", "TimGM6mb.sf2", "default-GM.sf2")
MUSESCORE_BINARIES = ("mscore3", "musescore3", "mscore")
INSTALL_HINT = "apt-get install fluidsynth fluid-soundfont-gm, or set CADENZA_SOUNDFONT=/path/to/GM.sf2"
PIP_HINT = "pip install midirenderer pretty_midi"
PIP_SOUNDFONT = ("pretty_midi", "TimGM6mb.sf2")  # the General MIDI SoundFont (6 MB) in pretty_midi's wheel
RENDERERS = ("fluidsynth", "pyfluidsynth", "midirenderer")  # the SoundFont renderers, in the order `auto` tries them
BACKENDS = ("auto", *RENDERERS, "numpy")  # numpy: cadenza's own synthesizer, the last resort


def soundfonts() -> list[Path]:
    """Every .sf2/.sf3 in the system SoundFont folders, Debian's GM SoundFonts first."""
    found: list[Path] = []
    for d in SOUNDFONT_DIRS:
        if os.path.isdir(d):
            found += sorted(Path(d).glob("*.sf[23]"))
    rank = {name: i for i, name in enumerate(PREFERRED_SOUNDFONTS)}
    return sorted(found, key=lambda p: rank.get(p.name, len(rank)))


def find_soundfont(explicit: str | os.PathLike | None = None) -> Path | None:
    """The SoundFont to use: `explicit`, else ``$CADENZA_SOUNDFONT``, else a system GM SoundFont.

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
    found = soundfonts()
    return found[0] if found else None


def pyfluidsynth():
    """The pyfluidsynth module, or None (importing it fails without libfluidsynth too)."""
    try:
        import fluidsynth
    except (ImportError, OSError):
        return None
    return fluidsynth if hasattr(fluidsynth, "Synth") else None


def midirenderer():
    """The midirenderer module (a SoundFont renderer from PyPI), or None when it is not installed."""
    try:
        import midirenderer
    except ImportError:
        return None
    return midirenderer if hasattr(midirenderer, "render_wave_from") else None


def pip_soundfont() -> Path | None:
    """The General MIDI SoundFont that ships inside the pretty_midi wheel, or None without pretty_midi.

    Found through the package's import spec, which locates its folder without importing it
    (importing pretty_midi loads mido and costs ~0.1 s).
    """
    package, name = PIP_SOUNDFONT
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (p := Path(folder) / name).is_file():
            return p
    return None


def fluidsynth_program() -> str | None:
    return shutil.which("fluidsynth")


def find_musescore() -> str | None:
    return next((p for p in map(shutil.which, MUSESCORE_BINARIES) if p), None)


def renderer_soundfonts(soundfont: str | os.PathLike | None = None) -> dict[str, Path | None]:
    """The SoundFont each renderer would play: the explicit, $CADENZA_SOUNDFONT or system one, else
    the one in the pretty_midi wheel (midirenderer's rustysynth reads .sf2 only, not .sf3)."""
    sf = find_soundfont(soundfont) or pip_soundfont()
    sf2 = sf if sf is not None and sf.suffix.lower() == ".sf2" else pip_soundfont()
    return {"fluidsynth": sf, "pyfluidsynth": sf, "midirenderer": sf2}


def choose_backend(backend: str = "auto", soundfont: str | os.PathLike | None = None) -> tuple[str, Path | None]:
    """The synthesizer that renders audio, and the SoundFont it plays.

    ``auto``: the first of `RENDERERS` installed with a SoundFont, else ``numpy``. A renderer named
    outright that is not installed is an error that says how to install it.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown synth backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "numpy":
        return "numpy", None
    sf = renderer_soundfonts(soundfont)
    have = {"fluidsynth": fluidsynth_program() is not None, "pyfluidsynth": pyfluidsynth() is not None,
            "midirenderer": midirenderer() is not None}
    if backend != "auto":
        if not have[backend] or sf[backend] is None:
            missing = "a General MIDI SoundFont" if have[backend] else backend
            hint = PIP_HINT if backend == "midirenderer" else INSTALL_HINT
            raise RuntimeError(f"{missing} is not installed ({hint})")
        return backend, sf[backend]
    return next(((name, sf[name]) for name in RENDERERS if have[name] and sf[name] is not None), ("numpy", None))


def available(backend: str, soundfont: str | os.PathLike | None = None) -> bool:
    """Whether `backend` can render here: installed, with a SoundFont it can play."""
    try:
        choose_backend(backend, soundfont)
    except RuntimeError:
        return False
    return True


def describe_backend(soundfont: str | os.PathLike | None = None, backend: str = "auto") -> str:
    """One line saying which synthesizer renders audio, with which SoundFont, and (for `auto`, when
    it is not FluidSynth) how to get a better one. `cadenza render` and `cadenza doctor` print it."""
    used, sf = choose_backend(backend, soundfont)
    if used == "numpy":
        line = "audio: the built-in numpy synthesizer"
        return line + (f" (no SoundFont renderer found: {PIP_HINT}; or {INSTALL_HINT})" if backend == "auto" else "")
    line = f"audio: {used} with the SoundFont {sf}"
    return line + (f" (for FluidSynth: {INSTALL_HINT})" if used == "midirenderer" and backend == "auto" else "")
