"""`make demo` / `cadenza demo`: the whole pipeline on the built-in Bach chorales, offline.

prepare the corpus -> train the tiny preset for a few minutes -> generate four chorales (two
free, two continuing the opening of held-out chorales) -> render WAV and piano rolls -> evaluate
-> print a short table with the paths of everything written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _say(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


def run_demo(out: Path, minutes: float = 4.0, seconds: float = 24.0, seed: int = 0) -> int:
    from cadenza.data.prepare import prepare
    from cadenza.data.store import StoreError, TokenStore
    from cadenza.evaluation.memorisation import RunFinder
    from cadenza.evaluation.metrics import compare_sets
    from cadenza.evaluation.report import reference_notes
    from cadenza.generation.generate import generate
    from cadenza.listen.render import render_file
    from cadenza.training.config import resolve
    from cadenza.training.trainer import train

    t0 = time.time()
    out = Path(out)
    data, run, samples = out / "data", out / "run", out / "samples"

    _say("1/5 prepare: the Bach chorales from music21's bundled corpus (no download)")
    try:
        store = TokenStore(data)
        print(f"using the existing store in {data}")
    except StoreError:
        res = prepare(out=data, corpus="bach")
        store = res.store
        print(res.summary())

    _say(f"2/5 train: the tiny Music Transformer for {minutes:g} minutes")
    import shutil

    shutil.rmtree(run, ignore_errors=True)  # a demo always starts from scratch
    cfg = resolve("tiny", None, [f"seed={seed}"], max_minutes=minutes)
    result = train(cfg, data, run, command=f"cadenza demo --out {out} --minutes {minutes:g}")

    _say("3/5 generate: 2 free chorales and 2 continuations of held-out chorale openings")
    # Chorale-shaped decoding: at most 5 voices, no note held past 4 s (a fermata is ~2 s).
    shape = {"max_polyphony": 5, "max_note_seconds": 4.0, "stop_at_eos": False, "top_p": 0.95}
    free = generate(run, num_samples=2, seconds=seconds, seed=seed, out=samples / "free", **shape)
    held_out = [p.source for p in store.split("test")][:2]
    cont = []
    for i, src in enumerate(held_out):
        cont.append(generate(run, primer=src, primer_seconds=8.0, num_samples=1, seconds=seconds,
                             seed=seed + 1 + i, out=samples / f"continued-{i}", **shape))

    _say("4/5 render: WAV and piano rolls")
    midi = free.paths + [p for g in cont for p in g.paths]
    rendered = [render_file(p, wav=True, png=True) for p in midi]

    _say("5/5 evaluate")
    from cadenza.data.midi import read_notes

    gen_notes = [read_notes(p)[0] for p in midi]
    metrics = compare_sets(gen_notes, reference_notes(store, "train"),
                           names=["pitch_range", "n_pitch_classes_used", "scale_consistency", "polyphony",
                                  "note_density", "mean_note_duration", "pitch_class_entropy"])
    finder = RunFinder([store[p.index] for p in store.split("train")])
    longest = max(finder.longest_common_run(store.tokenizer.encode(p).ids).length for p in free.paths)

    print(f"\nvalid NLL {result.valid_loss:.3f} nats/token vs unigram baseline {result.unigram_nll:.3f} "
          f"({result.step} steps, best {result.best_valid_loss:.3f})")
    print(f"\n| {'metric':<22} | {'samples':>9} | {'Bach':>9} | {'overlap':>7} |")
    print(f"|{'-' * 24}|{'-' * 11}|{'-' * 11}|{'-' * 9}|")
    for name, m in metrics.items():
        print(f"| {name:<22} | {m['generated_mean']:>9.3f} | {m['reference_mean']:>9.3f} | {m['overlap']:>7.2f} |")
    print(f"\nlongest token run a free sample copies from a training chorale: {longest} tokens")
    print("\nwrote:")
    print(f"  token store   {data}")
    print(f"  run           {run}  (tensorboard --logdir {run / 'tb'})")
    for files in rendered:
        print("  " + "  ".join(str(p) for p in files.values()))
    print(f"\ndemo finished in {(time.time() - t0) / 60:.1f} minutes")
    return 0 if result.valid_loss is not None and result.valid_loss < result.unigram_nll else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo(Path("runs/demo")))
