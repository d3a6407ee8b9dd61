"""`cadenza.evaluate(...)`: the NLL of a checkpoint on a store split, and/or how a folder of
generated samples compares with real music (metrics, overlap, memorisation)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadenza.atomic import write_json
from cadenza.data.midi import MIDI_SUFFIXES, read_notes
from cadenza.data.store import SPLITS, TokenStore
from cadenza.env.record import command_line, cpu_info, git_commit, library_versions
from cadenza.evaluation.memorisation import RunFinder
from cadenza.evaluation.metrics import compare_sets
from cadenza.settings import setting, validate


@dataclass
class EvaluateConfig:
    split: str = setting("test", choices=SPLITS, doc="the split whose NLL is measured")
    stride: int | None = setting(None, ge=1, doc="window stride in tokens (default: half the context)")
    reference_split: str = setting("train", choices=SPLITS, doc="the pieces samples are compared with")


def evaluate(checkpoint: str | os.PathLike | None = None, data: str | os.PathLike | None = None, *,
             split: str = "test", stride: int | None = None, samples: str | os.PathLike | None = None,
             reference: str | os.PathLike | None = None, reference_split: str = "train", device: str = "auto",
             progress: bool = False, json_path: str | os.PathLike | None = None, styles: bool = False,
             per_style: int = 20, seconds: float = 30.0, guidance: float = 2.0,
             out: str | os.PathLike | None = None) -> dict[str, Any]:
    """With `checkpoint` and `data`: NLL per token (nats, bits) and perplexity over a whole split.
    With `samples` (a folder of MIDI) and `reference` (a store): musical metrics of the samples
    against the reference pieces, their overlapping areas, and the longest run a sample copies.
    With `styles` (and `checkpoint`, `data`): how well a style model plays each of the store's styles
    (`cadenza.evaluation.styles`), its pictures written to `out`. The parts asked for come back as
    {"nll": ..., "samples": ..., "styles": ...}. With `json_path`, the result is also written."""
    validate(EvaluateConfig(split, stride, reference_split))
    result: dict[str, Any] = {}
    if checkpoint is not None or data is not None:
        if checkpoint is None or data is None:
            raise ValueError("the NLL needs both a checkpoint and a token store (--checkpoint and --data)")
        result["nll"] = nll_report(checkpoint, data, split, stride, device, progress)
        if styles:
            # lazy: the style classifier loads torch, which comparing samples does not need
            from cadenza.evaluation.styles import evaluate_styles

            result["styles"] = evaluate_styles(checkpoint, data, per_style=per_style, seconds=seconds,
                                               guidance=guidance, out=out, device=device, progress=progress)
    if styles and (checkpoint is None or data is None):
        raise ValueError("--styles needs a checkpoint and the labelled store it was trained on (--data)")
    if samples is not None or reference is not None:
        if samples is None or reference is None:
            raise ValueError("comparing samples needs both a samples folder and a reference store "
                             "(--samples and --reference)")
        result["samples"] = samples_report(samples, reference, reference_split)
    if not result:
        raise ValueError("nothing to evaluate: give a checkpoint and a token store, or samples and a reference")
    if json_path is not None:
        # A result file says how it was made: the command, the code and the machine.
        write_json(json_path, {**result, "command": command_line(), "code_commit": git_commit(), "cpu": cpu_info(),
                               "versions": library_versions(("cadenza", "torch", "numpy", "symusic", "music21"))})
    return result


def nll_report(checkpoint, data, split: str = "test", stride: int | None = None, device: str = "auto",
               progress: bool = False) -> dict[str, Any]:
    # lazy: these load torch, which comparing samples does not need
    from cadenza.env.device import pick_device
    from cadenza.evaluation.nll import token_nll
    from cadenza.models import checkpoint as ckpt

    dev = pick_device(device)
    loaded = ckpt.load(checkpoint, dev)
    model, meta = loaded.model, loaded.meta
    store = TokenStore(data)
    if not store.tokenizer.same_as(meta["tokenizer"]):
        raise ValueError(f"{data} was tokenized differently from the checkpoint's training data")
    r = token_nll(model, store, split, stride=stride, device=dev, progress=progress, tokenizer=loaded.tokenizer)
    out = r.as_dict()
    # A shipped model by its name: where the package is installed says nothing about the result.
    shipped = not os.path.exists(str(checkpoint))
    out.update({"checkpoint": str(checkpoint) if shipped else meta["path"], "step": meta["step"],
                "unigram_nll": store.unigram_nll(split)})
    pieces = store.split(split)
    if store.styles:  # the same NLL, per style: every target of the style's pieces
        out["per_style"] = {}
        for style in store.styles:
            nll = [v for p, v in zip(pieces, r.per_piece) if p.style == style]
            if nll:
                out["per_style"][style] = float(sum(v.sum() for v in nll) / sum(v.size for v in nll))
    return out


def reference_notes(store: TokenStore, split: str) -> list:
    """Each piece of a store split decoded back to notes (exact for the performance tokenizer)."""
    return [store.tokenizer.to_notes(store[p.index]) for p in store.split(split)]


def samples_report(samples, reference, reference_split: str = "train") -> dict[str, Any]:
    folder = Path(samples)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder of samples")
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in MIDI_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{samples}: no MIDI files")
    store = TokenStore(reference)
    metrics = compare_sets([read_notes(f)[0] for f in files], reference_notes(store, reference_split))
    pieces = store.split(reference_split)
    finder = RunFinder([store[p.index] for p in pieces])
    memo = []
    for f in files:
        ids = store.tokenizer.encode(f).ids
        run = finder.longest_common_run(ids)
        memo.append({"file": f.name, "tokens": int(ids.size), "longest_shared_run": run.length,
                     "piece": pieces[run.piece_index].source if run.length else None})
    return {"samples": len(files), "reference": len(pieces), "metrics": metrics, "memorisation": memo}
