"""`make demo` / `cadenza demo`: the whole pipeline on the built-in Bach chorales, offline."""

from __future__ import annotations

import time
from pathlib import Path


def run_demo(out: Path, minutes: float = 4.0) -> int:
    from cadenza.corpus import materialize
    from cadenza.prepare import prepare

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    print("== 1/1 prepare the Bach chorales (music21's bundled corpus, no download)")
    cf = materialize("bach")
    res = prepare([cf.folder], out / "data", pre_skipped=cf.failures, extra_manifest={"corpus": "bach"})
    print(res.summary())
    print(f"\ndone in {time.time() - t0:.0f} s; the store is in {out / 'data'}")
    return 0
