"""Build, cache and load the ahead-of-time compiled decode step (`cadenza.generation.static`).

A package is specific to the weights, the batch size, the code of the step, the PyTorch version
and the CPU, so its file name is a hash of all of them; it lives in ``$CADENZA_CACHE/decode``
(default ``~/.cache/cadenza/decode``) and is written atomically. Building one takes tens of seconds
on 2 cores (AOTInductor generates and compiles C++); loading one takes milliseconds. Where no C++
compiler is found, or the build fails, callers fall back to eager decoding with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from cadenza.generation import filters, kernel, static

_LOADED: dict[str, Callable] = {}
_LOCK = threading.Lock()
_BUILD_LOCK = threading.Lock()
_WEIGHTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> hash of its weights
_FAILED: set[str] = set()
build_seconds: dict[str, float] = {}  # package key -> seconds its build took in this process
# freezing: the weights become constants, so the linear layers can use prepacked kernels.
# max_autotune with the CPP backend: Inductor generates AVX-512/AVX2 GEMM micro-kernels for each
# linear layer's shape and times their blockings. At one row per token they beat oneDNN by a wide
# margin (docs/benchmarks.md, "Generation speed"). oneDNN stays out of the race where Inductor has a
# vector ISA: timed on a busy 2-core machine, the pick between the two flipped from build to build,
# and the packages with oneDNN layers decoded batch 8 more slowly. Without one (no AVX2) oneDNN is all
# there is. About 20 s of compile time, once.
INDUCTOR_CONFIGS = {"freezing": True, "max_autotune": True, "max_autotune_report_choices_stats": False}
GEMM_BACKENDS = {"vector ISA": "CPP", "no vector ISA": "CPP,ATEN"}  # max_autotune_gemm_backends


def inductor_configs() -> dict:
    """INDUCTOR_CONFIGS with this machine's GEMM_BACKENDS. Only a build calls it: it imports
    Inductor, which takes seconds, and loading a package must not (the key hashes the rule and the
    CPU that decides it)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = "vector ISA" if pick_vec_isa() else "no vector ISA"
    return {**INDUCTOR_CONFIGS, "max_autotune_gemm_backends": GEMM_BACKENDS[isa]}


def cache_dir() -> Path:
    from cadenza.env.record import cache_dir as root

    return root() / "decode"


def available() -> str | None:
    """None when the compiled step can be built here, else why not (for `doctor` and warnings)."""
    if os.environ.get("CADENZA_NO_COMPILE"):
        return "CADENZA_NO_COMPILE is set"
    if sys.platform == "win32":
        return "not built on Windows"
    if not _compiler(os.environ.get("CXX")):
        return "no C++ compiler (install g++ or clang++)"
    return None


def unavailable_for(model) -> str | None:
    """None when `model` can decode through a compiled step here, else why not (the machine's reason
    first, then the model's: a GPU, bf16 weights, an LSTM)."""
    return available() or static.unsupported(model)


@lru_cache(maxsize=None)
def _compiler(cxx: str | None) -> str | None:
    """The C++ compiler Inductor will find (searched once per $CXX, not at every generation)."""
    return shutil.which(cxx) if cxx else next((w for c in ("g++", "clang++", "c++") if (w := shutil.which(c))), None)


def package_key(model, batch: int, fused: bool = False) -> str:
    """A hash of everything the compiled code depends on (`fused`: the step calls the attention kernel)."""
    h = hashlib.sha256(_weights_hash(model).encode())
    h.update(f"kernel {kernel.fingerprint()}".encode() if fused else b"inductor attention")
    h.update(json.dumps(model.config.__dict__, sort_keys=True, default=str).encode())
    h.update(json.dumps([INDUCTOR_CONFIGS, GEMM_BACKENDS], sort_keys=True).encode())
    h.update(f"{_step_code()}|{batch}|{torch.__version__}|{platform.machine()}|{_cpu_id()}".encode())
    return h.hexdigest()[:24]


@lru_cache(maxsize=None)
def _step_code() -> str:
    """A hash of the step's source (the step, its draw, the kernel's schema), read once: a package
    built from other code is not reused."""
    h = hashlib.sha256()
    for module in (static, filters, kernel):
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()


def _weights_hash(model) -> str:
    """Hashed once per model object and parameter version: a server asks for every job."""
    params = list(model.parameters())
    # Weights made under inference mode carry no version counter: those are hashed at every call.
    versions = None if any(p.is_inference() for p in params) else tuple(p._version for p in params)
    cached = _WEIGHTS.get(model)
    if versions is not None and cached and cached[0] == versions:
        return cached[1]
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    _WEIGHTS[model] = (versions, h.hexdigest())
    return h.hexdigest()


def _cpu_id() -> str:
    from cadenza.env.record import cpu_info

    info = cpu_info()
    return f"{info['model']}|{','.join(info['isa'])}"


def build(model, batch: int, path: Path, fused: bool = False) -> None:
    """Export the step for `batch` rows with the cache length dynamic, compile it to `path`
    (`fused`: attending through the native kernel, which must be loaded)."""
    cfg = model.config
    cache = model.new_cache(batch)
    n = torch.export.Dim("cached", min=1, max=cfg.context - 1)
    draw = static.idle_draw(batch, cfg.vocab_size)
    args = (torch.zeros(batch, 1, dtype=torch.long), cache.k[:, :, :, :2], cache.v[:, :, :, :2], *draw)
    with torch.no_grad():
        step = static.DecodeStep(model, fused, draw=True)
        program = torch.export.export(step, args, dynamic_shapes=({}, {3: n}, {3: n}, {}, {}, {}))
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.pt2")
        try:
            with _quiet_autotune():
                torch._inductor.aoti_compile_and_package(program, package_path=str(tmp),
                                                         inductor_configs=inductor_configs())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


@contextmanager
def _quiet_autotune():
    """Inductor prints a table of kernel timings for every autotuned layer to stderr: noise for a
    user waiting on `cadenza generate`. The switch is a module global, restored afterwards."""
    import torch._inductor.select_algorithm as sa

    before = getattr(sa, "PRINT_AUTOTUNE", True)
    sa.PRINT_AUTOTUNE = False
    try:
        with warnings.catch_warnings():  # and its benchmarking calls a deprecated storage API
            warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
            yield
    finally:
        sa.PRINT_AUTOTUNE = before


def load(model, batch: int, *, build_missing: bool = True, quiet: bool = False,
         fused_attention: bool = True) -> Callable | None:
    """The compiled step for (model, batch): from memory, from the disk cache, or built now (when
    `build_missing`). None when it is not available (the caller decodes eagerly). With
    `fused_attention` (the default) its attention runs in the native kernel where that is built."""
    if unavailable_for(model):
        return None
    # a package that calls the kernel needs it loaded: loaded (or built) before the package
    fused = fused_attention and kernel.ready(build=build_missing, quiet=quiet)
    key = package_key(model, batch, fused)
    with _LOCK:  # held only for lookups: a job asking while another thread builds never waits
        found, failed = _LOADED.get(key), key in _FAILED
    if found is not None:
        return found
    path = cache_dir() / f"step-{key}.pt2"
    if not failed and not path.exists():
        if not build_missing:
            return None
        with _BUILD_LOCK:  # one build at a time; a second caller finds the file the first wrote
            failed = not (path.exists() or _build(model, batch, path, key, quiet, fused))
    if failed:  # with the kernel it did not build; with Inductor's own attention it may (outside the lock)
        return load(model, batch, build_missing=build_missing, quiet=quiet, fused_attention=False) if fused else None
    fn = _load_package(path)
    with _LOCK:
        return _LOADED.setdefault(key, fn)


class _Runner:
    """Calls a compiled package's C++ runner directly with the step's tensors. PyTorch's
    Python wrapper (`aoti_load_package`) imports Inductor (about 1 s) and rebuilds its input and
    output tree specs at every call (~40 us a token); the step's signature never changes.

    The caches must be views of a full-context `KVCache` made like the build's (as `StaticDecoder`
    passes them): the compiled kernels index with the strides seen at build time and check nothing,
    so a contiguous copy of a slice would be read wrongly (found when benchmarking ONNX Runtime).
    The other inputs (ids, the grammar's mask, the uniforms) must be contiguous."""

    def __init__(self, loader):
        self.loader = loader

    def __call__(self, *args: torch.Tensor):
        return tuple(self.loader.boxed_run(list(args)))


def _load_package(path: Path):
    loader_cls = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader_cls is None:  # a PyTorch without the private loader: the public, slower wrapper
        return torch._inductor.aoti_load_package(str(path))
    return _Runner(loader_cls(str(path), "model", False, 1, -1))


def _build(model, batch: int, path: Path, key: str, quiet: bool, fused: bool) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"compiling the decode step for batch {batch} (once; cached in {path.parent}) ...",
              file=sys.stderr, flush=True)
    t = time.perf_counter()
    try:
        build(model, batch, path, fused)
    except Exception as e:  # Inductor failures come in many types; eager still works
        with _LOCK:
            _FAILED.add(key)
        warnings.warn(f"could not compile the decode step ({type(e).__name__}: {str(e)[:200]}); "
                      "decoding eagerly", RuntimeWarning, stacklevel=3)
        return False
    build_seconds[key] = time.perf_counter() - t
    return True


def decoder(model, batch: int, *, build_missing: bool = True, quiet: bool = False,
            fused_attention: bool = True) -> "static.StaticDecoder | None":
    """A `StaticDecoder` on the compiled step, or None where it does not apply."""
    fn = load(model, batch, build_missing=build_missing, quiet=quiet, fused_attention=fused_attention)
    return static.StaticDecoder(model, batch, fn, draws=True) if fn is not None else None
