"""cadenza: from a folder of MIDI files to a trained music model and new music.

The public API is one function per command-line verb::

    cadenza.prepare(corpus="bach", out="data/bach")          # cadenza prepare
    cadenza.train(cfg, "data/bach", "runs/bach")              # cadenza train
    cadenza.generate("runs/bach", seconds=30, num_samples=4)  # cadenza generate
    cadenza.infill("song.mid", 8, 16, num_samples=4)          # cadenza generate --infill 8:16
    cadenza.accompany("tune.mid", style="bach")               # cadenza generate --accompany
    cadenza.generate(prompt=cadenza.Infill(notes, 8, 16))     # the same from notes in memory
    cadenza.render("sample.mid")                              # cadenza render
    cadenza.evaluate("runs/bach", "data/bach")                # cadenza evaluate
    cadenza.benchmark("polyphonic", "JSB_Chorales.mat", "runs/jsb")  # cadenza bench
    cadenza.doctor()                                          # cadenza doctor
    cadenza.run_demo("runs/demo")                             # cadenza demo
    cadenza.list_corpora()                                    # cadenza corpora
    cadenza.list_models()                                     # cadenza models
    cadenza.serve()                                           # cadenza serve
    cadenza.duet("1", "2", style="irish")                     # cadenza duet --in 1 --out 2
"""

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first use so `import cadenza` (and the
# CLI) starts fast
_LAZY = {name: module for module, names in (
    ("cadenza.data.prepare", "prepare"), ("cadenza.data.corpora", "list_corpora"),
    ("cadenza.training.trainer", "train"), ("cadenza.generation.generate", "generate infill accompany"),
    ("cadenza.generation.config", "SamplingConfig"), ("cadenza.generation.prompt", "Continue Infill Accompany"),
    ("cadenza.models.checkpoint", "load"), ("cadenza.listen.render", "render"),
    ("cadenza.evaluation.report", "evaluate"), ("cadenza.bench.run", "benchmark"),
    ("cadenza.demo", "run_demo"), ("cadenza.models.zoo", "list_models"),
    ("cadenza.studio.server", "serve"), ("cadenza.live.engine", "duet"),
) for name in names.split()}

__all__ = ["__version__", "doctor", *_LAZY]


def doctor(device: str = "auto", precision: str | None = None, smoke: bool = True, probes=None) -> dict:
    """`cadenza doctor`: the environment, what would break training on `device` at `precision`, and
    each stage's own look (`doctor_probes`); see `cadenza.env.doctor.doctor`."""
    from cadenza.env.doctor import doctor as examine  # lazy: `import cadenza` stays fast

    return examine(device, precision, smoke=smoke, probes=probes, stages=doctor_probes())


def doctor_probes() -> tuple:
    """The looks the stages above env/ add to `cadenza doctor`, handed to it from here: env/ imports
    no stage above it."""
    try:
        from cadenza.generation.compiled import DOCTOR_PROBE  # lazy: it imports torch
    except ImportError:  # no torch: doctor still runs, to say so
        return ()
    return (DOCTOR_PROBE,)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
