"""Does a style model play its styles? `cadenza evaluate --checkpoint RUN --data STORE --styles`.

1. A style classifier (`evaluation.classifier`) is trained on excerpts of the store's train pieces
   and measured on its test pieces: its accuracy says how far the styles can be told apart at all.
2. For each style the model generates samples with and without guidance; style accuracy is the
   share the classifier files under the style that was asked for.
3. Per style, the Yang & Lerch overlap of the samples' musical metrics with the style's real
   pieces, beside the overlap of held-out real pieces with the same pieces (the ceiling).
4. Per style, memorisation: the longest run of tokens a sample copies from a training piece.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.atomic import write_json
from cadenza.data.store import TokenStore
from cadenza.evaluation.classifier import StyleClassifier, confusion, confusion_png, excerpts
from cadenza.evaluation.features import style_features
from cadenza.evaluation.memorisation import RunFinder
from cadenza.evaluation.metrics import mean_overlap
from cadenza.generation.generate import generate
from cadenza.settings import setting, validate


@dataclass
class StyleEvalConfig:
    per_style: int = setting(20, ge=1, le=1000, doc="samples generated per style (and per guidance)")
    seconds: float = setting(30.0, gt=0, le=600, doc="music per sample, and per excerpt of a real piece")
    guidance: float = setting(2.0, ge=0, le=20, doc="the guidance of the guided samples")
    seed: int = setting(0, ge=0)


def evaluate_styles(checkpoint: str | os.PathLike, data: str | os.PathLike, *, per_style: int = 20,
                    seconds: float = 30.0, guidance: float = 2.0, seed: int = 0, out: str | os.PathLike | None = None,
                    device: str = "auto", progress: bool = False) -> dict[str, Any]:
    """The report described in the module docstring; with `out`, confusion matrices as PNG too."""
    cfg = validate(StyleEvalConfig(per_style, seconds, guidance, seed))
    store = TokenStore(data)
    if not store.styles:
        raise ValueError(f"{data}: no style labels; make it with `cadenza prepare --corpus a,b` or --style")
    clf, real = classifier_report(store, cfg.seconds, seed)
    report: dict[str, Any] = {"classifier": real["report"], "styles": {}, "settings": cfg.__dict__}
    samples = {}
    for style in clf.styles:
        samples[style] = {g: _samples(checkpoint, style, g, cfg, device, progress) for g in (1.0, cfg.guidance)}
    for style in clf.styles:
        report["styles"][style] = _style_report(store, clf, style, samples[style], real, cfg)
    for g, key in ((cfg.guidance, "guided"), (1.0, "plain")):
        truth = [s for s in clf.styles for _ in samples[s][g]]
        predicted = [p for s in clf.styles for p in clf.predict(np.array([style_features(n) for n in samples[s][g]]))]
        report[f"confusion_{key}"] = confusion(clf, truth, predicted).tolist()
        report[f"style_accuracy_{key}"] = float(np.mean([report["styles"][s][f"accuracy_{key}"] for s in clf.styles]))
    ratios = [v["overlap"] / v["ceiling"] for v in report["styles"].values() if v["ceiling"]]
    report["overlap_vs_ceiling"] = float(np.mean(ratios)) if ratios else float("nan")
    if out is not None:
        _write(report, clf, Path(out))
    return report


def classifier_report(store: TokenStore, seconds: float, seed: int = 0) -> tuple[StyleClassifier, dict]:
    """The classifier trained on train excerpts (3 per piece), scored on the test pieces' openings."""
    x, y, _ = excerpts(store, "train", seconds, per_piece=3, seed=seed)
    clf = StyleClassifier.fit(x, y, seed=seed)
    xt, yt, test_notes = excerpts(store, "test", seconds, per_piece=1, seed=seed)
    if not yt:
        raise ValueError(f"{store.path}: the test split has no labelled pieces to measure the classifier on")
    predicted = clf.predict(xt)
    counts = confusion(clf, yt, predicted)
    per_style = {s: float(counts[i, i] / max(counts[i].sum(), 1)) for i, s in enumerate(clf.styles)}
    rep = {"accuracy": float(np.mean([p == t for p, t in zip(predicted, yt)])), "per_style": per_style,
           "balanced_accuracy": float(np.mean(list(per_style.values()))), "confusion": counts.tolist(),
           "train_excerpts": len(y), "test_pieces": len(yt)}
    train_notes = excerpts(store, "train", seconds, per_piece=1, seed=seed)
    return clf, {"report": rep, "test": list(zip(yt, test_notes)), "train": list(zip(train_notes[1], train_notes[2]))}


def _samples(checkpoint, style: str, guidance: float, cfg: StyleEvalConfig, device: str, progress: bool) -> list:
    g = generate(checkpoint, style=style, guidance=guidance, num_samples=cfg.per_style, seconds=cfg.seconds,
                 stop_at_eos=False, seed=cfg.seed, batch_size=min(cfg.per_style, 10), device=device,
                 progress=progress)
    return g.notes


def _style_report(store: TokenStore, clf: StyleClassifier, style: str, samples: dict, real: dict,
                  cfg: StyleEvalConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g, key in ((cfg.guidance, "guided"), (1.0, "plain")):
        got = clf.predict(np.array([style_features(n) for n in samples[g]]))
        out[f"accuracy_{key}"] = float(np.mean([p == style for p in got]))
    train = [n for s, n in real["train"] if s == style]
    test = [n for s, n in real["test"] if s == style]

    out["overlap"] = mean_overlap(samples[cfg.guidance], train)
    out["ceiling"] = mean_overlap(test, train) if test else float("nan")
    out["memorisation"] = _memorisation(store, style, samples[cfg.guidance])
    return out


def _memorisation(store: TokenStore, style: str, samples: list) -> dict[str, int]:
    finder = RunFinder([store[p.index] for p in store.split("train") if p.style == style])
    runs = [finder.longest_common_run(store.tokenizer.encode(n).ids).length for n in samples]
    return {"median": int(np.median(runs)) if runs else 0, "max": int(max(runs, default=0))}


def _write(report: dict, clf: StyleClassifier, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rep = report["classifier"]
    confusion_png(np.array(rep["confusion"]), clf.styles, out / "confusion-real.png",
                  f"real test pieces: classifier accuracy {rep['accuracy']:.0%}")
    confusion_png(np.array(report["confusion_guided"]), clf.styles, out / "confusion-generated.png",
                  f"generated, guidance {report['settings']['guidance']:g}: style accuracy "
                  f"{report['style_accuracy_guided']:.0%}")
    write_json(out / "styles.json", {**report, "classifier_weights": clf.to_dict()})
