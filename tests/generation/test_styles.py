"""Style conditioning end to end: labels in the store, style tokens in training windows, the
checkpoint's styles, conditioned and guided sampling, fine-tuning with new styles."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import random_piece, write_score

import cadenza
from cadenza.data.dataset import WindowDataset
from cadenza.data.tokenizers import PerformanceTokenizer
from cadenza.generation.config import SamplingConfig
from cadenza.generation.sampler import generate_ids, sample_seeds
from cadenza.models import checkpoint as ckpt
from cadenza.training.config import resolve

SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_every=4", "eval_windows=4", "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\"", "save_every=4"]


def styled_folder(root, styles: dict[str, int], seed: int = 0):
    rng = np.random.default_rng(seed)
    for style, n in styles.items():
        (root / style).mkdir(parents=True)
        for i in range(n):
            write_score(random_piece(rng, int(rng.integers(40, 90))), root / style / f"{style}{i}.mid")
    return root


@pytest.fixture(scope="module")
def styled(tmp_path_factory):
    root = tmp_path_factory.mktemp("styles")
    folder = styled_folder(root / "in", {"Jigs": 6, "chorales": 6})
    store = cadenza.prepare(folder, root / "store", styles_from_folders=True, workers=1, progress=False,
                            valid_fraction=0.2, test_fraction=0.0).store
    run = root / "run"
    cadenza.train(resolve("tiny", overrides=SMALL + ["max_steps=4"]), store.path, run, progress=False)
    return store, run


def test_style_labels_round_trip_through_store_dataset_and_checkpoint(styled):
    store, run = styled
    assert store.styles == ["jigs", "chorales"] and {p.style for p in store.pieces} == {"jigs", "chorales"}
    assert store.manifest["styles"]["jigs"]["pieces"] + store.manifest["styles"]["chorales"]["pieces"] == 12
    meta = ckpt.read_meta(ckpt.latest_checkpoint(run))
    tok = ckpt.load_tokenizer(run, prefer="latest")
    assert tok.styles == ("jigs", "chorales") and tok.vocab_size == PerformanceTokenizer().vocab_size + 3
    assert meta["config"]["model"]["vocab_size"] == tok.vocab_size
    ds = WindowDataset(store, "train", 64, tokenizer=tok)  # no dropout: every window names its style
    for i in range(50):
        w = ds[i].numpy()
        piece_styles = {tok.style_id(p.style) for p in store.split("train")}
        assert w[0] in piece_styles and not np.isin(w[1:], list(tok.special_ids[3:])).any()


def test_generation_names_its_style_and_refuses_unknown_ones(styled, tmp_path):
    _, run = styled
    g = cadenza.generate(run, style="jigs", max_tokens=30, num_samples=2, out=tmp_path / "g")
    assert json.loads((tmp_path / "g" / "generation.json").read_text())["settings"]["style"] == "jigs"
    assert all(i < PerformanceTokenizer().vocab_size for ids in g.ids for i in ids)  # never a style token
    with pytest.raises(ValueError, match="unknown style 'reels'; this model knows jigs, chorales"):
        cadenza.generate(run, style="reels", max_tokens=5)


def _sample(run, style: str, guidance: float, use_cache: bool = True, slide: int | None = None, n: int = 40):
    model, tok = (c := ckpt.load(run)).model, c.tokenizer
    prompt = torch.tensor([tok.style_prefix(style) + [tok.bos_id]] * 3)
    cfg = SamplingConfig(style=style, guidance=guidance, max_tokens=n, use_cache=use_cache, stop_at_eos=False)
    return generate_ids(model, prompt, tok, cfg, seeds=sample_seeds(7, 0, 3), slide=slide)


def test_guidance_1_is_plain_conditioned_sampling_bit_for_bit(styled):
    _, run = styled
    assert _sample(run, "chorales", 1.0) == cadenza.generate(run, style="chorales", max_tokens=40, num_samples=3,
                                                              seed=7, stop_at_eos=False, max_note_seconds=0,
                                                              max_polyphony=0).ids
    assert _sample(run, "chorales", 2.5) != _sample(run, "chorales", 1.0)


@pytest.mark.parametrize("guidance", [1.0, 2.0])
def test_cached_and_uncached_guided_sampling_agree_across_a_window_slide(styled, guidance):
    _, run = styled
    n = 150  # the context is 64: the window slides (keeping the style token) more than once
    assert _sample(run, "jigs", guidance, True, slide=16, n=n) == _sample(run, "jigs", guidance, False, slide=16, n=n)


def test_fine_tuning_keeps_the_old_styles_and_adds_new_ones(styled, tmp_path):
    _, run = styled
    folder = styled_folder(tmp_path / "mine", {"mine": 5}, seed=3)
    store = cadenza.prepare(folder, tmp_path / "store", styles_from_folders=True, workers=1, progress=False,
                            valid_fraction=0.2, test_fraction=0.0).store
    before = ckpt.load(run).model
    cfg = resolve("tiny", overrides=["max_steps=2", "batch_size=2", "sample_tokens=0", "eval_every=2",
                                     "eval_windows=2", "precision=\"fp32\"", "device=\"cpu\"", "warmup_steps=1"])
    cfg.train.init = str(run)
    res = cadenza.train(cfg, store.path, tmp_path / "tuned", progress=False)
    tuned = ckpt.load(res.run_dir)
    after, meta, tok = tuned.model, tuned.meta, tuned.tokenizer
    assert tok.styles == ("jigs", "chorales", "mine")  # old ids kept, the new style appended
    assert meta["config"]["model"]["d_model"] == 32  # the architecture of the model it started from
    assert after.tok_emb.weight.shape[0] == before.tok_emb.weight.shape[0] + 1
    old_ids = [ckpt.load_tokenizer(run, prefer="latest").style_id(s)
               for s in ("jigs", "chorales")]
    assert old_ids == [tok.style_id("jigs"), tok.style_id("chorales")]
    for style in tok.styles:  # every style, old and new, plays
        assert cadenza.generate(res.run_dir, style=style, max_tokens=10).ids
