"""Latency of `cadenza duet`: phrases played into in-memory ports, what comes out timestamped.

    python benchmarks/bench_duet.py --phrases 50 --out benchmarks/results/duet/duet.json

* answer: from the end of the pause (the last note-off + --wait) to the answer's first note-on as
  the output port received it,
  p50 / p95 / max over --phrases phrases, each answer played to its end;
* jitter: how late each of the model's messages went out against its schedule;
* real-time factor: seconds of music an answer holds over the seconds it took to write;
* memory: the process's RSS over --hour-phrases phrases played as fast as they can be answered
  and cut (each answer cut by the next phrase once its first note sounds), as many as an hour of
  duet holds (8 s a phrase and its answer), and its slope per 10 minutes of that hour;
* stuck notes: note-ons without their note-off, after the phrases and after a stop mid-answer.

The phrases are melodies in the style's range, a new one each time (seeded). The machine, the code
and the command are recorded with the numbers.
"""

from __future__ import annotations

import argparse
import resource
import threading
import time

import numpy as np


def percentiles(values) -> dict:
    v = np.asarray(values, np.float64) * 1000
    if not v.size:
        return {"n": 0}
    return {"n": int(v.size), "p50_ms": float(np.percentile(v, 50)), "p95_ms": float(np.percentile(v, 95)),
            "max_ms": float(v.max())}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def stuck(sent) -> int:
    sounding: dict[int, int] = {}
    for _, m in sent:
        if m.type in ("note_on", "note_off"):
            sounding[m.note] = sounding.get(m.note, 0) + (1 if m.type == "note_on" and m.velocity else -1)
    return sum(max(v, 0) for v in sounding.values())


def play(into, rng, notes: int, step: float):
    import mido

    pitch = int(rng.integers(60, 72))
    for _ in range(notes):
        pitch = int(np.clip(pitch + rng.integers(-4, 5), 55, 84))
        into.play(mido.Message("note_on", note=pitch, velocity=90))
        time.sleep(step)
        into.play(mido.Message("note_off", note=pitch))
    return time.monotonic()  # the phrase's end: its last note-off


def main(argv=None) -> int:
    from _record import write_result

    from cadenza.generation.generate import open_checkpoint, sampling_config
    from cadenza.live.config import DuetConfig
    from cadenza.live.engine import Duet
    from cadenza.live.ports import MemoryInput, MemoryOutput

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--style", default="irish")
    ap.add_argument("--phrases", type=int, default=50)
    ap.add_argument("--hour-phrases", type=int, default=450, help="phrases of the simulated hour (0: skip it)")
    ap.add_argument("--reply", type=float, default=2.0)
    ap.add_argument("--wait", type=float, default=0.4)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    loaded = open_checkpoint(a.checkpoint, sampling_config(), "cpu")
    rng = np.random.default_rng(0)
    out = MemoryOutput()
    t0 = time.perf_counter()
    duet = Duet(loaded, out, DuetConfig(style=a.style, reply=a.reply, wait=a.wait, compile=not a.no_compile))
    warm = time.perf_counter() - t0
    into = MemoryInput(duet.feed)
    thread = threading.Thread(target=duet.run, daemon=True)
    thread.start()
    latency = []  # from the pause's end to the answer's first note-on as the output port got it
    for k in range(a.phrases):  # each answer played to its end
        mark = len(out.sent)
        ended = play(into, rng, 8, 0.15)
        deadline = time.monotonic() + 60
        while (duet.stats.answers <= k or duet.scheduler.pending()) and time.monotonic() < deadline:
            time.sleep(0.01)
        ons = [t for t, m in out.sent[mark:] if m.type == "note_on" and m.velocity and t > ended]
        if ons:
            latency.append(min(ons) - (ended + a.wait))
        print(f"\rphrase {k + 1}/{a.phrases}", end="", flush=True)
    answers = dict(latency=latency, jitter=list(duet.scheduler.lateness), gen=list(duet.stats.generation_seconds))
    stuck_after = stuck(out.take())
    memory = []
    for k in range(a.hour_phrases):  # an hour of phrases, each answer cut once it sounds
        n = len(duet.stats.latency)
        play(into, rng, 4, 0.03)
        deadline = time.monotonic() + 60
        while len(duet.stats.latency) == n and time.monotonic() < deadline:
            time.sleep(0.005)
        if k % 25 == 0:
            memory.append((k, rss_mb()))
            out.take()
            print(f"\rhour phrase {k + 1}/{a.hour_phrases}, RSS {memory[-1][1]:.0f} MB", end="", flush=True)
    play(into, rng, 3, 0.05)  # a last phrase, stopped mid-answer as Ctrl-C would
    deadline = time.monotonic() + 60
    while not duet.scheduler.sounding() and time.monotonic() < deadline:
        time.sleep(0.005)
    duet.stop.set()
    thread.join(timeout=30)
    stuck_stop = stuck(out.take())
    into.close()
    minutes = np.array([k for k, _ in memory]) * 8 / 60  # a phrase and its answer: 8 s of duet
    rss = np.array([m for _, m in memory])
    slope = float(np.polyfit(minutes[len(minutes) // 4:], rss[len(rss) // 4:], 1)[0] * 10) if len(memory) > 4 \
        else float("nan")  # after the first quarter: allocators settle
    report = {"benchmark": "duet", "mode": "answer", "style": a.style, "reply_seconds": a.reply, "wait": a.wait,
              "warm_up_seconds": warm, "phrases": a.phrases,
              "answer_latency": percentiles(answers["latency"]), "jitter": percentiles(answers["jitter"]),
              "real_time_factor": float(a.reply / np.median(answers["gen"])) if answers["gen"] else None,
              "stuck_notes_after_phrases": stuck_after, "stuck_notes_after_stop": stuck_stop,
              "hour": {"phrases": a.hour_phrases, "rss_mb": memory, "slope_mb_per_10_min": slope},
              "accompany": "not measured: accompany mode needs a model on the metrical vocabulary"}
    print()
    for k in ("answer_latency", "jitter"):
        r = report[k]
        print(f"{k:<15} p50 {r['p50_ms']:.1f} ms  p95 {r['p95_ms']:.1f} ms  max {r['max_ms']:.1f} ms  (n {r['n']})")
    print(f"real time x{report['real_time_factor']:.1f}; stuck notes {stuck_after} / {stuck_stop}; "
          f"RSS slope {slope:+.2f} MB per 10 min")
    write_result(a.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
