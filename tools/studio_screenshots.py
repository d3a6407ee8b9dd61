"""The pictures of docs/studio.md and the README: the studio with the shipped model, in Chromium.

    python tools/studio_screenshots.py --out docs/img

Starts `cadenza serve` on a free 127.0.0.1 port (`cadenza.studio.server.launch`), then drives the
page with Playwright (Debian's chromium): an Irish tune generated (studio-generated.png), a Bach
chorale dropped on the page and continued (studio-continued.png), and that continuation's engraved
score (studio-score.png).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path


def chorale_midi(folder: Path) -> Path:
    """A Bach chorale from music21's corpus, as MIDI (the primer to continue)."""
    from music21 import corpus

    path = folder / "bwv66.6.mid"
    corpus.parse("bach/bwv66.6").write("midi", fp=str(path))
    return path


def shoot(base: str, out: Path, primer: Path, seed: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    done = "!document.querySelector('[data-testid=play]').disabled"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 820}, device_scale_factor=1)
        page.goto(base)
        page.click(".chip[data-style=irish]")
        page.fill("[data-testid=seed]", str(seed))
        page.click("[data-testid=generate]")
        page.wait_for_function(done, timeout=180_000)
        page.screenshot(path=str(out / "studio-generated.png"))
        page.click(".chip[data-style=bach]")
        page.set_input_files("#file", str(primer))
        page.wait_for_selector("[data-testid=primer-roll]:not([hidden])")
        before = page.evaluate("window.studio.job.id")
        page.click("[data-testid=generate]")
        page.wait_for_function(f"window.studio.job.id !== '{before}' && {done}", timeout=180_000)
        page.screenshot(path=str(out / "studio-continued.png"))
        page.click("[data-testid=score-toggle]")
        page.wait_for_function("!document.querySelector('[data-testid=score]').textContent.includes('engraving')",
                               timeout=120_000)
        page.screenshot(path=str(out / "studio-score.png"), full_page=True)
        browser.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    from cadenza.studio.server import launch

    with tempfile.TemporaryDirectory(prefix="cadenza-shots-") as tmp, launch(Path(tmp) / "data") as server:
        shoot(server.url, a.out, chorale_midi(Path(tmp)), a.seed)
    print(f"wrote {', '.join(f'studio-{n}.png' for n in ('generated', 'continued', 'score'))} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
