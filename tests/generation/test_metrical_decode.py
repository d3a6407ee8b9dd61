"""The metrical vocabulary through the sampler's fast paths: with a melody's notes forced at their
positions and the next bar's shown after each bar line, the key-value cache gives the uncached
model's samples, and the compiled decode step picks the eager model's tokens, past window slides."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadenza.data.meter import Meter
from cadenza.data.midi import Notes
from cadenza.data.tokenizers.metrical import MetricalTokenizer
from cadenza.generation import compiled
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Accompany, Prompt
from cadenza.generation.sampler import generate_ids
from cadenza.models import build_model
from cadenza.models.config import ModelConfig


def _melody(live: bool):
    """A 3/4 tune at 100 qpm (a dotted rhythm, 8 bars), as an accompaniment's prompt and plan."""
    meter = Meter.from_changes([(0, 100)], [(0, 3, 4)])
    beats = np.cumsum([0] + [1.5, 0.5, 1] * 8)[:-1]
    lengths = np.diff(np.append(beats, beats[-1] + 1))
    start, end = meter.seconds(beats), meter.seconds(beats + lengths * 0.9)
    tune = Notes.from_arrays(start, end, [67, 69, 71, 72, 74, 72, 71, 69] * 3, [80] * 24, meter=meter)
    tok = MetricalTokenizer(lookahead=True)
    prompt = Prompt.encode(tok, Accompany(tune, live=live))
    return tok, torch.tensor([prompt.ids] * 2), prompt.request.plan


def _model(tok, seed: int = 1):
    torch.manual_seed(seed)
    return build_model(ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=4, d_ff=128,
                                   context=128, dropout=0.0)).eval()


@pytest.mark.parametrize("live", [False, True])
def test_cached_and_uncached_sampling_agree_with_given_notes_and_previews(live):
    tok, prompt, plan = _melody(live)
    m = _model(tok).double()  # float64: the two paths' logits agree to the last bit that sampling sees
    runs = []
    for use_cache in (True, False):
        g = torch.Generator().manual_seed(3)
        cfg = SamplingConfig(max_tokens=400, top_k=20, use_cache=use_cache, stop_at_eos=False)
        runs.append(generate_ids(m, prompt, tok, cfg, generator=g, plan=plan))
    assert runs[0] == runs[1]
    seen = prompt[0].tolist() + runs[0][0]
    assert (tok.ahead_id in seen) != live  # the whole melody is previewed a bar ahead; live, never


@pytest.mark.slow
def test_the_metrical_vocabulary_decodes_the_same_compiled_and_eager(compile_here):
    tok, prompt, plan = _melody(False)
    m = _model(tok)
    cfg = SamplingConfig(max_tokens=400, top_k=1, stop_at_eos=False)
    greedy = [generate_ids(m, prompt, tok, cfg, decoder=decoder, plan=plan)
              for decoder in (None, compiled.decoder(m, 2, quiet=True))]
    assert greedy[0] == greedy[1]
    assert len(greedy[0][0]) > 128  # past the context: the window slid
