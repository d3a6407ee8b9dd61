"""`cadenza.generate(...)`: new pieces, continuations, infills and accompaniments from any checkpoint.

The checkpoint carries its model and tokenizer configs, so nothing about the architecture is
passed here. What to start from is the `prompt`, a task of `cadenza.generation.prompt` (a new
piece by default); how to sample is a `SamplingConfig`, given as one object, a dict, or
keywords. Sampling is batched with the KV cache (or the LSTM's carried state), the grammar masks
impossible events by default, and the same seed gives the same MIDI bit for bit on the same
machine. With `out`, one .mid per sample is written plus ``generation.json`` (the settings, the
checkpoint, and per-sample tokens, notes, seconds and decoder repairs).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from cadenza.atomic import write_json
from cadenza.data.midi import Notes, write_midi
from cadenza.env.device import enable_tf32, pick_device
from cadenza.generation import compiled
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Accompany, Continue, Infill, Prompt, Task, describe
from cadenza.generation.sampler import generate_ids, sample_seeds
from cadenza.listen.pianoroll import piano_roll
from cadenza.listen.render import render_file
from cadenza.models import checkpoint as ckpt
from cadenza.models.checkpoint import Checkpoint
from cadenza.models.zoo import DEFAULT


@dataclass
class Generation:
    scores: list  # symusic Scores (ticks)
    ids: list[list[int]]  # generated ids per sample (primer excluded)
    stats: list[dict[str, Any]]
    config: SamplingConfig
    prompt: Prompt
    notes: list[Notes]  # each sample's notes in seconds, primer (or given notes) included
    paths: list[Path] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)  # checkpoint, device, speed

    @property
    def tokens_per_s(self) -> float:
        return self.run.get("tokens_per_s", float("nan"))

    @cached_property
    def given(self) -> list[np.ndarray]:
        """Per sample, which of its `notes` were given (the primer's, or the notes an infill or an
        accompaniment kept): what a piano roll colours apart."""
        return [self.prompt.given_of(n) for n in self.notes]


def sampling_config(config: SamplingConfig | dict | None = None, **settings: Any) -> SamplingConfig:
    """A validated `SamplingConfig` from an object, a dict (e.g. JSON) and/or keyword settings."""
    if isinstance(config, SamplingConfig):
        base = config.to_dict()
    else:
        base = dict(config or {})
    return SamplingConfig.from_dict({**base, **settings})


def generate(checkpoint: str | os.PathLike | Checkpoint | None = None, config: SamplingConfig | dict | None = None,
             *, prompt: Task | None = None, out: str | os.PathLike | None = None, device: str = "auto",
             render: bool = False, progress: bool = False, **settings: Any) -> Generation:
    """Sample `config.num_samples` pieces from `checkpoint` (a run folder, a checkpoint folder, a
    shipped model's name, or a loaded `Checkpoint`; default: the shipped style model), starting
    from `prompt` (`Continue`, `Infill` or `Accompany` of notes in memory; default: a new piece).

    ``generate(style="irish", seconds=30)``, ``generate("runs/bach", seconds=30, top_p=0.95,
    num_samples=4, out="samples")``: keywords are `SamplingConfig` fields and override `config`.
    Returns symusic scores, ids, notes and statistics.
    """
    cfg = sampling_config(config, **settings)
    result = sample(open_checkpoint(checkpoint, cfg, device), cfg, prompt, progress=progress)
    if out is not None:
        _write(result, Path(out), render)
    return result


def open_checkpoint(checkpoint: str | os.PathLike | Checkpoint | None, cfg: SamplingConfig,
                    device: str = "auto") -> Checkpoint:
    """The checkpoint to sample `cfg` from, loaded on its decoding device (a `Checkpoint` as it is)."""
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    dev = decode_device(pick_device(device), cfg, device == "auto")
    enable_tf32(dev)  # fp32 matmuls on Ampere and later GPUs
    return ckpt.load(checkpoint if checkpoint is not None else DEFAULT, dev)


def read_notes_for(checkpoint: str | os.PathLike | Checkpoint | None,
                   source: str | os.PathLike | bytes | Notes) -> Notes:
    """A MIDI file (a path or its bytes) as the checkpoint's tokenizer reads it (the sustain pedal,
    instruments), for a prompt; `Notes` as they are."""
    if isinstance(source, Notes):
        return source
    tok = checkpoint.tokenizer if isinstance(checkpoint, Checkpoint) else ckpt.load_tokenizer(
        checkpoint if checkpoint is not None else DEFAULT)
    return tok.read(source)[0]


def infill(midi: str | os.PathLike | Notes, start: float, end: float, checkpoint: str | os.PathLike | None = None,
           **settings: Any) -> Generation:
    """Rewrite the notes of `midi` (a MIDI file, or `Notes`) that start in [start, end) seconds;
    every other note comes back exactly. `generate` with ``prompt=Infill(...)``: the keywords are
    the same (style, guidance, temperature, seed, num_samples for variations, out, ...)."""
    device, cfg = settings.pop("device", "auto"), sampling_config(**_sampling(settings))
    loaded = open_checkpoint(checkpoint, cfg, device)  # read once: its tokenizer reads the file
    task = Infill(read_notes_for(loaded, midi), start, end, source=_source(midi))
    return generate(loaded, cfg, prompt=task, **settings)


def accompany(melody: str | os.PathLike | Notes, checkpoint: str | os.PathLike | None = None,
              **settings: Any) -> Generation:
    """Write voices under the melody of `melody` (a MIDI file, or `Notes`: its lead instrument where
    the instruments differ, else its top line), which comes back note for note. `generate` with
    ``prompt=Accompany(...)``: the keywords are the same."""
    device, cfg = settings.pop("device", "auto"), sampling_config(**_sampling(settings))
    loaded = open_checkpoint(checkpoint, cfg, device)  # read once: its tokenizer reads the file
    return generate(loaded, cfg, prompt=Accompany(read_notes_for(loaded, melody), source=_source(melody)), **settings)


def _sampling(settings: dict[str, Any]) -> dict[str, Any]:
    """Take the SamplingConfig fields out of `settings` (what is left is `generate`'s own: out, ...)."""
    names = {f.name for f in fields(SamplingConfig)}
    return {k: settings.pop(k) for k in list(settings) if k in names}


def _source(midi) -> str | None:
    return None if isinstance(midi, Notes) else str(midi)


# Batch sizes at which the CPU's compiled decode step outdecodes eager decoding on a GPU: what
# benchmarks/gpu_check.py measures ("generate.faster": the faster device per batch size). Empty until
# a GPU has run the check, so a CUDA machine decodes on its GPU.
CPU_DECODES_FASTER: frozenset[int] = frozenset()


def decode_device(device: torch.device, cfg: SamplingConfig, chosen: bool) -> torch.device:
    """Where to decode: the device asked for, or the CPU when the device was chosen automatically, is
    a GPU, and the GPU check measured the CPU's compiled step faster at this batch size."""
    if chosen and device.type == "cuda" and cfg.compile and min(cfg.batch_size, cfg.num_samples) in CPU_DECODES_FASTER:
        return torch.device("cpu")
    return device


def sample(checkpoint: Checkpoint, cfg: SamplingConfig, prompt: Task | Prompt | None = None, *,
           progress: bool = False, on_tokens: Callable[[int, torch.Tensor], None] | None = None,
           build_compiled: bool = True) -> Generation:
    """`generate` with a checkpoint already loaded (``checkpoint.load``): what a server calls.

    `prompt`: a task, or the `Prompt.encode` of one a caller already made (a server streaming notes
    needs its tokenizer and primer before the samples exist). `on_tokens(first_sample, tokens)` is
    called after every step with the new tokens so far of the samples `first_sample`, ... (a
    (B, steps) view): the studio streams notes from it, and cancels a job by raising in it. With
    `build_compiled=False` a compiled decode step is used only when it is already built (a server
    does not make a job wait for a compiler).
    """
    tok, meta = checkpoint.tokenizer, checkpoint.meta
    if cfg.seconds is not None and not tok.has_clock:
        raise ValueError(f"--seconds needs a tokenizer with a clock, and {tok.name} has none; use --max-tokens")
    if not isinstance(prompt, Prompt):
        prompt = Prompt.encode(tok, prompt if prompt is not None else Continue(), cfg.style, cfg)
    dev = checkpoint.device
    t0 = time.time()
    limit, cap, programs = note_limit(cfg, checkpoint), polyphony_limit(cfg, meta), program_limit(cfg, meta)
    # the checkpoint's limits in place of the defaults, as the decoding loop applies them
    limited = prompt.decoding(replace(cfg, max_note_seconds=limit, max_polyphony=cap, programs=programs))
    all_ids, compiled, setup = _sample(checkpoint.model, prompt, limited, dev, progress, on_tokens, build_compiled)
    elapsed = time.time() - t0
    scores, notes, stats = [], [], []
    for ids in all_ids:
        score, sample_notes, report = prompt.decode(ids)
        scores.append(score)
        notes.append(sample_notes)
        stats.append({"tokens": len(ids), "primer_tokens": len(prompt.primer), "notes": score.note_num(),
                      "seconds": tok.seconds(prompt.primer + ids), "repairs": report.as_dict()})
    run = {"checkpoint": checkpoint.path, "step": checkpoint.step, "data_fingerprint": meta.get("data_fingerprint"),
           "device": str(dev), "max_note_seconds": limit, "max_polyphony": cap, "programs": programs,
           "generation_seconds": elapsed, "compiled": compiled, "compile_seconds": setup,
           # decoding speed: a first run's build of the compiled step is not decoding
           "tokens_per_s": sum(len(i) for i in all_ids) / max(elapsed - setup, 1e-9)}
    return Generation(scores, all_ids, stats, cfg, prompt, notes, run=run)


def _sample(model, prompt: Prompt, cfg: SamplingConfig, dev, progress: bool, on_tokens=None,
            build_compiled: bool = True) -> tuple[list[list[int]], bool, float]:
    """All samples, `batch_size` at a time; sample i draws from its own stream, seeded by
    (`seed`, i), so it is the same whatever the batch size or number of samples. Also returns
    whether every batch decoded with the compiled step, and the seconds spent getting it (a build
    on the first run, a load from the disk cache after)."""
    out: list[list[int]] = []
    compiled, setup = True, 0.0
    budget = cfg.token_budget()
    batches = list(range(0, cfg.num_samples, cfg.batch_size))
    for k, start in enumerate(batches):
        b = min(cfg.batch_size, cfg.num_samples - start)
        p = torch.tensor([prompt.ids] * b, dtype=torch.long, device=dev)
        t = time.time()
        decoder = _compiled_decoder(model, cfg, b * (2 if cfg.guidance != 1.0 else 1), build_compiled)
        setup += time.time() - t
        compiled = compiled and decoder is not None
        desc = f"generate {k + 1}/{len(batches)}" if len(batches) > 1 else "generate"
        # In a log file (no terminal) one line every 30 s, not one per token.
        with tqdm(total=budget, unit="tok", desc=desc, disable=not progress, file=sys.stderr, leave=False,
                  mininterval=0.1 if sys.stderr.isatty() else 30) as bar:
            out += generate_ids(model, p, prompt.tokenizer, cfg, seeds=sample_seeds(cfg.seed, start, b),
                                decoder=decoder, on_token=_progress(bar, start, on_tokens),
                                plan=prompt.request.plan if prompt.request else None)
    return out, compiled and bool(batches), setup


def _compiled_decoder(model, cfg: SamplingConfig, rows: int, build: bool):
    """The compiled decode step for `rows` rows where it applies (None: decode eagerly)."""
    if not (cfg.compile and cfg.use_cache):
        return None
    return compiled.decoder(model, rows, build_missing=build)


def _progress(bar, start: int, on_tokens):
    def step(n: int, tokens: torch.Tensor) -> None:
        bar.update(n - bar.n)
        if on_tokens is not None:
            on_tokens(start, tokens)

    return step


def note_limit(cfg: SamplingConfig, checkpoint: Checkpoint) -> float | None:
    """The longest a note may sound: the setting, else the 99.9th percentile of note lengths in the
    training data (recorded by `prepare`, carried by the checkpoint), so real long notes survive
    and a forgotten note-off does not hold a note for the rest of the piece; 0 means no limit."""
    if cfg.max_note_seconds is not None:
        return cfg.max_note_seconds or None
    if checkpoint.tokenizer.note_lengths_at_onset:  # nothing to forget: no default cap
        return None
    return (checkpoint.meta.get("note_seconds") or {}).get("p999")


def polyphony_limit(cfg: SamplingConfig, meta: dict) -> int | None:
    """The most notes that may sound at once: the setting, else the 99th percentile of onset
    polyphony in the training data of the requested style (of all of it without a style), as the
    checkpoint carries it (`cadenza.data.statistics`); 0 means no limit."""
    if cfg.max_polyphony is not None:
        return cfg.max_polyphony or None
    stats = meta.get("polyphony") or {}
    by_style = stats.get("styles") or {}
    return by_style.get(cfg.style) if cfg.style in by_style else stats.get("all")


def program_limit(cfg: SamplingConfig, meta: dict) -> str:
    """The programs new notes may play: the setting, else those the requested style's training pieces
    use (all the training data's without a style), as the checkpoint carries them; "any" where it
    carries none (a model trained before they were recorded)."""
    if cfg.programs is not None:
        return cfg.programs
    stats = meta.get("programs") or {}
    used = (stats.get("styles") or {}).get(cfg.style) if cfg.style else stats.get("all")
    return ",".join(map(str, used)) if used else "any"


def _write(result: Generation, out: Path, render: bool) -> None:
    """sample-NNN.mid per sample and generation.json (settings, checkpoint, per-sample stats)."""
    for i, score in enumerate(result.scores):
        result.paths.append(write_midi(score, out / f"sample-{i:03d}.mid"))
    write_json(out / "generation.json", {"settings": result.config.to_dict(), "prompt": describe(result.prompt.task),
                                         "run": result.run, "samples": [
        {"file": p.name, **s, "given": int(g.sum())} for p, s, g in zip(result.paths, result.stats, result.given)]})
    if render:  # the roll from the sample's notes, so that the given ones are drawn apart
        for p, notes, given in zip(result.paths, result.notes, result.given):
            render_file(p, wav=True, png=False)
            piano_roll(notes, p.with_suffix(".png"), title=p.name, given=given)
