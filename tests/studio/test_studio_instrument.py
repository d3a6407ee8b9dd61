"""The studio as an instrument, in a real browser (Playwright driving Debian's Chromium) with the
shipped note-vocabulary model: select a span of a dropped file by dragging across the roll and
regenerate it (every note outside it unchanged in the downloaded MIDI), step through the variations,
keep one, edit it again, undo; play a melody in through a (fake) MIDI keyboard, the on-screen keys
and the computer's keys, accompany it (the melody note for note in the downloaded MIDI, with at
least two more voices) and hear it with the cursor moving; no console errors.

What is asserted holds for any model that infills and accompanies, not for one set of weights.
Pieces are a few seconds long, so that the whole module takes well under a minute on 2 cores.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from studio_client import keyed, midi_rows, serving
from studio_page import DONE, VIEWPORT, chromium, need_chromium, notes_on_roll, shot, watch

from cadenza.data.midi import Notes, write_midi

need_chromium()
pytest.importorskip("playwright.sync_api")

JOB = 90_000  # ms: the longest wait for one job of a few seconds of music on a busy 2-core machine
# 8 s in four parts, quarter notes at 120 bpm: a piece to fill
CHORALE = [(b * 0.5, b * 0.5 + 0.45, base + b % 3, 80) for b in range(16) for base in (72, 65, 60, 48)]
TUNE = [67, 69, 71, 72, 74, 72, 71, 67]
SCREEN_TUNE = [72, 76, 79, 77, 74, 72]
# A MIDI keyboard the page can find: Chromium without a device (headless) refuses Web MIDI
FAKE_MIDI = """
window.fakeMidi = { name: "test keyboard", onmidimessage: null };
navigator.requestMIDIAccess = async () => ({ inputs: new Map([["k", window.fakeMidi]]), outputs: new Map() });
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from cadenza.studio.app import Limits, create_app

    app = create_app(tmp_path_factory.mktemp("studio-data"), None, Limits(max_running=1))
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def open_page(browser, server):
    """open_page(init_script=None) -> a fresh page of the studio (its own browser context) and the list
    its errors go to."""
    contexts = []

    def open_(init_script: str | None = None):
        contexts.append(context := browser.new_context(viewport=VIEWPORT, accept_downloads=True))
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        errors = watch(page)
        page.goto(server)
        page.wait_for_selector(".chip[data-style=bach]")
        return page, errors

    yield open_
    for c in contexts:
        c.close()


def run_job(page, button: str) -> str:
    """Click `button`, wait for the job it starts to be finished on stage -> its id."""
    before = json.dumps(page.evaluate("window.studio.job && window.studio.job.id"))
    page.click(button)
    page.wait_for_function(f"window.studio.job && window.studio.job.id !== {before} && {DONE}", timeout=JOB)
    return page.evaluate("window.studio.job.id")


def drag_span(page, start: float, end: float) -> tuple[float, float]:
    """Drag across the roll's time axis from `start` to `end` seconds -> the span the page selected."""
    roll = page.locator("[data-testid=roll]")
    box = roll.bounding_box()
    x0, x1, length = (float(roll.get_attribute(f"data-{k}")) for k in ("x0", "x1", "end"))
    x, y = (lambda t: box["x"] + x0 + t / length * (x1 - x0)), box["y"] + box["height"] / 2
    page.mouse.move(x(start), y)
    page.mouse.down()
    page.mouse.move(x(end), y, steps=6)
    page.mouse.up()
    bar = page.wait_for_selector("[data-testid=span]:not([hidden])", timeout=5_000)
    return float(bar.get_attribute("data-start")), float(bar.get_attribute("data-end"))


def download(page) -> list[tuple[float, float, int]]:
    with page.expect_download(timeout=10_000) as d:
        page.click("[data-testid=download-midi]")
    return midi_rows(Path(d.value.path()).read_bytes())


def get(page, path: str):
    """The JSON at `path` of the page's server, fetched by the page (as the page's own requests go)."""
    return page.evaluate("async (path) => (await fetch(path)).json()", path)


def outside(rows, span) -> set:
    return keyed(r for r in rows if not span[0] <= r[0] < span[1])


def test_a_span_is_filled_kept_filled_again_and_undone(open_page, tmp_path):
    page, errors = open_page()
    s, e, p, v = map(np.array, zip(*CHORALE))
    piece = write_midi(Notes.from_arrays(s, e, p, v), tmp_path / "chorale.mid")
    page.set_input_files("#file", str(piece))  # what dropping a file does: it goes on stage, all given
    page.wait_for_function(f"document.querySelector('[data-testid=roll]').dataset.given === '{len(CHORALE)}'")
    page.select_option("[data-testid=variations]", "2")
    span = drag_span(page, 2.0, 4.0)
    assert span == (2.0, 4.0)
    first = run_job(page, "[data-testid=regenerate]")
    assert page.locator("[data-testid=tabs] .tab").count() == 2 and page.is_visible("[data-testid=keep]")
    assert notes_on_roll(page, "given") == len(outside(CHORALE, span))  # given and new: drawn apart
    shot(page, "span", tmp_path)

    page.click("[data-testid=tabs] .tab[data-i='1']")  # B
    page.wait_for_function("window.studio.variation === 1")
    page.click("[data-testid=keep]")
    assert page.locator("[data-testid=tabs] .tab").count() == 0 and page.is_hidden("[data-testid=keep]")
    kept = download(page)
    assert outside(kept, span) == outside(CHORALE, span)  # nothing outside the span moved

    page.select_option("[data-testid=variations]", "1")
    again = drag_span(page, 5.0, 6.5)
    second = run_job(page, "[data-testid=regenerate]")
    assert outside(download(page), again) == outside(kept, again)  # the kept variation was edited
    assert get(page, f"/api/jobs/{second}")["result"]["primer"]["name"] == f"job {first}"

    page.click("[data-testid=undo]")  # back to the kept variation
    assert page.evaluate("[window.studio.job.id, window.studio.variation]") == [first, 1]
    page.click("[data-testid=undo]")  # back to the dropped file
    assert page.evaluate("window.studio.piece && window.studio.piece.name") == "chorale.mid"
    assert page.is_hidden("[data-testid=undo]")
    assert errors == [], errors


def test_a_span_snaps_to_the_bars_of_the_file(open_page, tmp_path):
    # a waltz with a one-beat pickup at 120 qpm: bar lines at 0, 0.5, 2, 3.5, 5, 6.5 s; a drag from
    # inside bar 2 to inside bar 3 selects bars 2-3, as a score numbers them (the pickup is bar 0)
    from cadenza.data.meter import Meter

    page, errors = open_page()
    meter = Meter.from_changes([(0, 120)], [(0, 1, 4), (1, 3, 4)])
    q = np.arange(13) * 1.0
    notes = Notes.from_arrays(meter.seconds(q), meter.seconds(q + 0.9), 60 + q.astype(int) % 5, np.full(13, 80),
                              meter=meter)
    page.set_input_files("#file", str(write_midi(notes, tmp_path / "waltz.mid")))
    page.wait_for_function("document.querySelector('[data-testid=roll]').dataset.given === '13'")
    assert int(page.locator("[data-testid=roll]").get_attribute("data-bars")) == 6  # drawn: five bars, closed
    assert drag_span(page, 2.3, 4.2) == (2.0, 5.0)
    assert page.inner_text("#span-text").startswith("bars 2\u20133")
    assert errors == [], errors


def test_a_melody_from_a_midi_keyboard_is_accompanied_and_played(open_page, tmp_path):
    page, errors = open_page(FAKE_MIDI)
    page.wait_for_selector("[data-testid=midi-status][data-inputs='1']")
    page.fill("[data-testid=tempo]", "240")  # the metronome clicks 4 times a second
    page.click("[data-testid=record]")
    page.evaluate("""async (tune) => {
        const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
        const send = (...data) => window.fakeMidi.onmidimessage({ data: new Uint8Array(data) });
        for (const [i, p] of tune.entries()) {  // note off both ways: 0x80, and 0x90 with velocity 0
            send(0x90, p, 100); await sleep(200); send(i % 2 ? 0x90 : 0x80, p, 0); await sleep(50);
        }
    }""", TUNE)
    page.click("[data-testid=record]")
    assert int(page.get_attribute("[data-testid=metronome]", "data-beats")) >= 3
    melody = recorded(page, TUNE)
    shot(page, "recorded", tmp_path)

    run_job(page, "[data-testid=accompany]")
    accompanied(download(page), melody)
    # it plays at once, the cursor moving over the roll
    page.wait_for_function("Number(document.querySelector('[data-testid=roll]').dataset.cursor) > 0.3",
                           timeout=10_000)
    shot(page, "accompanied", tmp_path)
    page.click("[data-testid=play]")
    page.wait_for_function("document.querySelector('[data-testid=audio]').paused", timeout=5_000)
    assert errors == [], errors


def test_a_melody_from_the_screen_and_the_computer_keys_and_a_top_line(open_page, tmp_path):
    page, errors = open_page()
    # headless Chromium refuses Web MIDI: the page says so, quietly, and its keys play
    page.wait_for_function("document.querySelector('[data-testid=midi-status]').textContent.includes('keys')")
    page.uncheck("[data-testid=metronome]")
    page.click("[data-testid=octave-up]")
    assert page.text_content("[data-testid=octave]") == "C5"
    page.click("[data-testid=record]")
    for pitch in SCREEN_TUNE:  # the on-screen keys, held a moment each: a tune of about 2.5 s
        box = page.locator(f"[data-testid=keys] [data-pitch='{pitch}']").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] - 8)
        page.mouse.down()
        page.wait_for_timeout(400)
        page.mouse.up()
    page.click("[data-testid=record]")
    melody = recorded(page, SCREEN_TUNE)
    first = run_job(page, "[data-testid=accompany]")
    result = download(page)
    accompanied(result, melody)

    page.click("[data-testid=top-line]")  # the result's top line becomes the melody
    assert "top line" in page.text_content("[data-testid=melody-info]")
    run_job(page, "[data-testid=accompany]")
    given = page.evaluate("window.studio.variations[0].notes.filter((n, i) => !window.studio.variations[0].new[i])")
    assert given and {n[2] for n in given} <= {r[2] for r in result}  # its melody came from that result
    assert get(page, "/api/history")[0]["primer"]["name"] == f"top line of job {first}"

    page.click("[data-testid=record]")  # the computer's keys: Z and X shift an octave
    for key in ("z", "a", "d", "x", "a"):
        page.keyboard.down(key)
        page.wait_for_timeout(120)
        page.keyboard.up(key)
    page.click("[data-testid=record]")
    recorded(page, [60, 64, 72])
    assert errors == [], errors


def recorded(page, pitches: list[int]) -> list[list[float]]:
    """The melody the page took, checked: `pitches` in order, one note at a time -> its notes."""
    notes = page.evaluate("window.studio.melody.notes")
    assert [n[2] for n in notes] == pitches
    assert all(0 < b - a < 2 for a, b, *_ in notes) and all(x[1] <= y[0] for x, y in pairwise(notes))
    assert f"played melody ({len(pitches)} notes" in page.text_content("[data-testid=melody-info]")
    return notes


def accompanied(rows: list[tuple[float, float, int]], melody: list[list[float]]) -> None:
    """The melody is in `rows` note for note (to a MIDI tick or two), and the other notes make at
    least two more voices: two or more of them sound at once."""
    rest = list(rows)
    for a, b, pitch, _ in melody:
        match = [r for r in rest if r[2] == pitch and abs(r[0] - a) < 0.003 and abs(r[1] - b) < 0.003]
        assert match, f"melody note {pitch} at {a:.3f}-{b:.3f} s is not in the MIDI file"
        rest.remove(match[0])
    edges = sorted([(a, 1) for a, _, _ in rest] + [(b, -1) for _, b, _ in rest])  # an end before a start
    assert max(np.cumsum([d for _, d in edges]), default=0) >= 2, rest


def test_a_duet_answers_a_phrase_from_a_midi_keyboard(open_page, tmp_path):
    # Duet mode: the played phrase goes to the engine over the socket; its answer comes back note by
    # note, sounds through the page's synthesizer and is drawn as new notes; stopping ends it
    page, errors = open_page(FAKE_MIDI)
    page.wait_for_selector("[data-testid=midi-status][data-inputs='1']")
    page.click("[data-testid=duet]")
    page.wait_for_function("window.studio.duet.state === 'listening'", timeout=JOB)
    page.evaluate("""async (tune) => {
        const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
        const send = (...data) => window.fakeMidi.onmidimessage({ data: new Uint8Array(data) });
        for (const p of tune) { send(0x90, p, 100); await sleep(150); send(0x80, p, 0); await sleep(30); }
    }""", TUNE)
    page.wait_for_function("window.studio.duet.heard >= 3 && window.studio.duet.answers >= 1", timeout=JOB)
    roll = page.locator("[data-testid=roll]")
    assert int(roll.get_attribute("data-notes")) >= 1 and int(roll.get_attribute("data-given")) == len(TUNE)
    shot(page, "duet", tmp_path)
    page.click("[data-testid=duet]")
    page.wait_for_function("window.studio.duet.state === 'off'", timeout=10_000)
    assert errors == [], errors
