"""What the studio's browser tests share: Debian's Chromium driven by Playwright, a page that records
every console error and uncaught exception, and screenshots.

Screenshots go to $CADENZA_SCREENSHOTS when it is set, else to the test's temporary folder. CI
installs Chromium (.ci/run), so there a missing browser fails the tests rather than skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
VIEWPORT = {"width": 1400, "height": 820}
# A finished job is on stage: the page is not busy and its audio can be played
DONE = "window.studio.job && !window.studio.busy && !document.querySelector('[data-testid=play]').disabled"


def need_chromium() -> None:
    """Skip the calling test module where Chromium is missing, except in CI; there it must be."""
    if CHROMIUM is None and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


@contextlib.contextmanager
def chromium() -> Iterator:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "chromium is not installed: .ci/run installs it (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watch(page, refusals: tuple[str, ...] = ()) -> list[str]:
    """The page's uncaught exceptions and console errors, as they happen. Chromium logs every 4xx a
    fetch gets as an error: `refusals` are the endings of URLs whose refusal the page expects and
    shows (a score of music that cannot be engraved is a 422)."""
    errors: list[str] = []

    def console(m) -> None:
        url = (m.location or {}).get("url", "")
        if m.type == "error" and not (m.text.startswith("Failed to load resource") and url.endswith(refusals)):
            errors.append(f"console: {m.text} ({url})")

    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("console", console)
    return errors


def shot(page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("CADENZA_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"studio-{name}.png"))


def notes_on_roll(page, which: str = "notes") -> int:
    """The notes drawn on the main roll: "notes" the new ones, "given" those given."""
    return int(page.get_attribute("[data-testid=roll]", f"data-{which}"))
