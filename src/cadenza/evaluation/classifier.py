"""A style classifier: `evaluation.features` -> standardised -> multinomial logistic regression.

Trained on excerpts of the real pieces of a store's train split, measured on its test split, and
then used to ask of a generated sample "which style does this sound like?". Small and fast (a few
seconds to train on thousands of excerpts), and its weights are plain numbers saved as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cadenza.atomic import atomic_path
from cadenza.data.store import TokenStore
from cadenza.evaluation.features import excerpt, style_features


@dataclass
class StyleClassifier:
    styles: list[str]
    mean: np.ndarray
    scale: np.ndarray
    weight: np.ndarray  # (features, styles)
    bias: np.ndarray

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        z = ((np.atleast_2d(features) - self.mean) / self.scale) @ self.weight + self.bias
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def predict(self, features: np.ndarray) -> list[str]:
        return [self.styles[i] for i in self.probabilities(features).argmax(axis=1)]

    @classmethod
    def fit(cls, features: np.ndarray, labels: list[str], l2: float = 1e-3, seed: int = 0) -> StyleClassifier:
        """Weighted so every style counts the same however many excerpts it has."""
        styles = list(dict.fromkeys(labels))
        y = torch.tensor([styles.index(s) for s in labels])
        mean, scale = features.mean(axis=0), features.std(axis=0) + 1e-6
        x = torch.tensor((features - mean) / scale, dtype=torch.float64)
        counts = torch.bincount(y, minlength=len(styles)).double()
        class_weight = counts.sum() / (len(styles) * counts)
        torch.manual_seed(seed)
        w = torch.zeros(x.shape[1], len(styles), dtype=torch.float64, requires_grad=True)
        b = torch.zeros(len(styles), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ w + b, y, weight=class_weight) + l2 * (w ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        return cls(styles, mean, scale, w.detach().numpy(), b.detach().numpy())

    def to_dict(self) -> dict:
        return {"styles": self.styles, "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "weight": self.weight.tolist(), "bias": self.bias.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> StyleClassifier:
        return cls(d["styles"], *(np.asarray(d[k]) for k in ("mean", "scale", "weight", "bias")))


def excerpts(store: TokenStore, split: str, seconds: float, per_piece: int = 1,
             seed: int = 0) -> tuple[np.ndarray, list[str], list]:
    """Features of excerpts of `seconds` of every labelled piece of a split: the opening, then
    `per_piece - 1` more at random places. -> (features, style labels, the excerpts' notes)."""
    rng = np.random.default_rng(seed)
    feats, labels, notes = [], [], []
    for p in store.split(split):
        if not p.style:
            continue
        whole = store.tokenizer.to_notes(store[p.index])
        last = max(whole.duration - seconds, 0.0)
        for k in range(per_piece):
            cut = excerpt(whole, 0.0 if k == 0 else float(rng.uniform(0, last)), seconds)
            if len(cut):
                feats.append(style_features(cut))
                labels.append(p.style)
                notes.append(cut)
    return np.array(feats), labels, notes


def confusion(classifier: StyleClassifier, truth: list[str], predicted: list[str]) -> np.ndarray:
    """counts[i, j]: pieces of style i classified as style j."""
    n = len(classifier.styles)
    out = np.zeros((n, n), np.int64)
    for t, p in zip(truth, predicted):
        out[classifier.styles.index(t), classifier.styles.index(p)] += 1
    return out


def confusion_png(counts: np.ndarray, styles: list[str], path, title: str) -> None:
    """The confusion matrix as a picture: rows the true style, columns the predicted one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig = Figure(figsize=(1.2 * len(styles) + 2, 1.1 * len(styles) + 1.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    for i in range(len(styles)):
        for j in range(len(styles)):
            ax.text(j, i, f"{share[i, j]:.0%}\n({counts[i, j]})", ha="center", va="center", fontsize=8,
                    color="white" if share[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(styles)), styles, rotation=30, ha="right")
    ax.set_yticks(range(len(styles)), styles)
    ax.set_xlabel("classified as")
    ax.set_ylabel("style")
    ax.set_title(title)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
