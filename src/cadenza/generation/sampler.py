"""Batched token-by-token sampling with a KV cache (or the LSTM's carried state).

`generate_ids` continues a batch of prompts token by token. The transformer keeps a static KV
cache; the LSTM carries its (h, c) state. Past the model's context the window slides: when the
cache is full it is refilled with the last ``context - slide`` tokens, and generation goes on.
Every sampling setting comes from one validated `SamplingConfig`. Without the cache
(``use_cache=False``) the same windows are recomputed from scratch at every step (how
MusicTransformer-Pytorch samples), which the tests use as the reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cadenza.generation.config import SamplingConfig
from cadenza.generation.filters import filter_logits, inverse_cdf


class _Window:
    """Feeds tokens to the model, sliding the context window the same way with or without cache.

    The first `keep` tokens (a style token) start every window: past the context, the window is
    those tokens then the most recent ones, as every training window was.
    """

    def __init__(self, model, batch: int, use_cache: bool, slide: int, keep: int = 0, decoder=None):
        self.model = model
        self.context = model.config.context
        self.windowed = model.windowed  # False: a recurrent state carries the past, no window slides
        self.keep = keep
        self.slide = max(1, min(slide, self.context - 1 - keep))
        self.start = 0  # index of the first token after the kept ones inside the window (0: no slide yet)
        self.decoder = decoder  # a StepDecoder: single-token steps go through its compiled step
        self.cache = (decoder.cache if decoder is not None else model.new_cache(batch)) if use_cache else None

    def _view(self, seq: torch.Tensor) -> torch.Tensor:
        if self.start == 0:
            return seq
        return torch.cat([seq[:, :self.keep], seq[:, self.start:]], 1) if self.keep else seq[:, self.start:]

    def _slides(self, n: int) -> bool:
        """Whether feeding a sequence of n tokens needs the window to slide first."""
        width = n if self.start == 0 else self.keep + n - self.start
        return self.windowed and width > self.context

    @torch.no_grad()
    def next_token(self, seq: torch.Tensor, n_new: int, allowed: torch.Tensor, u: torch.Tensor,
                   temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, the tokens the compiled step drew from them) for the token after `seq`, or
        (logits, None) where the step cannot draw: a prompt, a window slide, no drawing step."""
        n = seq.shape[1]
        if self.decoder is not None and n_new == 1 and not self._slides(n):
            return self.decoder.step_draw(seq[:, n - 1:], allowed, u, temperature)
        return self.next_logits(seq, n_new), None

    @torch.no_grad()
    def next_logits(self, seq: torch.Tensor, n_new: int) -> torch.Tensor:
        """Logits for the token after `seq` (B, N); the last `n_new` tokens are not yet fed."""
        n = seq.shape[1]
        if self._slides(n):
            self.start = n - (self.context - self.slide - self.keep)
            if self.cache is not None:
                self.cache.reset()
                return self.model(self._view(seq), cache=self.cache)[0][:, -1]
        if self.cache is None:
            logits, _ = self.model(self._view(seq) if self.windowed else seq)
        elif self.decoder is not None and n_new == 1:
            return self.decoder.step(seq[:, n - 1:])
        else:
            logits, _ = self.model(seq[:, n - n_new:], cache=self.cache)
        return logits[:, -1]


def default_slide(model) -> int:
    """How far the window slides past the context by default: a quarter of it."""
    return model.config.context // 4


@torch.inference_mode()
def warm_window_slide(model, rows: int, keep: int) -> None:
    """Feed one window slide of `rows` rows through the eager model, as a generation past the
    context does. A long-running server calls it at start: the native kernels oneDNN compiles for
    that shape on first use (and keeps) are then made before its first job slides, not as the memory
    growth of a later round. `keep`: the tokens every window keeps (`Tokenizer.window_prefix`).
    Nothing to do for an LSTM, whose window never slides."""
    model.eval()
    window = _Window(model, rows, True, default_slide(model), keep=keep)
    if not window.windowed:
        return
    device = next(model.parameters()).device
    window.next_logits(torch.zeros(rows, window.context + 1, dtype=torch.long, device=device), 1)


def sample_seeds(seed: int, first: int, count: int) -> list[int]:
    """The seed of each sample: sample i of a generation seeded `seed` draws from a random stream of
    its own, so it is the same whatever the batch size or the number of samples around it."""
    return [int(np.random.SeedSequence([seed, i]).generate_state(1, np.uint64)[0] >> 1)
            for i in range(first, first + count)]


def _uniforms(b: int, n: int, device, generator: torch.Generator | None, seeds: list[int] | None) -> torch.Tensor:
    """(B, n) uniforms: row r from its own stream `seeds[r]`, or all from one `generator`."""
    if seeds is None:
        return torch.rand(b, n, generator=generator, device=device)
    if len(seeds) != b:
        raise ValueError(f"{len(seeds)} seeds for a batch of {b}")
    return torch.stack([torch.rand(n, generator=torch.Generator(device=device).manual_seed(s), device=device)
                        for s in seeds])


@torch.inference_mode()
def generate_ids(model, prompts: torch.Tensor, tokenizer, cfg: SamplingConfig, *,
                 generator: torch.Generator | None = None, seeds: list[int] | None = None, decoder=None,
                 on_token: Callable[[int, torch.Tensor], None] | None = None,
                 slide: int | None = None, plan=None) -> list[list[int]]:
    """Continue each prompt (B, T0) by up to `cfg.token_budget()` sampled tokens; returns the new
    tokens per row (EOS kept when sampled).

    `cfg` is a validated `SamplingConfig`, applied as it is (its grammar limits too: None or 0 is
    none; `generate.sample` fills them from the checkpoint first). Randomness comes from `seeds`
    (one per row: a row's tokens do not depend on the other rows) or `generator`. With guidance
    != 1 (a styled tokenizer, whose prompts start with their style token) the logits are
    ``uncond + guidance * (cond - uncond)``, the unconditioned rows having NO_STYLE in the style
    token's place, both halves in one batch. `decoder` (a `StepDecoder` from `compiled.decoder` for
    this many rows) runs the single-token steps through the compiled step; prompts and window slides
    go through the eager model. `slide`: how far the window slides past the context (default a
    quarter of it). `on_token(n, new)` is called after each step with the steps taken and the new
    tokens so far, a (B, n) view (a progress bar, streaming, cancelling). `plan`: the given notes
    (controls) and event span of an infill or accompaniment, for a tokenizer that anticipates.
    """
    model.eval()
    decoder = decoder if cfg.use_cache else None  # without a cache every step recomputes its window
    b, t0 = prompts.shape
    device = prompts.device
    budget, guided = cfg.token_budget(), cfg.guidance != 1.0
    if guided and not tokenizer.styles:
        raise ValueError("guidance needs a model with styles")
    rows = torch.cat([prompts, _unconditioned(prompts, tokenizer)]) if guided else prompts
    # Without stopping at EOS, EOS is never sampled (the decoder would drop everything after it).
    extra = {"plan": plan} if plan is not None else {}
    if getattr(tokenizer, "has_instruments", False) and cfg.program_list() is not None:
        extra["programs"] = cfg.program_list()
    if getattr(tokenizer, "has_bars", False) and cfg.constrained:  # lengths in bars, kept by the grammar
        extra.update(bars=cfg.bars, seconds=cfg.seconds, fixed_meter=cfg.meter is not None or cfg.tempo is not None)
    grammar = tokenizer.grammar(b, device, cfg.constrained, cfg.max_polyphony or None, allow_eos=cfg.stop_at_eos,
                                max_note_seconds=cfg.max_note_seconds or None, **extra)
    grammar.observe(prompts)
    window = _Window(model, rows.shape[0], cfg.use_cache, slide if slide is not None else default_slide(model),
                     keep=len(tokenizer.window_prefix(None)), decoder=decoder)
    if decoder is not None:
        _check_decoder(decoder, model, rows.shape[0])
    # One preallocated buffer for prompt + new tokens: no per-step concatenation or Python lists.
    seq = torch.full((rows.shape[0], t0 + budget), tokenizer.pad_id, dtype=torch.long, device=device)
    seq[:, :t0] = rows
    u = _uniforms(b, budget, device, generator, seeds).t().contiguous()  # u[step]: one per row
    stop = _Stop(tokenizer, b, device, cfg.stop_at_eos, cfg.seconds, grammar)
    draw = _Draw(b, cfg, decoder)
    n_new, n = t0, t0
    for step in range(budget):
        drawn = draw(window, seq[:, :n], n_new, grammar.allowed(), u[step])
        nxt = torch.where(stop.done, tokenizer.pad_id, drawn) if stop.can_stop else drawn
        grammar.observe(nxt[:, None])
        seq[:, n] = nxt.repeat(2) if guided else nxt
        n, n_new = n + 1, 1
        if on_token is not None:
            on_token(step + 1, seq[:b, t0:n])
        if stop.update(nxt):
            break
    out = []
    for row in seq[:b, t0:n].tolist():
        if cfg.stop_at_eos and tokenizer.eos_id in row:
            row = row[:row.index(tokenizer.eos_id) + 1]
        while row and row[-1] == tokenizer.pad_id:  # rows that stopped early (time budget)
            row.pop()
        out.append(row)
    return grammar.close(out) if cfg.constrained else out


def _check_decoder(decoder, model, rows: int) -> None:
    """Refuse a compiled step made for another model or batch; reset its cache for a new batch."""
    if decoder.model is not model:
        raise ValueError("the step decoder was made for another model")
    if decoder.cache.k.shape[1] != rows:
        raise ValueError(f"the step decoder is for {decoder.cache.k.shape[1]} rows; this call has {rows} "
                         "(guidance doubles the rows)")
    decoder.reset()


class _Draw:
    """The next token of every row: the model's logits, classifier-free guidance, the grammar's
    mask and the filters, then an inverse-CDF draw from the row's uniform. With plain sampling (no
    guidance, top-k or top-p) and a step that draws (`StepDecoder.draws`), the compiled step does
    all of it in its one native call; otherwise, and for prompts and window slides, it is done here."""

    def __init__(self, b: int, cfg: SamplingConfig, decoder) -> None:
        self.b, self.cfg = b, cfg
        plain = cfg.guidance == 1.0 and not cfg.top_k and (cfg.top_p is None or cfg.top_p >= 1.0)
        self.in_step = plain and decoder is not None and decoder.draws
        self.t = torch.tensor(float(cfg.temperature))

    def __call__(self, window: _Window, seq: torch.Tensor, n_new: int, allowed: torch.Tensor,
                 u: torch.Tensor) -> torch.Tensor:
        if self.in_step:
            logits, drawn = window.next_token(seq, n_new, allowed, u, self.t)
            if drawn is not None:
                return drawn
        else:
            logits = window.next_logits(seq, n_new)
        cfg = self.cfg
        if cfg.guidance != 1.0:
            cond, uncond = logits[:self.b].float(), logits[self.b:].float()
            logits = uncond + cfg.guidance * (cond - uncond)
        logits = filter_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p, allowed)
        return inverse_cdf(torch.softmax(logits, dim=-1), u)[:, 0]


def _unconditioned(prompts: torch.Tensor, tokenizer) -> torch.Tensor:
    """The prompts with NO_STYLE where their style token is (each prompt starts with it)."""
    out = prompts.clone()
    out[:, 0] = tokenizer.no_style_id
    return out


class _Stop:
    """Which rows are finished: an EOS, or (for tokenizers with a clock) enough seconds of music, or
    where the grammar keeps the length (bars), the length it says each row has reached."""

    def __init__(self, tokenizer, b: int, device, at_eos: bool, seconds: float | None, grammar=None):
        self.eos, self.at_eos, self.seconds = tokenizer.eos_id, at_eos, seconds
        self.grammar = grammar if getattr(grammar, "has_length", False) else None
        self.done = torch.zeros(b, dtype=torch.bool, device=device)
        exact = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        self.clock = torch.zeros(b, dtype=exact, device=device)
        secs = tokenizer.token_seconds() if seconds is not None and self.grammar is None else None
        self.secs = torch.as_tensor(secs, dtype=exact, device=device) if secs is not None else None
        self.can_stop = at_eos or self.secs is not None or self.grammar is not None  # else no row finishes early

    def update(self, nxt: torch.Tensor) -> bool:
        """Take in the tokens just drawn; True when every row is finished."""
        if self.at_eos:
            self.done |= nxt == self.eos
        if self.secs is not None:
            self.clock += self.secs[nxt]
            self.done |= self.clock >= self.seconds - 1e-9
        if self.grammar is not None:
            self.done |= self.grammar.finished()
        return self.can_stop and bool(self.done.all())
