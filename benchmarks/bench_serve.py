"""The studio under load: 16 clients x 64 rounds of generations of 10 s of music against `cadenza serve`.

    python benchmarks/bench_serve.py --out benchmarks/results/serve/serve.json

Starts the server (its own process, its own data folder, 127.0.0.1), then
1. one client, batch 1, one generation after another: music seconds per wall second (real-time
   factor) and the time from the request to the first streamed note;
2. 16 clients at once, each making one generation a round (each style in turn), 64 rounds (1,024
   jobs): latency from request to the finished result (p50, p95), jobs per second, errors, time to
   the first note, and the server's resident memory after each round: its level over the last half
   of the run, and how fast it still grows there (a least-squares slope, KB per job).
Both start once the server's compiled decode step is ready (its build after a code change is waited
for, and the wait recorded).
With `--infill` and `--accompany`, the same two measures for the edits, each a row of its own:
filling a 6 s span (12-18 s) of a 30 s piece the server generated first, and accompanying a 20 s
melody posted as notes: time to the first new note and total time at batch 1, and errors and latency
under the clients' load (`--edit-rounds` rounds). `--no-generate` leaves out the generation rows.
Prints a table and writes the result JSON (with the CPU, its flags and the versions).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

# The goal for the server's memory over a long run: its last half adds less than this, at a level no
# higher than the one the server had before (`--level-goal`).
GOAL_LAST_HALF_MB = 1.0


def memory_reading(pid: int) -> dict:
    """Resident MB (/proc/PID/status VmRSS) and the thread count of a process: each new thread costs
    its stack and heap, so a count that still grows explains memory that does."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"rss": int(status["VmRSS"].split()[0]) / 1024, "threads": int(status["Threads"])}


def memory_summary(rss_mb: list[float], jobs_per_round: int, level_goal: float) -> dict:
    """Resident memory after each round -> the level over the run's last half (median), the growth
    there (a least-squares slope, and the MB it adds over that half) and whether the goal is met."""
    half = rss_mb[len(rss_mb) // 2:]
    jobs = [jobs_per_round * (i + 1) for i in range(len(rss_mb))][len(rss_mb) // 2:]
    slope = statistics.linear_regression(jobs, half).slope * 1024 if len(half) > 1 else float("nan")
    added = slope * (jobs[-1] - jobs[0]) / 1024
    level = statistics.median(half)
    return {"level_mb": level, "last_half_rounds": len(half), "last_half_slope_kb_per_job": slope,
            "last_half_added_mb": added, "goal": f"the last half adds < {GOAL_LAST_HALF_MB:g} MB at a level "
            f"<= {level_goal:g} MB", "goal_met": added < GOAL_LAST_HALF_MB and level <= level_goal}


def one_job(base: str, path: str, body: dict) -> dict:
    """POST a job (`path`: /api/jobs, /api/infill or /api/accompany), stream it to the end. -> latency,
    time to the first new note (a note the model wrote, not one it was given), music seconds, errors."""
    t0 = time.perf_counter()
    out = {"first_note": None, "error": None, "seconds": 0.0}
    with httpx.Client(base_url=base, timeout=600) as c:
        r = c.post(path, json=body)
        if r.status_code != 202:
            return {**out, "error": f"HTTP {r.status_code}: {r.text[:200]}", "latency": time.perf_counter() - t0}
        job = r.json()["id"]
        with c.stream("GET", f"/api/jobs/{job}/events") as s:
            for line in s.iter_lines():
                if not line.startswith("data: "):
                    continue
                e = json.loads(line[6:])
                if e["event"] == "notes" and any(e.get("new", e["notes"])) and out["first_note"] is None:
                    out["first_note"] = time.perf_counter() - t0
                if e["event"] in ("done", "failed", "cancelled"):
                    if e["event"] != "done":
                        out["error"] = e.get("error") or e["event"]
                    break
        info = c.get(f"/api/jobs/{job}").json()
    out["latency"] = time.perf_counter() - t0
    if info.get("result"):
        out["seconds"] = sum(v["seconds"] or 0 for v in info["result"]["variations"])
        out["busy"] = info["finished"] - info["started"]
        out["id"] = job
    return out


def style_of(styles: list[str], k: int, r: int) -> dict:
    """Client k's style in round r: each style in turn ({} for a model without styles)."""
    return {"style": styles[(k + r) % len(styles)]} if styles else {}


def generation(model: str, styles: list[str], seconds: float):
    """Job k of round r: a generation of `seconds` of music, each style in turn."""
    def job(k: int, r: int) -> tuple[str, dict]:
        return "/api/jobs", {"model": model, "settings": {"seconds": seconds, "seed": 1000 * r + k,
                                                           "stop_at_eos": False, **style_of(styles, k, r)}}
    return job


SPAN = (12.0, 18.0)  # the infill row's span: 6 s in the middle of a piece of PIECE_SECONDS
PIECE_SECONDS = 30.0
MELODY_SECONDS = 20.0


def infill(base: str, model: str, styles: list[str]):
    """Job k of round r: fill SPAN of a PIECE_SECONDS piece the server generated first (once), each job
    with its own seed and a style in turn."""
    piece = one_job(base, *generation(model, styles, PIECE_SECONDS)(0, 0))
    if piece["error"]:
        raise SystemExit(f"could not make the piece to fill: {piece['error']}")

    def job(k: int, r: int) -> tuple[str, dict]:
        return "/api/infill", {"model": model, "result": {"job": piece["id"], "variation": 0}, "start": SPAN[0],
                               "end": SPAN[1], "settings": {"seed": 1000 * r + k, **style_of(styles, k, r)}}
    return job


def melody(seconds: float = MELODY_SECONDS) -> list[dict]:
    """A tune of `seconds`, quarter notes at 120 bpm, as a client posts one it recorded: phrases of
    eight beats up and down a G major scale."""
    scale = [67, 69, 71, 72, 74, 76, 78, 79]
    phrase = [0, 1, 2, 3, 4, 3, 2, 1, 2, 4, 5, 4, 3, 2, 1, 0]
    return [{"start": i * 0.5, "end": i * 0.5 + 0.45, "pitch": scale[phrase[i % len(phrase)]], "velocity": 80}
            for i in range(int(seconds * 2))]


def accompany(base: str, model: str, styles: list[str]):
    """Job k of round r: accompany a MELODY_SECONDS melody posted as notes, a style in turn."""
    tune = melody()

    def job(k: int, r: int) -> tuple[str, dict]:
        return "/api/accompany", {"model": model, "notes": tune,
                                  "settings": {"seed": 1000 * r + k, **style_of(styles, k, r)}}
    return job


EDITS = {"infill": (infill, {"piece_seconds": PIECE_SECONDS, "span": list(SPAN)}),
         "accompany": (accompany, {"melody_seconds": MELODY_SECONDS})}


def wait_for_compiled_step(base: str, limit: float = 600) -> tuple[str, float]:
    """Wait until the server's background warm-up has built or loaded the compiled decode step:
    measured before, the figures would be of eager decoding beside a compiler (after a code or
    PyTorch change the package is rebuilt, about 20 s a shape). -> (its status, seconds waited)."""
    t0 = time.time()
    while True:
        state = httpx.get(f"{base}/api/health", timeout=5).json().get("compiled_step", "off")
        if state != "building" or time.time() - t0 > limit:
            return state, time.time() - t0
        time.sleep(0.5)


def solo(base: str, job, n: int, realtime: bool = True) -> dict:
    """`n` jobs one after another (`job(k, 0)` -> path and body): batch 1. With `realtime`, music
    seconds per second busy too (a generation's: an edit's music is mostly given)."""
    runs = [one_job(base, *job(k, 0)) for k in range(n)]
    out = {"first_note_median": statistics.median(r["first_note"] for r in runs if r["first_note"]),
           "total_median": statistics.median(r["latency"] for r in runs),
           "errors": sum(r["error"] is not None for r in runs)}
    if realtime:
        out["realtime_factor"] = [r["seconds"] / r["busy"] for r in runs if r.get("busy")]
        out["realtime_factor_median"] = statistics.median(out["realtime_factor"])
    return out


def crowd(base: str, job, clients: int, rounds: int, pid: int, level_goal: float) -> dict:
    """`clients` clients at once, each making one job a round (`job(k, r)` -> path and body)."""
    results: list[list[dict]] = [[] for _ in range(rounds)]
    readings = [memory_reading(pid)]  # before, and after each round
    barrier = threading.Barrier(clients, action=lambda: readings.append(memory_reading(pid)))

    def client(k: int) -> None:
        for r in range(rounds):
            t = time.perf_counter()
            try:
                results[r].append(one_job(base, *job(k, r)))
            except Exception as e:  # counted as an error; a dead client would leave the others at the barrier
                results[r].append({"first_note": None, "seconds": 0.0, "latency": time.perf_counter() - t,
                                   "error": f"{type(e).__name__}: {e}"[:200]})
            barrier.wait()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    flat = [x for r in results for x in r]
    lat = sorted(x["latency"] for x in flat)
    firsts = sorted(x["first_note"] for x in flat if x["first_note"] is not None)
    rss = [m["rss"] for m in readings]
    return {"jobs": len(flat), "errors": sum(x["error"] is not None for x in flat),
            "error_messages": sorted({x["error"] for x in flat if x["error"]})[:5], "wall_seconds": wall,
            "jobs_per_s": len(flat) / wall, "latency_p50": lat[len(lat) // 2],
            "latency_p95": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
            "first_note_p50": firsts[len(firsts) // 2] if firsts else None,
            "first_note_p95": firsts[min(len(firsts) - 1, int(0.95 * len(firsts)))] if firsts else None,
            "music_seconds": sum(x["seconds"] for x in flat), "rss_mb_before_and_after_each_round": rss,
            "threads_before_and_after_each_round": [m["threads"] for m in readings],
            "memory": memory_summary(rss[1:], clients, level_goal)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="styles", help="a model id the server offers (default: the shipped one)")
    ap.add_argument("--runs", help="--runs for the server (to benchmark a model of yours)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--solo", type=int, default=6, help="batch-1 jobs for the real-time factor and first note")
    ap.add_argument("--level-goal", type=float, default=360.0,
                    help="MB the server's memory may settle at (default: serve.json at 45c498d, on an AMD EPYC; "
                         "on another machine, what the code before that change settles at there)")
    ap.add_argument("--generate", action=argparse.BooleanOptionalAction, default=True,
                    help="the generation rows (--no-generate: only the edit rows asked for)")
    ap.add_argument("--infill", action="store_true", help=f"a row for filling a {SPAN[1] - SPAN[0]:g} s span "
                    f"of a {PIECE_SECONDS:g} s piece")
    ap.add_argument("--accompany", action="store_true", help=f"a row for accompanying a {MELODY_SECONDS:g} s melody")
    ap.add_argument("--edit-rounds", type=int, default=4, help="rounds of the clients' load for each edit row")
    ap.add_argument("--out", help="write the result JSON here")
    a = ap.parse_args(argv)
    from cadenza.env.record import cpu_info, git_commit, library_versions
    from cadenza.studio.server import launch

    load_before = os.getloadavg()[0]  # other work on the machine slows every figure but memory
    with tempfile.TemporaryDirectory(prefix="cadenza-bench-serve-") as data, \
            launch(data, *(("--runs", a.runs) if a.runs else ())) as server:
        compiled_step, warm_wait = wait_for_compiled_step(server.url)
        rows = measure(server, a, compiled_step)
    result = {"model": a.model, "clients": a.clients, "rounds": a.rounds, "seconds_per_job": a.seconds,
              "server_start_seconds": server.start_seconds, "compiled_step": compiled_step,
              "waited_for_compiled_step_seconds": warm_wait, **rows,
              "load_average_at_start": load_before, "load_average_at_end": os.getloadavg()[0], "cpu": cpu_info(),
              "torch_threads_per_job": max(1, (os.cpu_count() or 1) // 2),
              "code_commit": git_commit(), "versions": library_versions(("cadenza", "torch", "fastapi", "uvicorn")),
              "command": shlex.join(["python", "benchmarks/bench_serve.py", *(argv or sys.argv[1:])])}
    report(result)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def measure(server, a: argparse.Namespace, compiled_step: str) -> dict:
    """The rows `a` asks for, against the running `server`: the generation's ("solo", "crowd") and
    each edit's ("edits": {"infill": {"solo", "crowd", what it edits}, ...})."""
    from cadenza.models.zoo import DEFAULT

    if compiled_step != "ready":
        print(f"warning: the server's compiled decode step is {compiled_step!r}: the figures are of "
              "eager decoding", file=sys.stderr)
    if a.model != DEFAULT:
        print(f"warning: the server warms up only its default model; {a.model} may decode eagerly "
              "while its compiled step is built during the run", file=sys.stderr)
    model = next(m for m in httpx.get(f"{server.url}/api/models").json() if m["id"] == a.model)
    edits = [e for e in EDITS if getattr(a, e)]
    if missing := [e for e in edits if e not in model["tasks"]]:
        raise SystemExit(f"{a.model} cannot {' or '.join(missing)}: its tasks are {', '.join(model['tasks'])}")
    pid, rows = server.process.pid, {}
    if a.generate:
        job = generation(a.model, model["styles"], a.seconds)
        rows["solo"] = solo(server.url, job, a.solo)
        rows["crowd"] = crowd(server.url, job, a.clients, a.rounds, pid, a.level_goal)
    for name in edits:
        make, what = EDITS[name]
        job = make(server.url, a.model, model["styles"])
        one = solo(server.url, job, a.solo, realtime=False)
        many = crowd(server.url, job, a.clients, a.edit_rounds, pid, a.level_goal)
        rows.setdefault("edits", {})[name] = {**what, "rounds": a.edit_rounds, "solo": one, "crowd": many}
    return rows


def report(r: dict) -> None:
    print(f"server start {r['server_start_seconds']:.1f} s; compiled step {r['compiled_step']} "
          f"{r['waited_for_compiled_step_seconds']:.0f} s later")
    if "solo" in r:
        one, many, mem = r["solo"], r["crowd"], r["crowd"]["memory"]
        print(f"batch 1: {one['realtime_factor_median']:.1f}x real time, "
              f"first note {one['first_note_median'] * 1000:.0f} ms")
        print(f"{many['jobs']} jobs from {r['clients']} clients: {load(many)}; "
              f"threads {sorted(set(many['threads_before_and_after_each_round']))}")
        print(f"memory: {mem['level_mb']:.1f} MB over the last half, {mem['last_half_slope_kb_per_job']:+.2f} KB a "
              f"job there ({mem['last_half_added_mb']:+.2f} MB over {mem['last_half_rounds']} rounds); goal "
              f"({mem['goal']}): {'met' if mem['goal_met'] else 'NOT MET'}")
    for name, e in r.get("edits", {}).items():
        what = (f"a {e['span'][1] - e['span'][0]:g} s span of a {e['piece_seconds']:g} s piece" if name == "infill"
                else f"a {e['melody_seconds']:g} s melody")
        print(f"{name} ({what}), batch 1: first new note {e['solo']['first_note_median'] * 1000:.0f} ms, total "
              f"{e['solo']['total_median']:.2f} s, {e['solo']['errors']} errors; {e['crowd']['jobs']} jobs from "
              f"{r['clients']} clients: {load(e['crowd'])}")


def load(many: dict) -> str:
    """A crowd's figures in a line."""
    return (f"p50 {many['latency_p50']:.2f} s, p95 {many['latency_p95']:.2f} s, {many['jobs_per_s']:.2f} jobs/s, "
            f"{many['errors']} errors, first note p50 {(many['first_note_p50'] or 0) * 1000:.0f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
