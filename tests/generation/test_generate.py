"""Sampling and evaluation: cache equivalence, the grammar, filters, NLL, the whole pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import symusic
import torch

from cadenza.data.tokenizers import PerformanceTokenizer, Styled
from cadenza.data.tokenizers.grammar import PerformanceGrammar
from cadenza.evaluation.nll import token_nll, windows_for
from cadenza.generation.config import SamplingConfig
from cadenza.generation.filters import filter_logits, top_k_filter, top_p_filter
from cadenza.generation.sampler import generate_ids
from cadenza.models import build_model
from cadenza.models.config import ModelConfig

TOK = PerformanceTokenizer()


def model_for(model="transformer", attention="relative", context=48):
    torch.manual_seed(0)
    cfg = ModelConfig(model=model, attention=attention, vocab_size=TOK.vocab_size, context=context, d_model=32,
                      n_layers=2, n_heads=2, d_ff=64, dropout=0.0, embed_dim=16, lstm_hidden=32, attn_chunk=16)
    return build_model(cfg).double().eval()


@pytest.mark.parametrize("model,attention", [("transformer", "relative"), ("transformer", "rope"),
                                             ("transformer", "absolute"), ("lstm", "relative")])
def test_cached_and_uncached_generation_give_identical_samples(model, attention):
    m = model_for(model, attention)
    prompt = torch.tensor([[TOK.bos_id, TOK.velocity(20), 60, TOK.time_shift(30)]] * 3)
    runs = []
    for use_cache in (True, False):
        g = torch.Generator().manual_seed(7)
        # 120 new tokens: past the context of 48, so the window slides several times
        cfg = SamplingConfig(max_tokens=120, top_k=50, use_cache=use_cache, stop_at_eos=False)
        runs.append(generate_ids(m, prompt, TOK, cfg, generator=g))
    assert runs[0] == runs[1]
    assert all(len(s) >= 120 for s in runs[0])


def test_filters_are_small_pure_functions():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert torch.isinf(top_k_filter(logits, 2)).tolist() == [[True, False, False, True]]
    probs = torch.softmax(logits, -1)[0]  # 0.032, 0.644, 0.237, 0.087
    kept = ~torch.isinf(top_p_filter(logits, 0.7))[0]
    assert kept.tolist() == [False, True, True, False] and probs[1] < 0.7 <= probs[1] + probs[2]
    assert torch.equal(top_p_filter(logits, 1.0), logits) and torch.equal(top_k_filter(logits, None), logits)
    allowed = torch.tensor([[True, False, True, True]])
    out = filter_logits(logits, temperature=0.5, allowed=allowed)
    assert torch.isinf(out[0, 1]) and torch.allclose(out[0, [0, 2, 3]], logits[0, [0, 2, 3]] / 0.5)


def test_constrained_decoding_never_produces_an_invalid_event():
    """Thousands of random logits: every sampled sequence decodes with zero repairs."""
    g = torch.Generator().manual_seed(0)
    b, steps = 16, 600
    for cap, longest in ((None, None), (4, 1.5)):
        grammar = PerformanceGrammar(TOK, b, "cpu", max_polyphony=cap, max_note_seconds=longest)
        seqs = [[] for _ in range(b)]
        for _ in range(steps):
            logits = torch.randn(b, TOK.vocab_size, generator=g) * 3
            logits[:, :256] += 2  # favour note events so the grammar is exercised hard
            nxt = torch.multinomial(torch.softmax(filter_logits(logits, allowed=grammar.allowed()), -1), 1,
                                    generator=g)
            grammar.observe(nxt)
            for i in range(b):
                seqs[i].append(int(nxt[i]))
            if cap is not None:
                assert int(grammar.sounding.sum(1).max()) <= cap
        for s in grammar.close(seqs):
            s = s[:s.index(TOK.eos_id)] if TOK.eos_id in s else s
            notes, report = TOK.decode_notes(s)
            assert report.repairs == 0, report
            if longest is not None:
                assert (notes.end - notes.start).max() <= longest + 1e-9
            assert TOK.pad_id not in s and TOK.bos_id not in s


@pytest.mark.parametrize("styled", [False, True])
def test_the_grammar_state_follows_every_token_as_the_rules_say(styled):
    """Golden test of `observe` (which looks each token's effect up in per-token tables) against
    the rules written out: random tokens from the whole vocabulary, specials and style tokens
    included."""
    tok = Styled(TOK, ["jig", "chorale"]) if styled else TOK
    g = torch.Generator().manual_seed(1)
    b = 6
    grammar = tok.grammar(b, "cpu", True, None, max_note_seconds=2.0)
    assert isinstance(grammar, PerformanceGrammar)
    sounding = torch.zeros(b, 128, dtype=torch.bool)
    fresh, onset = sounding.clone(), torch.zeros(b, 128, dtype=torch.long)
    clock = torch.zeros(b, 1, dtype=torch.long)
    tokens = torch.randint(0, tok.vocab_size, (b, 400), generator=g)
    grammar.observe(tokens[:, :5])  # a prompt: several tokens at once
    for t in range(tokens.shape[1]):
        x = tokens[:, t:t + 1]
        if t >= 5:
            grammar.observe(x)
        pitch = torch.zeros(b, 128, dtype=torch.bool).scatter_(1, x % 128, True)
        on = pitch & (x < tok.note_off_offset)
        off = pitch & (x >= tok.note_off_offset) & (x < tok.note_off_offset + 128)
        shift = (x >= tok.shift_offset) & (x < tok.velocity_offset)
        sounding, fresh = (sounding | on) & ~off, (fresh | on) & ~shift
        onset = torch.where(on, clock, onset)
        clock = clock + torch.where(shift, x - tok.shift_offset + 1, 0)
        if t >= 4:
            assert torch.equal(grammar.sounding, sounding) and torch.equal(grammar.fresh, fresh)
            assert torch.equal(grammar.onset, onset) and torch.equal(grammar.clock, clock)
    assert sounding.any() and fresh.any()  # the walk exercised notes, not only specials


def test_nll_equals_the_sum_of_directly_computed_log_probs(midi_folder, tmp_path):
    from cadenza.data.prepare import prepare

    store = prepare([midi_folder], tmp_path / "s", workers=1, progress=False, valid_fraction=0.0,
                    test_fraction=0.0).store
    for model in ("transformer", "lstm"):
        m = model_for(model, context=4096)  # longer than any piece: one window per piece
        res = token_nll(m, store, "train")
        total = 0.0
        for p in store.pieces:
            ids = torch.tensor(np.concatenate([[TOK.bos_id], store[p.index], [TOK.eos_id]]))[None]
            with torch.no_grad():
                logp = torch.log_softmax(m(ids[:, :-1])[0].double(), -1)
            total -= logp[0, torch.arange(ids.shape[1] - 1), ids[0, 1:]].sum().item()
        n = sum(len(p) + 1 for p in store.pieces)
        assert res.tokens == n and res.nll == pytest.approx(total / n, rel=1e-9)


def test_strided_windows_score_every_target_exactly_once():
    for n, ctx, stride in [(5, 8, 4), (100, 16, 8), (100, 16, 1), (100, 16, 16), (17, 16, 3)]:
        seen = np.zeros(n, int)
        for s, first in windows_for(n, ctx, stride):
            end = min(s + ctx, n)
            seen[s + first:end] += 1
            assert first >= 0 and (s == 0 or first >= ctx - stride)  # every scored target has context
        assert (seen == 1).all()


@pytest.mark.slow
def test_end_to_end_prepare_train_generate_evaluate(midi_folder, tmp_path):
    """The real pipeline, small: CLI prepare -> train -> generate -> parse the MIDI -> evaluate."""
    from cadenza.cli import main

    assert main(["prepare", str(midi_folder), "--out", str(tmp_path / "data"), "--quiet",
                 "--valid-fraction", "0.2", "--test-fraction", "0.2"]) == 0
    assert main(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--max-steps", "8",
                 "--quiet", "--precision", "fp32", "context=64", "d_model=32", "n_layers=2", "n_heads=2",
                 "d_ff=64", "batch_size=4", "eval_every=4", "sample_tokens=0"]) == 0
    gen = ["generate", "--checkpoint", str(tmp_path / "run"), "--num-samples", "2", "--max-tokens", "80",
           "--seed", "3"]
    assert main(gen + ["--out", str(tmp_path / "a")]) == 0
    assert main(gen + ["--out", str(tmp_path / "b")]) == 0
    for i in range(2):
        a = (tmp_path / "a" / f"sample-{i:03d}.mid").read_bytes()
        assert a == (tmp_path / "b" / f"sample-{i:03d}.mid").read_bytes()  # same seed, same bytes
        assert symusic.Score.from_midi(a).note_num() > 0
    meta = json.loads((tmp_path / "a" / "generation.json").read_text())
    assert meta["settings"]["seed"] == 3 and all(s["repairs"]["repairs"] == 0 for s in meta["samples"])
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--data", str(tmp_path / "data"),
                 "--split", "valid", "--json", str(tmp_path / "nll.json")]) == 0
    rep = json.loads((tmp_path / "nll.json").read_text())["nll"]
    assert rep["tokens"] > 0 and rep["nll_bits"] == pytest.approx(rep["nll_nats"] / np.log(2))


def test_tokens_per_second_leaves_out_getting_the_compiled_step(studio_runs, monkeypatch):
    """A first run builds the compiled step (tens of seconds): that is recorded, not counted as
    decoding time, or `cadenza generate` would report a few tokens per second."""
    import time

    from cadenza.generation import generate as gen
    from cadenza.studio.registry import Registry

    def slow_build(*args):
        time.sleep(0.5)
        return None  # then decode eagerly

    monkeypatch.setattr(gen, "_compiled_decoder", slow_build)
    cfg = SamplingConfig(max_tokens=30, num_samples=2, batch_size=1, stop_at_eos=False)
    g = gen.sample(Registry(studio_runs).load("run:tiny"), cfg)
    run = g.run
    assert run["compile_seconds"] >= 1.0  # two batches, one lookup each
    tokens = sum(s["tokens"] for s in g.stats)
    assert run["tokens_per_s"] == pytest.approx(tokens / (run["generation_seconds"] - run["compile_seconds"]))


def test_a_gpu_decodes_on_the_cpu_only_where_the_gpu_check_measured_that_faster(monkeypatch):
    from cadenza.generation import generate as gen

    cuda, cfg = torch.device("cuda"), SamplingConfig(batch_size=1).validate()
    assert gen.decode_device(cuda, cfg, chosen=True) == cuda  # nothing measured: the GPU
    monkeypatch.setattr(gen, "CPU_DECODES_FASTER", frozenset({1}))
    assert gen.decode_device(cuda, cfg, chosen=True) == torch.device("cpu")
    assert gen.decode_device(cuda, cfg, chosen=False) == cuda  # --device cuda is obeyed
    assert gen.decode_device(cuda, SamplingConfig(batch_size=8, num_samples=8).validate(), chosen=True) == cuda
