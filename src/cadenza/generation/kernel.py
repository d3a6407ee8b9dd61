"""The attention kernel of the compiled decode step: the native operator `cadenza::decode_attention`.

Decoding one token attends over the whole KV cache, and past a few dozen cached positions that is
most of a batched step. Inductor's generic loops for this attention read the cache far below the
machine's memory speed; ``decode_attention.cpp`` reads it once, with vector instructions
(docs/generation.md, "How the compiled decode step got here").

Nothing happens at import. The operator is defined on first use (`define`: its schema and a
shape-only fake, so `torch.export` can trace a step that calls it). Its CPU code is compiled once
per machine and PyTorch version, with the compiler and vector instructions Inductor uses, into
``$CADENZA_CACHE/kernels`` (atomically), and loaded by `ready`. A package built with the kernel
calls it through PyTorch's dispatcher, so it must be loaded first (`compiled.load` sees to that).
Where it cannot be built, the step keeps Inductor's loops, which compute the same thing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import warnings
from functools import cache
from pathlib import Path

import torch

from cadenza.atomic import atomic_path
from cadenza.generation import toolchain

SOURCE = Path(__file__).with_name("decode_attention.cpp")
OP = "cadenza::decode_attention"
SCHEMA = "decode_attention(Tensor q, Tensor kc, Tensor vc, Tensor? rel, Tensor k_self, Tensor v_self) -> Tensor"

_DEFINED: list[torch.library.Library] = []  # kept alive: the op lives as long as its Library
_DEFINE_LOCK = threading.Lock()
_LOCK = threading.Lock()
_STATE: dict[str, str | None] = {}  # "loaded": the library's path once loaded; "failed": why not


def define() -> None:
    """Define the operator in this process (once): before a step that calls it is traced, and
    before its CPU code is registered against it."""
    with _DEFINE_LOCK:
        if _DEFINED:
            return
        lib = torch.library.Library("cadenza", "DEF")
        lib.define(SCHEMA)
        # register_fake is torch >= 2.4's name for 2.3's impl_abstract
        (getattr(torch.library, "register_fake", None) or torch.library.impl_abstract)(OP)(_shape)
        _DEFINED.append(lib)


def _shape(q, kc, vc, rel, k_self, v_self):
    return q.new_empty(q.shape)


def ready(build: bool = True, quiet: bool = True) -> bool:
    """True when the operator's CPU code is loaded in this process: loaded from the disk cache, or
    built first when `build` (about 10 s, once per machine). Without `build` it never waits: a
    server's job asking while its warm-up thread builds gets False at once. A failed build is not
    retried."""
    if _STATE.get("loaded"):
        return True
    if unavailable_reason() or not _LOCK.acquire(blocking=build):
        return False
    try:
        if _STATE.get("loaded") or _STATE.get("failed"):
            return bool(_STATE.get("loaded"))
        path = library_path()
        if not path.exists():
            if not build:
                return False
            if not quiet:
                print(f"compiling the decode attention kernel (once; cached in {path.parent}) ...",
                      file=sys.stderr, flush=True)
            try:
                _compile(path)
            except Exception as e:  # the compiler's error, or Inductor finding no working compiler
                return _fail(f"could not build the attention kernel: {_tail(e)}")
        return _load(path)
    finally:
        _LOCK.release()


def _load(path: Path) -> bool:
    define()
    try:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CPU"):
            torch.ops.load_library(str(path))  # registers the CPU code (once: a second would clash)
    except (OSError, RuntimeError) as e:  # a damaged file, or a torch it was not built against
        path.unlink(missing_ok=True)  # the next process builds it again
        return _fail(f"could not load the attention kernel ({path.name}): {str(e)[:200]}")
    _STATE["loaded"] = str(path)
    return True


def _fail(reason: str) -> bool:
    """Record why the kernel is not used in this process (not retried), and say so once."""
    _STATE["failed"] = reason
    warnings.warn(f"{reason}; the decode step uses Inductor's loops", RuntimeWarning, stacklevel=3)
    return False


def unavailable_reason() -> str | None:
    """None when the kernel can be built here (or already was), else why not (for doctor)."""
    if os.environ.get("CADENZA_NO_KERNEL"):
        return "CADENZA_NO_KERNEL is set"
    return toolchain.unavailable_reason() or _STATE.get("failed")


@cache
def fingerprint() -> str:
    """A hash of the kernel's source: part of a compiled decode step's package key when the step calls it."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def library_path() -> Path:
    """Where the kernel built from this source, for this PyTorch, CPU and compiler, is cached."""
    key = f"{fingerprint()}|{torch.__version__}|{toolchain.cpu_id()}|{_cxx()}"
    return toolchain.cache_dir("kernels") / f"decode_attention-{hashlib.sha256(key.encode()).hexdigest()[:24]}.so"


def _cxx() -> str:
    return toolchain.compiler() or "c++"


def _compile(path: Path) -> None:
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # what Inductor compiles its own kernels for
    from torch.utils.cpp_extension import include_paths

    isa = pick_vec_isa()
    flags = [f"-D{m}" for m in isa.build_macro()] + isa.build_arch_flags().split() if isa else []
    lib = Path(torch.__file__).parent / "lib"
    with atomic_path(path) as tmp:  # the compiler writes a temporary file, renamed only on success
        subprocess.run([_cxx(), "-O3", "-shared", "-fPIC", "-std=c++20", "-fopenmp", "-w",
                        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *flags,
                        *(f"-I{p}" for p in include_paths()), str(SOURCE), "-o", str(tmp),
                        f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu", "-ltorch"],
                       check=True, capture_output=True, text=True, timeout=600)


def _tail(e: Exception) -> str:
    """The last line a failed compiler printed, or the exception."""
    err = getattr(e, "stderr", None) or ""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else f"{type(e).__name__}: {e}"[:200]
