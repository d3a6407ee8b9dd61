"""The pictures of docs/studio.md and the README: the studio with the shipped model, in Chromium.

    python tools/studio_screenshots.py --out docs/img

Starts `cadenza serve` on a free 127.0.0.1 port (`cadenza.studio.server.launch`), then drives the
page with Playwright (Debian's chromium), one flow per picture:

* studio-generated.png: an Irish tune generated;
* studio-continued.png: a Bach chorale dropped on the page and continued; studio-score.png: its score;
* studio-span.png: a span of the chorale selected and regenerated, two variations to choose from;
* studio-melody.png: a melody played in on the computer's keys with the metronome;
* studio-accompanied.png: that melody accompanied in the Bach style, playing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

SHOTS = ("generated", "continued", "score", "span", "melody", "accompanied")
FINISHED = "window.studio.job && !window.studio.busy && !document.querySelector('[data-testid=play]').disabled"
# "Ode to Joy" on the computer's keys (A S D F G = C D E F G from middle C), a beat each
ODE = "ddfggfdsaasddss"


def chorale_midi(folder: Path) -> Path:
    """A Bach chorale from music21's corpus, as MIDI (the primer to continue, the piece to fill)."""
    from music21 import corpus

    path = folder / "bwv66.6.mid"
    corpus.parse("bach/bwv66.6").write("midi", fp=str(path))
    return path


def finish(page, button: str) -> None:
    """Click `button` and wait for the job it starts to be finished on the page."""
    before = page.evaluate("window.studio.job ? window.studio.job.id : ''")
    page.click(button)
    page.wait_for_function(f"window.studio.job && window.studio.job.id !== '{before}' && {FINISHED}",
                           timeout=180_000)


def generate_and_continue(page, out: Path, primer: Path, seed: int) -> None:
    page.click(".chip[data-style=irish]")
    page.fill("[data-testid=seed]", str(seed))
    finish(page, "[data-testid=generate]")
    page.screenshot(path=str(out / "studio-generated.png"))
    page.click(".chip[data-style=bach]")
    page.set_input_files("#file", str(primer))
    page.wait_for_selector("[data-testid=primer-roll]:not([hidden])")
    finish(page, "[data-testid=generate]")
    page.screenshot(path=str(out / "studio-continued.png"))
    page.click("[data-testid=score-toggle]")
    page.wait_for_function("!document.querySelector('[data-testid=score]').textContent.includes('engraving')",
                           timeout=120_000)
    page.screenshot(path=str(out / "studio-score.png"), full_page=True)


def fill_a_span(page, out: Path, primer: Path, start: float = 4.0, end: float = 8.0) -> None:
    page.set_input_files("#file", str(primer))  # the chorale on stage again, all given
    page.wait_for_function("window.studio.piece !== null")
    page.select_option("[data-testid=variations]", "2")
    roll = page.locator("[data-testid=roll]")
    box, axis = roll.bounding_box(), roll.evaluate("c => [c.dataset.x0, c.dataset.x1, c.dataset.end].map(Number)")

    def at(t: float) -> float:  # the x of time t on the roll
        return box["x"] + axis[0] + t / axis[2] * (axis[1] - axis[0])

    page.mouse.move(at(start), box["y"] + 40)
    page.mouse.down()
    page.mouse.move(at(end), box["y"] + 60, steps=8)
    page.mouse.up()
    finish(page, "[data-testid=regenerate]")
    page.screenshot(path=str(out / "studio-span.png"))


def accompany_a_melody(page, out: Path) -> None:
    page.select_option("[data-testid=variations]", "1")
    page.fill("[data-testid=tempo]", "120")
    page.click("[data-testid=record]")
    for key in ODE:
        page.keyboard.down(key)
        page.wait_for_timeout(430)
        page.keyboard.up(key)
        page.wait_for_timeout(70)
    page.click("[data-testid=record]")
    page.screenshot(path=str(out / "studio-melody.png"))
    finish(page, "[data-testid=accompany]")
    page.wait_for_function("Number(document.querySelector('[data-testid=roll]').dataset.cursor) > 2",
                           timeout=30_000)
    page.screenshot(path=str(out / "studio-accompanied.png"))


def shoot(base: str, out: Path, primer: Path, seed: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--autoplay-policy=no-user-gesture-required"])
        page = browser.new_page(viewport={"width": 1400, "height": 820}, device_scale_factor=1)
        page.goto(base)
        page.wait_for_selector(".chip[data-style=irish]")
        generate_and_continue(page, out, primer, seed)
        fill_a_span(page, out, primer)
        accompany_a_melody(page, out)
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
    print(f"wrote {', '.join(f'studio-{n}.png' for n in SHOTS)} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
