"""Engraved scores: MIDI -> PNG pages with MuseScore 3, when it is installed."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cadenza.atomic import atomic_path
from cadenza.env.tools import find_musescore

log = logging.getLogger(__name__)


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
