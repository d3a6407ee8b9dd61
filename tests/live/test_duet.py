"""The duet engine with in-memory ports: a phrase in gives an answer out, playing on cuts it, every
note it starts ends, and all-notes-off closes it; the CLI's port errors are one line each."""

from __future__ import annotations

import sys
import threading
import time

import mido
import pytest

from cadenza.cli import main
from cadenza.generation.generate import open_checkpoint, sampling_config
from cadenza.live import ports
from cadenza.live.config import DuetConfig
from cadenza.live.engine import Duet
from cadenza.live.ports import MemoryInput, MemoryOutput
from tests.conftest import wait_until


@pytest.fixture(scope="module")
def shipped():
    return open_checkpoint(None, sampling_config(), "cpu")


@pytest.fixture
def playing(shipped):
    """A duet with the shipped model on in-memory ports, listening in a thread; closed after."""
    out = MemoryOutput()
    duet = Duet(shipped, out, DuetConfig(style="irish", reply=2.0, wait=0.3, program=40))
    into = MemoryInput(duet.feed)
    thread = threading.Thread(target=duet.run, daemon=True)
    thread.start()
    yield duet, into, out
    duet.stop.set()
    thread.join(timeout=20)
    into.close()


def phrase(into, pitches=(62, 64, 66, 67, 69, 71), step=0.12):
    for p in pitches:
        into.play(mido.Message("note_on", note=p, velocity=90))
        time.sleep(step)
        into.play(mido.Message("note_off", note=p))


def balanced(messages) -> bool:
    sounding: dict[int, int] = {}
    for _, m in messages:
        if m.type in ("note_on", "note_off"):
            sounding[m.note] = sounding.get(m.note, 0) + (1 if m.type == "note_on" and m.velocity else -1)
    return all(v == 0 for v in sounding.values())


def test_a_phrase_is_answered_and_every_note_ends(playing):
    duet, into, out = playing
    phrase(into)
    ended = time.monotonic()
    wait_until(lambda: duet.stats.answers >= 1 and duet.scheduler.pending() == 0, timeout=60)
    sent = out.take()
    assert sent[0][1].type == "program_change" and sent[0][1].program == 40
    ons = [t for t, m in sent if m.type == "note_on"]
    assert len(ons) > 1 and duet.stats.latency[0] < 1.0  # an answer, soon after the pause
    assert min(ons) > ended + 0.3 - 0.05  # after the phrase and its pause, never over it
    assert balanced(sent)


def test_playing_on_cuts_the_answer(playing):
    duet, into, out = playing
    phrase(into)
    wait_until(lambda: any(m.type == "note_on" for _, m in out.sent), timeout=60)
    into.play(mido.Message("note_on", note=50, velocity=90))  # cut in
    wait_until(lambda: duet.stats.cut == 1 and duet.scheduler.sounding() == 0, timeout=10)
    cut_at = time.monotonic()
    time.sleep(0.5)
    assert not any(m.type == "note_on" for t, m in out.take() if t > cut_at)  # nothing more of that answer
    into.play(mido.Message("note_off", note=50))


def test_closing_ends_every_note_and_sends_all_notes_off(shipped):
    out = MemoryOutput()
    duet = Duet(shipped, out, DuetConfig(reply=8.0, wait=0.2))
    into = MemoryInput(duet.feed)
    thread = threading.Thread(target=duet.run, daemon=True)
    thread.start()
    phrase(into, (60, 64, 67))
    wait_until(lambda: duet.scheduler.sounding() > 0, timeout=60)  # mid-answer, notes sounding
    duet.stop.set()  # as Ctrl-C does
    thread.join(timeout=20)
    sent = out.take()
    assert balanced(sent)
    last = sent[-1][1]
    assert last.type == "control_change" and last.control == 123
    into.close()


def test_accompany_mode_says_the_shipped_model_cannot(shipped):
    with pytest.raises(ValueError, match="accompany mode .* metrical vocabulary"):
        Duet(shipped, MemoryOutput(), DuetConfig(mode="accompany"))


def test_port_errors_are_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rtmidi", None)  # no python-rtmidi
    assert main(["duet", "--list-ports"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["cadenza duet: error: real MIDI ports need python-rtmidi: pip install 'cadenza[live]' (the "
                   "in-memory ports need nothing)"]
    monkeypatch.setattr(ports, "_mido", lambda: mido)
    monkeypatch.setattr(ports, "list_ports", lambda: {"inputs": ["Keystation 49"], "outputs": ["FluidSynth"]})
    with pytest.raises(ports.PortError, match=r"^no MIDI input port named 'Roland' \(this machine has: 0: "
                                              r"Keystation 49\); see cadenza duet --list-ports$"):
        ports.open_input("Roland", callback=print)


def test_a_note_within_the_pause_drops_the_answer_unheard(playing):
    # The answer is written while the player pauses; a note before the pause ends means the phrase
    # goes on: nothing of that answer may sound, and it is no cut.
    duet, into, out = playing
    phrase(into)
    time.sleep(duet.cfg.wait / 3)
    into.play(mido.Message("note_on", note=60, velocity=90))
    time.sleep(duet.cfg.wait * 2)
    assert not any(m.type == "note_on" for _, m in out.take())
    assert duet.stats.cut == 0 and duet.stats.answers == 0
    into.play(mido.Message("note_off", note=60))
    ended = time.monotonic()
    wait_until(lambda: duet.stats.answers >= 1 and duet.scheduler.pending() == 0, timeout=60)
    ons = [t for t, m in out.take() if m.type == "note_on"]
    assert ons and min(ons) > ended + duet.cfg.wait - 0.05
