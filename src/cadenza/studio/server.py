"""`cadenza serve`: run the studio with uvicorn, on 127.0.0.1 unless told otherwise; and `launch`,
the same command in a process of its own, for tests, benchmarks and tools."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cadenza.env.record import cache_dir
from cadenza.studio import memory
from cadenza.studio.guard import LOOPBACK


def default_data() -> Path:
    """Where the studio keeps uploads and the history of generations: $CADENZA_CACHE/studio."""
    return cache_dir() / "studio"


def serve(host: str = "127.0.0.1", port: int = 8000, runs: str | os.PathLike | None = None,
          data: str | os.PathLike | None = None, device: str = "auto", max_running: int = 2,
          compile: bool = True, origins: list[str] | tuple[str, ...] = ()) -> None:
    """Serve the page and the API until interrupted. Binds 127.0.0.1 by default: anything else
    exposes the studio (and its CPU) to the network, so it is said out loud. The default model is
    warmed up in the background after start: a window slide fed through it and, with `compile`, its
    compiled decode step built (or loaded from the disk cache). Requests must name this machine or
    `host` in their Host header, and writes from a browser page come from the studio's own page or
    one of `origins` (`studio.guard`)."""
    memory.settle_malloc()  # before worker threads start and torch allocates its first buffers
    import torch
    import uvicorn

    from cadenza.env.device import enable_tf32, pick_device  # lazy: torch, FastAPI and the models load only to serve;
    from cadenza.studio.app import Limits, create_app  # lazy: `launch` (tests, benchmarks) needs none of them

    if host not in LOOPBACK:
        print(f"warning: serving on {host}, not 127.0.0.1: anyone who can reach this machine can use the "
              "studio; there is no login", file=sys.stderr)
    dev = pick_device(device)
    enable_tf32(dev)  # for the whole process, as `cadenza generate` decodes: TF32 on Ampere+ GPUs
    if dev.type == "cpu":  # jobs run side by side: each gets its share of the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max_running))
    folder = Path(data) if data else default_data()
    app = create_app(folder, Path(runs) if runs else None, Limits(max_running=max_running), device=str(dev),
                     hosts=(host,), origins=origins)
    memory.freeze_startup_objects()  # what is loaded now lives as long as the server
    scratch = _own_temp(folder)
    if compile:
        app.state.warm["compiled_step"] = "building"  # before the thread runs: a client polling now must wait
    threading.Thread(target=_warm_up, args=(app, compile), name="warm-up", daemon=True).start()
    print(f"cadenza studio on http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/  "
          f"(API docs at /docs; data in {folder}; Ctrl-C to stop)", file=sys.stderr, flush=True)
    # SIGTERM or Ctrl-C: open event streams get 3 s to end before they are closed, then the jobs stop.
    # uvicorn then raises the signal again for the handler it found: this one, so the cleanup runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _own_temp(folder: Path) -> Path:
    """This server's temporary folder, inside its data folder (which every start sweeps): the
    process's $TMPDIR from now on, so what libraries unpack there (torch unpacks a compiled decode
    step's package on every load, 40 MB) never litters the system's temporary folder."""
    scratch = folder / ".tmp" / f"process-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = None  # Python's tempfile reads $TMPDIR again
    return scratch


def _warm_up(app, compile: bool) -> None:
    """`runner.warm_up` of the default model, then what it loaded (the model, its compiled step, the
    audio renderer's modules) frozen too: the collection after each job then walks only what jobs made."""
    from cadenza.models.zoo import DEFAULT  # lazy: as in `serve`, torch loads only to serve
    from cadenza.studio.runner import warm_up  # lazy: as in `serve`, torch loads only to serve

    warm_up(app.state.registry, DEFAULT, status=app.state.warm, compile=compile)
    memory.freeze_startup_objects()


@dataclass
class Launched:
    """A `cadenza serve` started by `launch`: its process, its address and how long it took to answer."""
    process: subprocess.Popen
    url: str
    start_seconds: float


@contextlib.contextmanager
def launch(data: str | os.PathLike, *options: str, env: dict | None = None,
           timeout: float = 120.0) -> Iterator[Launched]:
    """`cadenza serve OPTIONS` as a user starts it, in its own process (environment `env`, default
    this one's) on a free port of 127.0.0.1 with the data folder `data`, once /api/health answers
    (within `timeout` seconds, else RuntimeError with the end of its log); stopped on leaving. Its
    log is `data`/server.log: a pipe nobody reads would block the server once full."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Path(data).mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "cadenza", "serve", "--port", str(port), "--data", str(data), *options]
    with open(Path(data) / "server.log", "w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            started = _answered(proc, f"http://127.0.0.1:{port}", timeout)
            if started is None:
                log.seek(0)
                why = f"exited ({proc.returncode})" if proc.poll() is not None else f"did not answer in {timeout:g} s"
                raise RuntimeError(f"cadenza serve {why}: {log.read()[-800:]}")
            yield Launched(proc, f"http://127.0.0.1:{port}", started)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answered(proc: subprocess.Popen, url: str, timeout: float) -> float | None:
    """Seconds until `url`/api/health answered; None if the process ended or `timeout` passed first."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < timeout:
        try:
            with direct.open(f"{url}/api/health", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:  # not listening yet (URLError is an OSError)
            pass
        time.sleep(0.1)
    return None
