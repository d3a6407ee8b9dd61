"""`cadenza doctor`: the environment, what would break training, and how to fix it."""

from __future__ import annotations

import argparse
import json

from cadenza.cli.common import add_verb
from cadenza.env import PRECISIONS


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "doctor", "check Python, torch, CUDA, driver, GPUs and container; say how to fix",
                 "Report the environment and diagnose what would break training on the requested device. Exit code "
                 "1 when something blocks it.")
    s.add_argument("--json", action="store_true", help="print one JSON object (report + diagnoses)")
    s.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto",
                   help="device training will use (auto: cuda when an NVIDIA GPU is present)")
    s.add_argument("--precision", choices=PRECISIONS[1:], default=None,
                   help="precision training will use (checks bf16 support)")
    s.add_argument("--no-smoke", action="store_true", help="skip the GPU smoke test")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace, probes=None) -> int:
    # lazy: `cadenza --help` does not pay for the doctor's imports
    import cadenza
    from cadenza.env.doctor import Diagnosis, format_report

    result = cadenza.doctor(a.device, a.precision, smoke=not a.no_smoke, probes=probes)
    if a.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        found = [Diagnosis(**d) for d in result["diagnoses"]]
        print(format_report(result["report"], found, a.device, a.precision, stages=cadenza.doctor_probes()))
    return result["exit_code"]
