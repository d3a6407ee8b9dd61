"""The studio under load: 16 clients x 4 generations of 10 s of music against `cadenza serve`.

    python benchmarks/bench_serve.py --out benchmarks/results/serve/serve.json

Starts the server (its own process, its own data folder, 127.0.0.1), then
1. one client, batch 1, one generation after another: music seconds per wall second (real-time
   factor) and the time from the request to the first streamed note;
2. 16 clients at once, each making 4 generations one after another (each style in turn): latency
   from request to the finished result (p50, p95), jobs per second, errors, time to the first note,
   and the server's memory (RSS, and its anonymous and file-backed parts) before, and after each
   round of 16.
Both start once the server's compiled decode step is ready (its build after a code change is waited
for, and the wait recorded).
Prints a table and writes the result JSON (with the CPU, its flags and the versions).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx


ALLOCATOR_ENV = ("GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                 "MALLOC_TOP_PAD_", "PYTHONMALLOC", "LD_PRELOAD", "MKL_DISABLE_FAST_MM")


def process_environment(pid: int, names) -> dict[str, str]:
    """The variables among `names` in a running process's environment (/proc/PID/environ): what
    the server runs with, including what `cadenza serve` set when it restarted itself."""
    pairs = (item.decode(errors="replace").partition("=") for item in
             Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if item)
    return {k: v for k, _, v in pairs if k in names}


def memory_reading(pid: int) -> dict:
    """One reading of /proc/PID/status: resident MB in all, by kind (anonymous: the heaps and thread
    stacks, what a leak grows; file: code and mapped files, paged in as code paths are first used,
    which settles and the system can drop; shared memory), and the thread count (each new thread
    costs its stack and heap, so a count that still grows explains memory that does)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()[0] if value.split() else ""
    mb = {name: float(fields.get(name, "nan")) / 1024 for name in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}
    return {"rss": mb["VmRSS"], "parts": {k: mb[f"Rss{k}"] for k in ("Anon", "File", "Shmem")},
            "threads": int(fields.get("Threads", -1))}


def rss_by_mapping_kb(pid: int) -> dict[str, int]:
    """Resident KB per kind of mapping (/proc/PID/smaps): the brk heap, anonymous mappings (malloc's
    other arenas and large blocks, Python's object arenas, thread stacks) and each mapped file by
    name. Diffed between two rounds it says where memory that grows lives."""
    out: dict[str, int] = {}
    kind = "anonymous"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):  # a mapping's first line
            kind = Path(head[5]).name if len(head) > 5 and head[5].startswith("/") else (
                head[5] if len(head) > 5 else "anonymous")
        elif head[0] == "Rss:":
            out[kind] = out.get(kind, 0) + int(head[1])
    return out


def growth_kb(before: dict[str, int], after: dict[str, int], top: int = 8) -> dict[str, int]:
    """The mappings whose resident size changed most between two `rss_by_mapping_kb` readings."""
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    return dict(sorted(((k, v) for k, v in diff.items() if v), key=lambda kv: -abs(kv[1]))[:top])


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


def start_server(data: str, runs: str | None = None, options=(), env: dict | None = None) -> subprocess.Popen:
    """`cadenza serve` (with `options`) as a user starts it, in its own process on a free port of
    127.0.0.1, once it answers: the process, with its address (`.base`), its log and how long it took
    to answer (`.start_seconds`). `env`: its environment (default: this one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "cadenza", "serve", "--port", str(port), "--data", data, *options]
    if runs:
        cmd += ["--runs", runs]
    # The server's log goes to a file in its data folder: a pipe nobody reads while it runs would
    # block the server once its buffer filled (a build's warnings, a stack of failed jobs).
    log = open(Path(data) / "server.log", "w+")
    proc = subprocess.Popen(cmd, stderr=log, text=True, env=env)
    proc.log, proc.base = log, f"http://127.0.0.1:{port}"
    t0 = time.time()
    while True:
        try:
            if httpx.get(f"{proc.base}/api/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() - t0 > 120:
            log.seek(0)
            raise RuntimeError(f"the server did not start: {log.read()[-500:]}")
        time.sleep(0.1)
    proc.start_seconds = time.time() - t0
    return proc


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


def crowd(base: str, model: str, styles: list[str], seconds: float, clients: int, rounds: int, pid: int) -> dict:
    results: list[list[dict]] = [[] for _ in range(rounds)]
    readings = [memory_reading(pid)]  # before, and after each round
    maps: list[dict[str, int]] = []  # after the first round, and after the last

    def measure() -> None:
        readings.append(memory_reading(pid))
        if len(readings) == 2 or len(readings) == rounds + 1:
            maps.append(rss_by_mapping_kb(pid))

    barrier = threading.Barrier(clients, action=measure)

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
    memory, parts = [m["rss"] for m in readings], [m["parts"] for m in readings]
    flat = [x for r in results for x in r]
    lat = sorted(x["latency"] for x in flat)
    firsts = sorted(x["first_note"] for x in flat if x["first_note"] is not None)
    return {"jobs": len(flat), "errors": sum(x["error"] is not None for x in flat),
            "error_messages": sorted({x["error"] for x in flat if x["error"]})[:5], "wall_seconds": wall,
            "jobs_per_s": len(flat) / wall, "latency_p50": lat[len(lat) // 2],
            "latency_p95": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
            "first_note_p50": firsts[len(firsts) // 2] if firsts else None,
            "first_note_p95": firsts[min(len(firsts) - 1, int(0.95 * len(firsts)))] if firsts else None,
            "music_seconds": sum(x["seconds"] for x in flat), "rss_mb_before_and_after_each_round": memory,
            "threads_before_and_after_each_round": [m["threads"] for m in readings],
            "rss_parts_mb_before_and_after_each_round": parts,
            "anon_growth_after_first_round_mb": parts[-1]["Anon"] - parts[1]["Anon"],
            "file_growth_after_first_round_mb": parts[-1]["File"] - parts[1]["File"],
            "growth_after_first_round_by_mapping_kb": growth_kb(maps[0], maps[-1]),
            "rss_growth_after_first_round_mb": memory[-1] - memory[1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="styles", help="a model id the server offers (default: the shipped one)")
    ap.add_argument("--runs", help="--runs for the server (to benchmark a model of yours)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--solo", type=int, default=6, help="batch-1 generations for the real-time factor")
    ap.add_argument("--out", help="write the result JSON here")
    a = ap.parse_args(argv)
    from cadenza.env.record import cpu_info, git_commit, library_versions
    from cadenza.models.zoo import DEFAULT

    load_before = os.getloadavg()[0]  # other work on the machine slows every figure but memory
    with tempfile.TemporaryDirectory(prefix="cadenza-bench-serve-") as data:
        server = start_server(data, a.runs)
        base = server.base
        try:
            compiled_step, warm_wait = wait_for_compiled_step(base)
            if compiled_step != "ready":
                print(f"warning: the server's compiled decode step is {compiled_step!r}: the figures are of "
                      "eager decoding", file=sys.stderr)
            if a.model != DEFAULT:
                print(f"warning: the server warms up only its default model; {a.model} may decode eagerly "
                      "while its compiled step is built during the run", file=sys.stderr)
            styles = next(m["styles"] for m in httpx.get(f"{base}/api/models").json() if m["id"] == a.model)
            one = solo(base, a.model, styles, a.seconds, a.solo)
            many = crowd(base, a.model, styles, a.seconds, a.clients, a.rounds, server.pid)
            allocator_env = process_environment(server.pid, ALLOCATOR_ENV)
        finally:
            server.terminate()
            server.wait(timeout=30)
            server.log.close()
    result = {"model": a.model, "clients": a.clients, "rounds": a.rounds, "seconds_per_job": a.seconds,
              "server_start_seconds": server.start_seconds, "compiled_step": compiled_step,
              "waited_for_compiled_step_seconds": warm_wait, "solo": one, "crowd": many,
              "load_average_at_start": load_before, "cpu": cpu_info(),
              "torch_threads_per_job": max(1, (os.cpu_count() or 1) // 2),
              "code_commit": git_commit(), "versions": library_versions(("cadenza", "torch", "fastapi", "uvicorn")),
              "command": shlex.join(["python", "benchmarks/bench_serve.py", *(argv or sys.argv[1:])]),
              # each changes how the server's memory grows: its own, after it restarted with its settings
              "allocator_environment": allocator_env}
    print(f"server start {server.start_seconds:.1f} s; compiled step {compiled_step} {warm_wait:.0f} s later")
    print(f"batch 1: {one['realtime_factor_median']:.1f}x real time, "
          f"first note {one['first_note_median'] * 1000:.0f} ms")
    print(f"{many['jobs']} jobs from {a.clients} clients: p50 {many['latency_p50']:.2f} s, p95 "
          f"{many['latency_p95']:.2f} s, {many['jobs_per_s']:.2f} jobs/s, {many['errors']} errors, first note p50 "
          f"{(many['first_note_p50'] or 0) * 1000:.0f} ms; "
          f"RSS MB {[round(m, 1) for m in many['rss_mb_before_and_after_each_round']]} "
          f"({many['rss_growth_after_first_round_mb']:+.2f} MB after the first round); "
          f"threads {many['threads_before_and_after_each_round']}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
