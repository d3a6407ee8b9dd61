"""Playing with a model in real time: MIDI ports, a scheduler on a monotonic clock, the duet engine."""
