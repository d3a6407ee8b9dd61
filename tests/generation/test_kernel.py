"""The attention kernel against the arithmetic it replaces (`models.attention.cache_attention`).

It reads the cache through its strides, so it is checked on views of a full-context cache (as the
decode step passes them), for head sizes on its vector paths and off them, with and without
relative attention's distance embeddings, from one cached position to many.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cadenza.generation import kernel
from cadenza.generation.step import DecodeStep
from cadenza.models.attention import cache_attention


@pytest.fixture(scope="module")
def op(compile_here):
    if reason := kernel.unavailable_reason():
        pytest.skip(f"attention kernel unavailable: {reason}")
    assert kernel.ready(), kernel.unavailable_reason()
    return torch.ops.cadenza.decode_attention


@pytest.mark.parametrize("head_dim", [16, 64, 24])  # 24: not a whole number of vectors
@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("n", [1, 17, 200])
def test_kernel_matches_the_inductor_arithmetic_on_cache_views(op, head_dim, relative, n):
    g = torch.Generator().manual_seed(n + head_dim)
    b, h, context, layers = 3, 4, 256, 2
    k_full = torch.randn(layers, b, h, context, head_dim, generator=g)
    v_full = torch.randn(layers, b, h, context, head_dim, generator=g)
    kc, vc = k_full.narrow(3, 0, n)[1], v_full.narrow(3, 0, n)[1]  # strided, as the step slices them
    q, k_self, v = (torch.randn(b, h, head_dim, generator=g) for _ in range(3))
    rel = torch.randn(h, context, head_dim, generator=g) if relative else None
    got = op(q, kc, vc, rel, k_self, v)
    assert got.shape == (b, h, head_dim)
    torch.testing.assert_close(got, cache_attention(q, kc, vc, rel, k_self, v), atol=1e-5, rtol=1e-5)


def test_kernel_rejects_what_it_cannot_read(op):
    q = torch.randn(1, 2, 8)
    kc = torch.randn(1, 2, 5, 8)
    with pytest.raises(RuntimeError, match="float32"):
        op(q.double(), kc.double(), kc.double(), None, q.double(), q.double())
    with pytest.raises(RuntimeError, match="contiguous"):
        op(q, kc.transpose(2, 3).contiguous().transpose(2, 3), kc, None, q, q)


@pytest.mark.parametrize("attention", ["relative", "rope"])
def test_a_step_through_the_kernel_gives_the_step_through_inductor_arithmetic(op, attention):
    from cadenza.models import build_model
    from cadenza.models.config import ModelConfig

    torch.manual_seed(0)
    m = build_model(ModelConfig(attention=attention, vocab_size=391, d_model=64, n_layers=2, n_heads=2,
                                d_ff=128, context=64, dropout=0.0)).eval()
    cache = m.new_cache(2)
    cache.k.normal_()
    cache.v.normal_()
    ids = torch.tensor([[5], [7]])
    with torch.inference_mode():
        for n in (1, 30, 63):
            k, v = cache.k[:, :, :, :n], cache.v[:, :, :, :n]
            for a, b in zip(DecodeStep(m, attention_kernel=True)(ids, k, v),
                            DecodeStep(m, attention_kernel=False)(ids, k, v)):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.fixture
def fresh(compiling, monkeypatch):
    """As in a new process: no kernel loaded or failed yet, an empty cache (returned)."""
    monkeypatch.setattr(kernel, "_STATE", {})
    return compiling


def test_a_failed_build_is_reported_once_and_the_step_keeps_inductors_loops(fresh, monkeypatch):
    cxx = fresh / "bin" / "c++"  # a compiler that writes part of its output, then fails
    cxx.parent.mkdir()
    cxx.write_text('#!/bin/sh\nwhile [ "$#" -gt 0 ]; do [ "$1" = -o ] && echo half > "$2"; shift; done\n'
                   'echo "error: out of memory" >&2; exit 1\n')
    cxx.chmod(0o755)
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    pick_vec_isa()  # picked once per process with a working compiler, as when a step was built before
    monkeypatch.setenv("CXX", str(cxx))
    with pytest.warns(RuntimeWarning, match="could not build the attention kernel: error: out of memory"):
        assert not kernel.ready()
    assert "could not build" in kernel.unavailable_reason()
    assert not kernel.ready()  # not retried
    assert not list(fresh.rglob("*.so")) and not list(fresh.rglob(".*tmp"))  # nothing half-written left


def test_no_working_compiler_at_all_is_reported_not_raised(fresh, monkeypatch):
    monkeypatch.setattr("torch._inductor.cpu_vec_isa.pick_vec_isa", lambda: (_ for _ in ()).throw(
        RuntimeError("No working C++ compiler found")))  # what Inductor raises for a broken $CXX
    with pytest.warns(RuntimeWarning, match="could not build the attention kernel: .*No working C"):
        assert not kernel.ready()


def test_a_damaged_library_in_the_cache_is_reported_and_removed(fresh, monkeypatch):
    # as in a fresh process, whether or not another test loaded the kernel into this one
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda op, key: False)
    path = kernel.library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")
    with pytest.warns(RuntimeWarning, match="could not load the attention kernel"):
        assert not kernel.ready()
    assert not path.exists()  # the next process builds it again


def test_without_build_a_missing_kernel_is_not_built(fresh):
    assert not kernel.ready(build=False)
    assert not (fresh / "kernels").exists()


def test_importing_the_compiled_decode_step_registers_nothing_until_first_use():
    """Importing a module has no side effect: no operator defined, no environment changed (in a
    fresh process); the operator is defined once a step that attends through it is made."""
    code = ("import os, torch\n"
            "before = dict(os.environ)\n"
            "import cadenza, cadenza.cli.doctor, cadenza.env.doctor\n"
            "from cadenza.generation import compiled, kernel, step, toolchain\n"
            "assert dict(os.environ) == before, 'an import changed the environment'\n"
            "assert not hasattr(torch.ops.cadenza, 'decode_attention'), 'defined at import'\n"
            "from cadenza.models import build_model\n"
            "from cadenza.models.config import ModelConfig\n"
            "m = build_model(ModelConfig(vocab_size=391, d_model=16, n_layers=1, n_heads=2, d_ff=32, context=16))\n"
            "step.DecodeStep(m.eval(), attention_kernel=True)\n"
            "assert hasattr(torch.ops.cadenza, 'decode_attention'), 'not defined on first use'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
