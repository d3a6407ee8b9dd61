"""Batched token-by-token sampling with a KV cache (or the LSTM's carried state).

`generate_ids` continues a batch of prompts token by token. The transformer keeps a static KV
cache; the LSTM carries its (h, c) state. Past the model's context the window slides: when the
cache is full it is refilled with the last ``context - slide`` tokens, and generation goes on.
With ``use_cache=False`` the same windows are recomputed from scratch at every step (how
MusicTransformer-Pytorch samples), which the tests use as the reference.
"""

from __future__ import annotations

import torch

from cadenza.generation.filters import filter_logits


class _Window:
    """Feeds tokens to the model, sliding the context window the same way with or without cache."""

    def __init__(self, model, batch: int, use_cache: bool, slide: int):
        self.model = model
        self.context = model.config.context
        self.is_lstm = model.config.model == "lstm"
        self.use_cache = use_cache
        self.slide = max(1, min(slide, self.context - 1))
        self.start = 0  # index of the first token inside the window
        self.cache = model.new_cache(batch) if use_cache else None

    @torch.no_grad()
    def next_logits(self, seq: torch.Tensor, n_new: int) -> torch.Tensor:
        """Logits for the token after `seq` (B, N); the last `n_new` tokens are not yet fed."""
        n = seq.shape[1]
        if not self.is_lstm and n - self.start > self.context:
            self.start = n - (self.context - self.slide)
            if self.cache is not None:
                self.cache.reset()
                n_new = n - self.start
        if self.cache is None:
            logits, _ = self.model(seq[:, self.start:] if not self.is_lstm else seq)
        else:
            logits, _ = self.model(seq[:, n - n_new:], cache=self.cache)
        return logits[:, -1]


@torch.inference_mode()
def generate_ids(model, prompts: torch.Tensor, max_new_tokens: int, tokenizer, *, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
                 constrained: bool = True, max_polyphony: int | None = None, use_cache: bool = True,
                 stop_at_eos: bool = True, slide: int | None = None,
                 stop_seconds: float | None = None, max_note_seconds: float | None = None) -> list[list[int]]:
    """Continue each prompt (B, T0) by up to `max_new_tokens` sampled tokens.

    Returns the new tokens per sequence (prompt excluded; EOS kept when sampled). With
    `constrained` the tokenizer's grammar masks impossible events and closes open notes. With
    `stop_seconds` (tokenizers with a clock) a sequence stops once its new tokens span that time.
    With `stop_at_eos=False` EOS is masked, so every sample runs to its length.
    """
    model.eval()
    b, t0 = prompts.shape
    device = prompts.device
    # Without stopping at EOS, EOS is never sampled (the decoder would drop everything after it).
    grammar = tokenizer.grammar(b, device, constrained, max_polyphony, allow_eos=stop_at_eos,
                                max_note_seconds=max_note_seconds)
    grammar.observe(prompts)
    window = _Window(model, b, use_cache, slide if slide is not None else model.config.context // 4)
    # One preallocated buffer for prompt + new tokens: no per-step concatenation or Python lists.
    seq = torch.full((b, t0 + max_new_tokens), tokenizer.pad_id, dtype=torch.long, device=device)
    seq[:, :t0] = prompts
    done = torch.zeros(b, dtype=torch.bool, device=device)
    exact = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
    clock = torch.zeros(b, dtype=exact, device=device)
    secs = tokenizer.token_seconds() if stop_seconds is not None else None
    if secs is not None:
        secs = torch.as_tensor(secs, dtype=exact, device=device)
    pad = torch.full((b, 1), tokenizer.pad_id, dtype=torch.long, device=device)
    n_new, n = t0, t0
    for _ in range(max_new_tokens):
        logits = window.next_logits(seq[:, :n], n_new)
        logits = filter_logits(logits, temperature, top_k, top_p, grammar.allowed())
        nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)  # (B, 1)
        nxt = torch.where(done[:, None], pad, nxt)
        grammar.observe(nxt)
        seq[:, n] = nxt[:, 0]
        n += 1
        n_new = 1
        if stop_at_eos:
            done |= nxt[:, 0] == tokenizer.eos_id
        if secs is not None:
            clock += secs[nxt[:, 0]]
            done |= clock >= stop_seconds - 1e-9
        if (stop_at_eos or stop_seconds is not None) and bool(done.all()):
            break
    out = []
    for row in seq[:, t0:n].tolist():
        if stop_at_eos and tokenizer.eos_id in row:
            row = row[:row.index(tokenizer.eos_id) + 1]
        while row and row[-1] == tokenizer.pad_id:  # rows that stopped early (time budget)
            row.pop()
        out.append(row)
    return grammar.close(out) if constrained else out
