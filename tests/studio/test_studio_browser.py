"""The studio page in a real browser: Playwright driving Debian's Chromium against a live server.

Open the page, pick a style, generate, watch the notes arrive, play and hear the time move, download
the MIDI, drop a primer and continue it, cancel a job; no console errors. Screenshots go to
$CADENZA_SCREENSHOTS when it is set (docs/studio.md uses them). The studio as an instrument (filling
a span, playing a melody in, accompanying it) is test_studio_instrument.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import symusic
from conftest import make_score, wait_until, write_score
from studio_client import serving
from studio_page import VIEWPORT, chromium, need_chromium, notes_on_roll, shot, watch

need_chromium()
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(studio_runs, tmp_path_factory):
    from cadenza.studio.app import Limits, create_app

    app = create_app(tmp_path_factory.mktemp("studio-data"), studio_runs, Limits(max_running=1))
    with serving(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def page(server):
    with chromium() as browser:
        pg = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
        errors = watch(pg, refusals=("/score",))  # random music may not engrave: the page says so
        pg.goto(server[0])
        yield pg
        assert errors == [], errors


def test_generate_listen_download_continue_and_cancel(page, server, tmp_path):
    # the shipped model is listed first; the test's own small run is quicker to wait for
    page.wait_for_selector("[data-testid=model] option[value='run:tiny']", state="attached")
    page.select_option("[data-testid=model]", "run:tiny")
    page.wait_for_selector(".chip[data-style=jig]")
    page.click(".chip[data-style=jig]")
    assert "on" in page.get_attribute(".chip[data-style=jig]", "class")
    page.click("[data-testid=dice]")
    page.fill("[data-testid=seed]", "7")
    page.click("[data-testid=generate]")
    page.wait_for_function("Number(document.querySelector('[data-testid=roll]').dataset.notes) > 0", timeout=30_000)
    page.wait_for_selector("[data-testid=play]:not([disabled])", timeout=30_000)
    assert notes_on_roll(page) > 0
    shot(page, "generated", tmp_path)

    page.click("[data-testid=play]")  # the audio plays and its time moves on
    page.wait_for_function("document.querySelector('[data-testid=audio]').currentTime > 0.3", timeout=10_000)
    page.keyboard.press("Space")  # space pauses
    page.wait_for_function("document.querySelector('[data-testid=audio]').paused", timeout=5_000)
    assert page.text_content("[data-testid=clock]").split(" / ")[0] != "0:00.0"

    with page.expect_download() as download:
        page.click("[data-testid=download-midi]")
    assert download.value.suggested_filename.endswith(".mid")
    assert symusic.Score.from_midi(Path(download.value.path()).read_bytes()).note_num() > 0  # a real MIDI file

    primer = write_score(make_score([[(i * 240, 240, 60 + (i * 5) % 12, 90) for i in range(16)]]),
                         tmp_path / "opening.mid")
    page.set_input_files("#file", str(primer))  # what dropping a file does
    page.wait_for_selector("[data-testid=primer-roll]:not([hidden])")
    before = page.evaluate("window.studio.job.id")
    page.click("[data-testid=generate]")
    page.wait_for_function(f"window.studio.job && window.studio.job.id !== '{before}' && "
                           "!document.querySelector('[data-testid=play]').disabled", timeout=30_000)
    assert page.evaluate("window.studio.jobCut") > 0 and notes_on_roll(page) > 0
    shot(page, "continued", tmp_path)
    page.click("[data-testid=score-toggle]")
    page.wait_for_function("!document.querySelector('[data-testid=score]').textContent.includes('engraving')",
                           timeout=60_000)
    shot(page, "score", tmp_path)

    _cancel_a_job(page, server[1])
    assert page.locator("[data-testid=history] li").count() >= 2  # the history lists what was made


def _cancel_a_job(page, app) -> None:
    gate = threading.Event()
    real = app.state.jobs._run

    def slow(job):  # hold the job, as a long piece on a busy machine would; a cancelled one stops at `check`
        wait_until(lambda: job.check() or gate.is_set(), timeout=60)
        return real(job)

    app.state.jobs._run = slow
    try:
        page.click("[data-testid=generate]")
        page.wait_for_selector("[data-testid=cancel]:not([hidden])")
        page.click("[data-testid=cancel]")
        page.wait_for_function("document.querySelector('[data-testid=status]').textContent.includes('cancelled')")
        job = page.evaluate("window.studio.job.id")
        wait_until(lambda: app.state.jobs.get(job).status == "cancelled", timeout=5)
    finally:
        app.state.jobs._run = real
        gate.set()


def test_the_page_says_when_the_fast_decoder_is_warming_up_and_when_it_is_ready(page, server):
    app = server[1]
    assert page.is_hidden("[data-testid=speed]")  # a server that started no warm-up says nothing
    try:
        app.state.warm["compiled_step"] = "building"
        page.reload()
        page.wait_for_selector("[data-testid=speed][data-state=building]")
        app.state.warm["compiled_step"] = "ready"  # the page polls while it builds
        page.wait_for_selector("[data-testid=speed][data-state=ready]", timeout=10_000)
        assert page.text_content("[data-testid=speed]") == "fast decoding"
        app.state.warm["compiled_step"] = "eager: no C++ compiler found"
        page.reload()
        page.wait_for_selector("[data-testid=speed][data-state=eager]")
        assert page.get_attribute("[data-testid=speed]", "title") == "no C++ compiler found"
    finally:
        app.state.warm["compiled_step"] = "off"
