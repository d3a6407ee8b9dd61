"""cadenza: from a folder of MIDI files to a trained music model and new music.

The public API is one function per command-line verb::

    cadenza.prepare(corpus="bach", out="data/bach")          # cadenza prepare
    cadenza.train(cfg, "data/bach", "runs/bach")              # cadenza train
    cadenza.generate("runs/bach", seconds=30, num_samples=4)  # cadenza generate
    cadenza.render("sample.mid")                              # cadenza render
    cadenza.evaluate("runs/bach", "data/bach")                # cadenza evaluate
    cadenza.benchmark("polyphonic", "JSB_Chorales.mat", "runs/jsb")  # cadenza bench
    cadenza.doctor()                                          # cadenza doctor
    cadenza.run_demo("runs/demo")                             # cadenza demo
    cadenza.list_corpora()                                    # cadenza corpora
"""

__version__ = "0.1.0"

# name -> (module, attribute); imported on first use so `import cadenza` (and the CLI) starts fast.
_LAZY = {
    "prepare": ("cadenza.data.prepare", "prepare"),
    "list_corpora": ("cadenza.data.corpora", "list_corpora"),
    "train": ("cadenza.training.trainer", "train"),
    "RunConfig": ("cadenza.training.config", "RunConfig"),
    "resolve_config": ("cadenza.training.config", "resolve"),
    "generate": ("cadenza.generation.generate", "generate"),
    "SamplingConfig": ("cadenza.generation.config", "SamplingConfig"),
    "render": ("cadenza.listen.render", "render"),
    "evaluate": ("cadenza.evaluation.report", "evaluate"),
    "benchmark": ("cadenza.bench.run", "benchmark"),
    "doctor": ("cadenza.env.doctor", "doctor"),
    "run_demo": ("cadenza.demo", "run_demo"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
