"""Optional system tools cadenza uses when they are installed: FluidSynth, SoundFonts, MuseScore.

Rendering and `cadenza doctor` both look here, so they always agree on what is available.
"""

from __future__ import annotations

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


def fluidsynth_program() -> str | None:
    return shutil.which("fluidsynth")


def find_musescore() -> str | None:
    return next((p for p in map(shutil.which, MUSESCORE_BINARIES) if p), None)
