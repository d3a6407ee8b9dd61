"""cadenza: from a folder of MIDI files to a trained music model and new music."""

__version__ = "0.1.0"

__all__ = ["__version__"]
