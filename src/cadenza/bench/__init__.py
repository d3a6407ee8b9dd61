"""Reproductions of published benchmarks (issue 5); see docs/benchmarks-polyphonic.md.

* `cadenza.bench.polyphonic`: the piano-roll benchmarks of Boulanger-Lewandowski et al. (2012):
  JSB Chorales, Nottingham, MuseData, Piano-midi.de; frame-level NLL on the official test split.
* `cadenza.bench.jsb16`: JSB Chorales at 16th-note resolution, voices serialised S, A, T, B
  (Coconet / Music Transformer); NLL per token.

Each module loads the public data file, writes a token store with the official splits, and turns
the per-token NLLs an evaluator computes into the benchmark's number. The submodules are not
imported here so that importing `cadenza.bench` stays cheap (scipy is only needed for .mat files).
"""
