"""Models: relative attention vs a naive reference, KV cache equivalence, causality, learning."""

from __future__ import annotations

import math

import pytest
import torch

from cadenza.models import build_model
from cadenza.models.attention import blockwise_attention
from cadenza.models.config import ModelConfig

VARIANTS = [("transformer", "relative"), ("transformer", "rope"), ("transformer", "absolute"), ("lstm", "relative")]


def small(model="transformer", attention="relative", **kw) -> ModelConfig:
    base = dict(model=model, attention=attention, vocab_size=50, context=32, d_model=32, n_layers=2, n_heads=4,
                d_ff=64, dropout=0.0, embed_dim=16, lstm_hidden=32, lstm_layers=2, attn_chunk=8)
    base.update(kw)
    return ModelConfig(**base)


def naive_relative_attention(q, k, v, rel):
    """O(L^2 D): gather an embedding for every (query, key) pair, as the Music Transformer paper's
    first formulation (Shaw et al. 2018) does."""
    b, h, t, d = q.shape
    s = k.shape[-2]
    past = s - t
    i = torch.arange(past, s)[:, None]
    j = torch.arange(s)[None, :]
    dist = (i - j).clamp(min=0)  # (t, s)
    r = rel[:, dist]  # (h, t, s, d): the O(L^2 D) tensor skewing avoids
    srel = torch.einsum("bhtd,htsd->bhts", q, r)
    logits = (q @ k.transpose(-1, -2) + srel) / math.sqrt(d)
    logits = logits.masked_fill(j > i, float("-inf"))
    return torch.softmax(logits, -1) @ v


@pytest.mark.parametrize("t,s,chunk", [(16, 16, 0), (16, 16, 5), (1, 12, 0), (7, 19, 3), (64, 64, 16)])
def test_skewed_relative_attention_equals_naive_reference_float64(t, s, chunk):
    g = torch.Generator().manual_seed(t * 100 + s)
    q = torch.randn(2, 3, t, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 3, s, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 3, s, 8, dtype=torch.float64, generator=g)
    rel = torch.randn(3, 80, 8, dtype=torch.float64, generator=g, requires_grad=True)
    fast = blockwise_attention(q, k, v, rel, chunk=chunk, checkpoint_blocks=chunk > 0)
    ref = naive_relative_attention(q, k, v, rel)
    assert torch.allclose(fast, ref, atol=1e-12)
    gf = torch.autograd.grad(fast.square().sum(), (q, k, rel))
    gr = torch.autograd.grad(ref.square().sum(), (q, k, rel))
    for a, b in zip(gf, gr):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("model,attention", VARIANTS)
def test_kv_cache_gives_the_same_logits_as_a_full_forward(model, attention):
    torch.manual_seed(0)
    m = build_model(small(model, attention)).double().eval()
    ids = torch.randint(0, 50, (3, 30))
    full, _ = m(ids)
    cache = m.new_cache(3, dtype=torch.float64)
    parts = [m(ids[:, :11], cache=cache)[0]]  # a prompt, then one token at a time, then a chunk
    for i in range(11, 20):
        parts.append(m(ids[:, i:i + 1], cache=cache)[0])
    parts.append(m(ids[:, 20:], cache=cache)[0])
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-10)


@pytest.mark.parametrize("model,attention", VARIANTS)
def test_changing_a_future_token_never_changes_past_logits(model, attention):
    torch.manual_seed(1)
    m = build_model(small(model, attention)).double().eval()
    ids = torch.randint(0, 50, (2, 32))
    other = ids.clone()
    other[:, 20:] = torch.randint(0, 50, (2, 12))
    a, _ = m(ids)
    b, _ = m(other)
    assert torch.allclose(a[:, :20], b[:, :20], atol=1e-12)
    assert not torch.allclose(a[:, 20:], b[:, 20:])


@pytest.mark.parametrize("model,attention",
                         [("transformer", "relative"), ("transformer", "rope"), ("lstm", "relative")])
def test_models_drive_the_loss_near_zero_on_a_repeated_sequence(model, attention):
    torch.manual_seed(0)
    m = build_model(small(model, attention))
    pattern = torch.tensor([3, 7, 7, 12, 40, 2, 9, 30])
    seq = pattern.repeat(5)[None].repeat(4, 1)  # (4, 40): 32 inputs + targets
    x, y = seq[:, :32], seq[:, 1:33]
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(300):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    # the first 8 targets cannot be predicted from less than one period; the rest can
    logits, _ = m(x)
    late = torch.nn.functional.cross_entropy(logits[:, 8:].reshape(-1, 50), y[:, 8:].reshape(-1))
    assert late.item() < 0.05


@pytest.mark.parametrize("attention", ["relative", "rope", "absolute"])
def test_gradient_checkpointing_gives_the_same_gradients(attention):
    torch.manual_seed(0)
    m = build_model(small(attention=attention)).double()
    ids = torch.randint(0, 50, (2, 33))
    _, loss = m(ids[:, :-1], ids[:, 1:])
    plain = torch.autograd.grad(loss, list(m.parameters()))
    m.grad_checkpoint = True
    _, loss = m(ids[:, :-1], ids[:, 1:])
    ckpt = torch.autograd.grad(loss, list(m.parameters()))
    for a, b in zip(plain, ckpt):
        assert torch.allclose(a, b, atol=1e-12)


def test_long_relative_sequences_use_checkpointed_blocks_and_match():
    torch.manual_seed(0)
    cfg = small(context=1100, n_layers=1, d_model=16, n_heads=2, attn_chunk=256)
    m = build_model(cfg).double()
    ids = torch.randint(0, 50, (1, 1100))
    _, loss = m(ids[:, :-1], ids[:, 1:])
    g_blocks = torch.autograd.grad(loss, list(m.parameters()))
    for blk in m.blocks:
        blk.attn.chunk = 0  # one full square, no checkpointing
    _, loss2 = m(ids[:, :-1], ids[:, 1:])
    g_full = torch.autograd.grad(loss2, list(m.parameters()))
    assert torch.allclose(loss, loss2, atol=1e-12)
    for a, b in zip(g_blocks, g_full):
        assert torch.allclose(a, b, atol=1e-10)


def test_layer_checkpointing_computes_long_attention_twice_not_three_times(monkeypatch):
    import cadenza.models.attention as attention

    calls, block = [], attention._relative_block
    monkeypatch.setattr(attention, "_relative_block", lambda *a: calls.append(1) or block(*a))
    m = build_model(small(context=1100, n_layers=1, d_model=16, n_heads=2, attn_chunk=256))
    m.grad_checkpoint = True
    ids = torch.randint(0, 50, (1, 1100))
    _, loss = m(ids[:, :-1], ids[:, 1:])
    forward = len(calls)
    loss.backward()
    assert forward == 5 and len(calls) == 2 * forward  # 1,099 queries in blocks of 256; once more for backward


@pytest.mark.parametrize("kernel", ["sdpa", "blockwise"])
def test_rope_kernels_agree(kernel):
    torch.manual_seed(0)
    ref = build_model(small(attention="rope", attn_kernel="sdpa")).double()
    other = build_model(small(attention="rope", attn_kernel=kernel)).double()
    other.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 50, (2, 32))
    assert torch.allclose(ref(ids)[0], other(ids)[0], atol=1e-10)


def test_bf16_autocast_trains_on_cpu():
    torch.manual_seed(0)
    m = build_model(small())
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    seq = torch.tensor([3, 7, 12, 40]).repeat(9)[None].repeat(4, 1)
    losses = []
    for _ in range(60):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = m(seq[:, :32], seq[:, 1:33])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.5 * losses[0]


def test_flops_per_token_counts_parameters_and_attention():
    m = build_model(small(attention="rope"))
    n = sum(p.numel() for p in m.parameters())
    assert m.flops_per_token(32) == 6 * n + 12 * 2 * 32 * 32


def test_fast_cpu_dropout_drops_the_rounded_fraction_and_keeps_the_expectation():
    from cadenza.models.attention import Dropout

    d = Dropout(0.1)
    x = torch.ones(400_000)
    y = d(x)
    assert abs((y == 0).float().mean().item() - 26 / 256) < 0.003
    assert abs(y.mean().item() - 1.0) < 0.01
    assert torch.equal(d.eval()(x), x)
    g = torch.ones(1000, requires_grad=True)
    d.train()(g).sum().backward()
    grads = g.grad.unique()
    assert grads.numel() == 2 and grads[0] == 0 and grads[1].item() == pytest.approx(256 / 230)


def test_lstm_trains_under_bf16_on_any_cpu(monkeypatch):
    """oneDNN has no bf16 LSTM without native bf16 (AVX2-only CPUs): the cell runs in fp32 there."""
    import cadenza.models.lstm as lstm_module

    for native in (False, True):
        monkeypatch.setattr(lstm_module, "cpu_supports_bf16", lambda: native)
        torch.manual_seed(0)
        m = build_model(ModelConfig(model="lstm", vocab_size=50, embed_dim=16, lstm_hidden=32, dropout=0.0))
        x = torch.randint(0, 50, (2, 12))
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits, loss = m(x, x)
        except RuntimeError as e:  # only a CPU really without bf16 may refuse, and only the native path
            assert native and "primitive descriptor" in str(e)
            continue
        loss.backward()
        assert logits.dtype == torch.bfloat16 and torch.isfinite(loss)
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
        with torch.no_grad():
            ref, _ = m(x)
        assert torch.allclose(logits.float(), ref, atol=0.1)  # the same model, in reduced precision


def test_lstm_cell_runs_in_fp32_where_bf16_autocast_would_make_it_fp16(monkeypatch):
    """cuDNN's RNN autocast hands the cell to fp16 even under bf16, where no grad scaler runs; the
    model sees the dtype and runs the cell in fp32. Faked here: a cell that returns fp16 under autocast."""
    import cadenza.models.lstm as lstm_module

    class HalfUnderAutocast(torch.nn.LSTM):
        def forward(self, x, hx=None):
            half = torch.is_autocast_enabled("cpu")
            with torch.autocast("cpu", enabled=False):
                y, (h, c) = super().forward(x.float(), hx)
            return (y.half(), (h.half(), c.half())) if half else (y, (h, c))

    monkeypatch.setattr(lstm_module, "cpu_supports_bf16", lambda: True)
    m = build_model(ModelConfig(model="lstm", vocab_size=50, embed_dim=16, lstm_hidden=32, dropout=0.0))
    cell = HalfUnderAutocast(16, 32, 2, batch_first=True)
    cell.load_state_dict(m.lstm.state_dict())
    m.lstm = cell
    seen = []
    m.head.register_forward_pre_hook(lambda mod, args: seen.append(args[0].dtype))
    x = torch.randint(0, 50, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = m(x, x)
    loss.backward()
    assert seen == [torch.float32] and logits.dtype == torch.bfloat16  # the head still runs under autocast
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())
