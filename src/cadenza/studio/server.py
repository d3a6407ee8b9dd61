"""`cadenza.serve`: run the studio with uvicorn, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def default_data() -> Path:
    """Where the studio keeps uploads and the history of generations: $CADENZA_CACHE/studio."""
    from cadenza.env.record import cache_dir

    return cache_dir() / "studio"


def serve(host: str = "127.0.0.1", port: int = 8000, runs: str | os.PathLike | None = None,
          data: str | os.PathLike | None = None, device: str = "auto", max_running: int = 2,
          compile: bool = True) -> None:
    """Serve the page and the API until interrupted. Binds 127.0.0.1 by default: anything else
    exposes the studio (and its CPU) to the network, so it is said out loud. The default model is
    warmed up in the background after start: a window slide fed through it and, with `compile`, its
    compiled decode step built (or loaded from the disk cache)."""
    from cadenza.env.allocator import fill_numpy_cache, freeze_long_lived, settle_allocator

    settle_allocator()  # before torch loads and worker threads start: memory stays flat for hours
    import torch
    import uvicorn

    from cadenza.env.device import pick_device
    from cadenza.studio.app import Limits, create_app

    if host not in LOOPBACK:
        print(f"warning: serving on {host}, not 127.0.0.1: anyone who can reach this machine can use the "
              "studio; there is no login", file=sys.stderr)
    dev = pick_device(device)
    if dev.type == "cpu":  # jobs run side by side: each gets its share of the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max_running))
    folder = Path(data) if data else default_data()
    app = create_app(folder, Path(runs) if runs else None, Limits(max_running=max_running), device=str(dev))
    from cadenza.models.zoo import DEFAULT
    from cadenza.studio.runner import warm_up

    fill_numpy_cache()
    freeze_long_lived()  # what is loaded now lives as long as the server: no collection walks it again
    if compile:
        app.state.warm["compiled_step"] = "building"  # before the thread runs: a client polling now must wait
    threading.Thread(target=warm_up, args=(app.state.registry, DEFAULT),
                     kwargs={"status": app.state.warm, "compile": compile}, name="warm-up", daemon=True).start()
    print(f"cadenza studio on http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/  "
          f"(API docs at /docs; data in {folder}; Ctrl-C to stop)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
