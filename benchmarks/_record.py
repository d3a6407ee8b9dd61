"""What every benchmark result file carries besides its numbers: the machine, the code, the command."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def environment() -> dict:
    import torch

    from cadenza.env.record import cpu_info, git_commit, library_versions

    return {"cpu": cpu_info(), "torch_threads": torch.get_num_threads(), "code_commit": git_commit(),
            "versions": library_versions(("cadenza", "torch", "numpy", "symusic", "miditok", "transformers"))}


def write_result(path: str | None, payload: dict) -> None:
    """Print where the result goes and write it (with the environment and the command) as JSON."""
    if not path:
        return
    out = {**payload, **environment(), "command": shlex.join(["python", *sys.argv])}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nresult: {path}")
