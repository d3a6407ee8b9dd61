"""cadenza: from a folder of MIDI files to a trained music model and new music."""

__version__ = "0.1.0"

__all__ = ["__version__", "generate", "prepare", "train"]


def __getattr__(name):
    # The public API, imported lazily so `import cadenza` stays fast (no torch until needed).
    if name == "generate":
        from cadenza.generate import generate

        return generate
    if name == "prepare":
        from cadenza.prepare import prepare

        return prepare
    if name == "train":
        from cadenza.train import train

        return train
    raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
