"""A short sample at each validation, logged to TensorBoard as audio and as a piano roll.

Listening to the model while it trains says more than the loss curve about when it starts to
make music; a failure here is reported and never stops training.
"""

from __future__ import annotations

import sys

import torch

from cadenza.generation.config import SamplingConfig
from cadenza.generation.sampler import generate_ids
from cadenza.listen.audio import synthesize
from cadenza.listen.pianoroll import piano_roll

SAMPLE_RATE = 16000  # TensorBoard plays it in the browser; a small rate keeps event files small


def log_sample(writer, model, tok, step: int, n_tokens: int, device) -> None:
    """Sample `n_tokens` without a style (nucleus 0.95, seeded by the step) and log what it plays."""
    g = torch.Generator(device=device).manual_seed(step)
    prompt = torch.tensor([tok.window_prefix(None) + [tok.bos_id]], device=device)  # unconditioned
    try:
        ids = generate_ids(model, prompt, tok, SamplingConfig(max_tokens=n_tokens, top_p=0.95), generator=g)[0]
        notes = tok.to_notes(ids)
        if len(notes) == 0:
            return
        audio, _ = synthesize(notes, sample_rate=SAMPLE_RATE, backend="numpy")
        writer.add_audio("sample/audio", torch.from_numpy(audio)[None], step, sample_rate=SAMPLE_RATE)
        writer.add_image("sample/piano_roll", piano_roll(notes, title=f"step {step}"), step, dataformats="HWC")
    except Exception as e:  # a logging sample must never stop training
        print(f"(could not log a sample at step {step}: {type(e).__name__}: {e})", file=sys.stderr)
    finally:
        model.train()
