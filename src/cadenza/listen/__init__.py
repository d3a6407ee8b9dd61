"""Hear and see music: WAV audio, piano-roll pictures and engraved scores of MIDI or notes."""
