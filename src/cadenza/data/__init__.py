"""MIDI files and corpora -> normalised notes -> token ids -> a memory-mapped token store -> windows."""
