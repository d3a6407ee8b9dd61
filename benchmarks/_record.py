"""What every benchmark result file carries besides its numbers: the machine, the code, the command."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def environment() -> dict:
    import torch

    from cadenza.env.record import cpu_info, git_commit, library_versions

    return {"cpu": cpu_info(), "torch_threads": torch.get_num_threads(), "code_commit": git_commit(),
            "versions": library_versions(("cadenza", "torch", "numpy", "symusic", "miditok", "transformers"))}


def portable(arg: str) -> str:
    """An absolute path written relative to the repository: results are read on other machines,
    and the docs never name this one's folders."""
    if arg.startswith("/") and Path(arg).parent.exists():
        return os.path.relpath(arg, ROOT)
    return arg


def write_result(path: str | None, payload: dict) -> None:
    """Print where the result goes and write it (with the environment and the command) as JSON."""
    if not path:
        return
    argv = ["python", f"benchmarks/{Path(sys.argv[0]).name}", *map(portable, sys.argv[1:])]
    payload = {k: portable(v) if isinstance(v, str) else v for k, v in payload.items()}
    out = {**payload, **environment(), "command": shlex.join(argv)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"\nresult: {path}")
