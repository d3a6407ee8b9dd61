"""`cadenza.generate(...)`: new pieces (or continuations of a primer) from any checkpoint.

The checkpoint carries its model and tokenizer configs, so nothing about the architecture is
passed here. Sampling is batched with the KV cache (or the LSTM's carried state), the grammar
masks impossible events by default, and the same seed gives the same MIDI bit for bit on the same
machine. With `out`, one .mid per sample is written plus ``generation.json`` (settings,
checkpoint, and per-sample tokens, notes, seconds and decoder repairs).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadenza import checkpoint as ckpt
from cadenza.atomic import write_json
from cadenza.midi import Notes, read_notes, write_midi
from cadenza.sample import generate_ids
from cadenza.tokenizers import tokenizer_from_dict


@dataclass
class Generation:
    scores: list  # symusic Scores (ticks)
    ids: list[list[int]]  # generated ids per sample (primer excluded)
    stats: list[dict[str, Any]]
    paths: list[Path] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def primer_ids(tok, path: str | Path, seconds: float | None = None) -> np.ndarray:
    """Encode a primer MIDI; with `seconds`, only its opening (notes cut at that instant)."""
    if seconds is not None and tok.name == "performance":
        notes, _ = read_notes(path, sustain=tok.sustain)
        keep = notes.start < seconds
        notes = Notes.from_arrays(notes.start[keep], np.minimum(notes.end[keep], seconds), notes.pitch[keep],
                                  notes.velocity[keep])
        return tok.encode_notes(notes)
    ids = tok.encode(path).ids
    if seconds is not None:
        raise ValueError(f"--primer-seconds needs the performance tokenizer, not {tok.name}")
    return ids


def _seconds_of(tok, ids) -> float:
    off = getattr(tok, "shift_offset", None)
    if off is None:
        return float("nan")
    a = np.asarray(ids)
    return float((a[(a >= off) & (a < tok.velocity_offset)] - off + 1).sum()) / tok.steps_per_second


def generate(checkpoint: str | Path, primer: str | Path | None = None, primer_seconds: float | None = None,
             num_samples: int = 1, max_tokens: int | None = None, seconds: float | None = None,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0,
             out: str | Path | None = None, constrained: bool = True, max_polyphony: int | None = None,
             device: str = "auto", batch_size: int = 8, use_cache: bool = True, render: bool = False,
             stop_at_eos: bool = True, max_note_seconds: float | None = None) -> Generation:
    """Sample `num_samples` pieces. Returns symusic scores, ids and statistics."""
    from cadenza.device import pick_device

    dev = pick_device(device)
    model, meta = ckpt.load_model(checkpoint, dev)
    tok = tokenizer_from_dict(meta["tokenizer"])
    if seconds is not None and getattr(tok, "shift_offset", None) is None:
        raise ValueError(f"--seconds needs the performance tokenizer, not {tok.name}; use --max-tokens")
    max_tokens = max_tokens or (int(seconds * 60) + 64 if seconds else 1024)
    prompt = [tok.bos_id] + (primer_ids(tok, primer, primer_seconds).tolist() if primer else [])
    g = torch.Generator(device=dev).manual_seed(seed)
    t0 = time.time()
    all_ids: list[list[int]] = []
    for start in range(0, num_samples, batch_size):
        b = min(batch_size, num_samples - start)
        p = torch.tensor([prompt] * b, dtype=torch.long, device=dev)
        all_ids += generate_ids(model, p, max_tokens, tok, temperature, top_k, top_p, g, constrained,
                                max_polyphony, use_cache, stop_at_eos=stop_at_eos, stop_seconds=seconds,
                                max_note_seconds=max_note_seconds)
    elapsed = time.time() - t0
    scores, stats = [], []
    for ids in all_ids:
        full = prompt[1:] + ids
        score, report = tok.decode(full)
        scores.append(score)
        stats.append({"tokens": len(ids), "primer_tokens": len(prompt) - 1, "notes": score.note_num(),
                      "seconds": _seconds_of(tok, full), "repairs": report.as_dict()})
    settings = {"checkpoint": meta["path"], "step": meta["step"], "data_fingerprint": meta.get("data_fingerprint"),
                "primer": str(primer) if primer else None, "primer_seconds": primer_seconds,
                "num_samples": num_samples, "max_tokens": max_tokens, "seconds": seconds,
                "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
                "constrained": constrained, "max_polyphony": max_polyphony, "use_cache": use_cache,
                "stop_at_eos": stop_at_eos, "max_note_seconds": max_note_seconds,
                "device": str(dev), "generation_seconds": elapsed,
                "tokens_per_s": sum(len(i) for i in all_ids) / max(elapsed, 1e-9)}
    result = Generation(scores, all_ids, stats, settings=settings)
    if out is not None:
        out = Path(out)
        for i, score in enumerate(scores):
            result.paths.append(write_midi(score, out / f"sample-{i:03d}.mid"))
        write_json(out / "generation.json", {"settings": settings, "samples": [
            {"file": p.name, **s} for p, s in zip(result.paths, stats)]})
        if render:
            from cadenza.render import render_file

            for p in result.paths:
                render_file(p, wav=True, png=True)
    return result


def as_dict(g: Generation) -> dict:
    d = asdict(g)
    d.pop("scores")
    return d
