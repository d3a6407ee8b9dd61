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


def one_job(base: str, model: str, settings: dict) -> dict:
    """POST a job, stream it to the end. -> latency, time to first note, music seconds, errors."""
    t0 = time.perf_counter()
    out = {"first_note": None, "error": None, "seconds": 0.0}
    with httpx.Client(base_url=base, timeout=600) as c:
        r = c.post("/api/jobs", json={"model": model, "settings": settings})
        if r.status_code != 202:
            return {**out, "error": f"HTTP {r.status_code}: {r.text[:200]}", "latency": time.perf_counter() - t0}
        job = r.json()["id"]
        with c.stream("GET", f"/api/jobs/{job}/events") as s:
            for line in s.iter_lines():
                if not line.startswith("data: "):
                    continue
                e = json.loads(line[6:])
                if e["event"] == "notes" and e["notes"] and out["first_note"] is None:
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
    return out


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


def solo(base: str, model: str, styles: list[str], seconds: float, n: int) -> dict:
    runs = [one_job(base, model, {"seconds": seconds, "seed": i, "stop_at_eos": False,
                                  **({"style": styles[i % len(styles)]} if styles else {})}) for i in range(n)]
    factor = [r["seconds"] / r["busy"] for r in runs if r.get("busy")]
    return {"realtime_factor_median": statistics.median(factor), "realtime_factor": factor,
            "first_note_median": statistics.median(r["first_note"] for r in runs if r["first_note"]),
            "errors": sum(r["error"] is not None for r in runs)}


def crowd(base: str, model: str, styles: list[str], seconds: float, clients: int, rounds: int, pid: int,
          level_goal: float) -> dict:
    results: list[list[dict]] = [[] for _ in range(rounds)]
    readings = [memory_reading(pid)]  # before, and after each round
    barrier = threading.Barrier(clients, action=lambda: readings.append(memory_reading(pid)))

    def client(k: int) -> None:
        for r in range(rounds):
            style = {"style": styles[(k + r) % len(styles)]} if styles else {}
            settings = {"seconds": seconds, "seed": 1000 * r + k, "stop_at_eos": False, **style}
            t = time.perf_counter()
            try:
                results[r].append(one_job(base, model, settings))
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
    ap.add_argument("--solo", type=int, default=6, help="batch-1 generations for the real-time factor")
    ap.add_argument("--level-goal", type=float, default=360.0,
                    help="MB the server's memory may settle at (default: serve.json at 45c498d, on an AMD EPYC; "
                         "on another machine, what the code before that change settles at there)")
    ap.add_argument("--out", help="write the result JSON here")
    a = ap.parse_args(argv)
    from cadenza.env.record import cpu_info, git_commit, library_versions
    from cadenza.models.zoo import DEFAULT
    from cadenza.studio.server import launch

    load_before = os.getloadavg()[0]  # other work on the machine slows every figure but memory
    with tempfile.TemporaryDirectory(prefix="cadenza-bench-serve-") as data, \
            launch(data, *(("--runs", a.runs) if a.runs else ())) as server:
        compiled_step, warm_wait = wait_for_compiled_step(server.url)
        if compiled_step != "ready":
            print(f"warning: the server's compiled decode step is {compiled_step!r}: the figures are of "
                  "eager decoding", file=sys.stderr)
        if a.model != DEFAULT:
            print(f"warning: the server warms up only its default model; {a.model} may decode eagerly "
                  "while its compiled step is built during the run", file=sys.stderr)
        styles = next(m["styles"] for m in httpx.get(f"{server.url}/api/models").json() if m["id"] == a.model)
        one = solo(server.url, a.model, styles, a.seconds, a.solo)
        many = crowd(server.url, a.model, styles, a.seconds, a.clients, a.rounds, server.process.pid, a.level_goal)
    result = {"model": a.model, "clients": a.clients, "rounds": a.rounds, "seconds_per_job": a.seconds,
              "server_start_seconds": server.start_seconds, "compiled_step": compiled_step,
              "waited_for_compiled_step_seconds": warm_wait, "solo": one, "crowd": many,
              "load_average_at_start": load_before, "load_average_at_end": os.getloadavg()[0], "cpu": cpu_info(),
              "torch_threads_per_job": max(1, (os.cpu_count() or 1) // 2),
              "code_commit": git_commit(), "versions": library_versions(("cadenza", "torch", "fastapi", "uvicorn")),
              "command": shlex.join(["python", "benchmarks/bench_serve.py", *(argv or sys.argv[1:])])}
    report(result)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def report(r: dict) -> None:
    one, many, mem = r["solo"], r["crowd"], r["crowd"]["memory"]
    print(f"server start {r['server_start_seconds']:.1f} s; compiled step {r['compiled_step']} "
          f"{r['waited_for_compiled_step_seconds']:.0f} s later")
    print(f"batch 1: {one['realtime_factor_median']:.1f}x real time, "
          f"first note {one['first_note_median'] * 1000:.0f} ms")
    print(f"{many['jobs']} jobs from {r['clients']} clients: p50 {many['latency_p50']:.2f} s, p95 "
          f"{many['latency_p95']:.2f} s, {many['jobs_per_s']:.2f} jobs/s, {many['errors']} errors, first note p50 "
          f"{(many['first_note_p50'] or 0) * 1000:.0f} ms; "
          f"threads {sorted(set(many['threads_before_and_after_each_round']))}")
    print(f"memory: {mem['level_mb']:.1f} MB over the last half, {mem['last_half_slope_kb_per_job']:+.2f} KB a job "
          f"there ({mem['last_half_added_mb']:+.2f} MB over {mem['last_half_rounds']} rounds); goal ({mem['goal']}): "
          f"{'met' if mem['goal_met'] else 'NOT MET'}")


if __name__ == "__main__":
    raise SystemExit(main())
