"""cadenza: from a folder of MIDI files to a trained music model and new music."""

__version__ = "0.1.0"

__all__ = ["__version__", "generate", "prepare", "train"]

# The public API, imported on first use so `import cadenza` (and the CLI's start) stays fast.
_LAZY = {"generate": "cadenza.generation", "prepare": "cadenza.ingest", "train": "cadenza.trainer"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        fn = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
