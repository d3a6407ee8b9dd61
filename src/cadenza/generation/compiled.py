"""The compiled decode step: `step.DecodeStep` compiled ahead of time by AOTInductor, cached, loaded.

A package is specific to the weights, the batch size, the step's code, the PyTorch version and the
CPU, so its file name is a hash of all of them; it lives in ``$CADENZA_CACHE/decode`` (default
``~/.cache/cadenza/decode``) and is written atomically. Building one takes tens of seconds
(AOTInductor generates and compiles C++); loading one takes milliseconds. Where no C++ compiler is
found, or the build fails, callers decode eagerly (a failed build warns).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import torch

from cadenza.env.probes import StageProbe
from cadenza.generation import filters, kernel, step, toolchain
from cadenza.models import attention, transformer

_LOADED: dict[str, Callable] = {}
_LOCK = threading.Lock()
_BUILD_LOCK = threading.Lock()
_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> hash of its weights
_FAILED: set[str] = set()
# freezing: the weights become constants, so the linear layers can use prepacked kernels.
# max_autotune with the CPP backend: Inductor generates a GEMM micro-kernel for each linear layer's
# shape and times its blockings; oneDNN joins the race only where Inductor has no vector ISA (why:
# docs/generation.md, "How the compiled decode step got here").
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
    return toolchain.cache_dir("decode")


def unavailable_reason() -> str | None:
    """None when the compiled decode step can be built on this machine, else why not."""
    return toolchain.unavailable_reason()



def unavailable_for(model) -> str | None:
    """None when `model` can decode through the compiled decode step here, else why not (the
    machine's reason first, then the model's: a GPU, bf16 weights, an LSTM)."""
    return unavailable_reason() or step.unsupported(model)


def package_key(model, batch: int, attention_kernel: bool = False) -> str:
    """A hash of everything the compiled code depends on (`attention_kernel`: the step calls it)."""
    h = hashlib.sha256(_weights_hash(model).encode())
    h.update(f"kernel {kernel.fingerprint()}".encode() if attention_kernel else b"inductor attention")
    h.update(json.dumps(model.config.__dict__, sort_keys=True, default=str).encode())
    h.update(json.dumps([INDUCTOR_CONFIGS, GEMM_BACKENDS], sort_keys=True).encode())
    h.update(f"{_step_code()}|{batch}|{torch.__version__}|{platform.machine()}|{toolchain.cpu_id()}".encode())
    return h.hexdigest()[:24]


@cache
def _step_code() -> str:
    """A hash of the step's source (the model's step, the decoder around it, its draw, the kernel's
    schema), read once: a package built from other code is not reused."""
    h = hashlib.sha256()
    for module in (attention, transformer, step, filters, kernel):
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


def build(model, batch: int, path: Path, attention_kernel: bool = False) -> None:
    """Export the step for `batch` rows with the cache length dynamic, compile it to `path`
    (`attention_kernel`: attending through the kernel, which must be loaded)."""
    cfg = model.config
    cache = model.new_cache(batch)
    n = torch.export.Dim("cached", min=1, max=cfg.context - 1)
    draw = step.idle_draw(batch, cfg.vocab_size)
    args = (torch.zeros(batch, 1, dtype=torch.long), cache.k[:, :, :, :2], cache.v[:, :, :, :2], *draw)
    with torch.no_grad():
        program = torch.export.export(step.DecodeStep(model, attention_kernel, draw=True), args,
                                      dynamic_shapes=({}, {3: n}, {3: n}, {}, {}, {}))
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
         attention_kernel: bool = True) -> Callable | None:
    """The compiled decode step for (model, batch): from memory, from the disk cache, or built now
    (when `build_missing`). None when it is not available (the caller decodes eagerly). With
    `attention_kernel` (the default) its attention runs in the attention kernel where that is built."""
    if unavailable_for(model):
        return None
    # a package that calls the kernel needs it loaded: loaded (or built) before the package
    with_kernel = attention_kernel and kernel.ready(build=build_missing, quiet=quiet)
    key = package_key(model, batch, with_kernel)
    with _LOCK:  # held only for lookups: a job asking while another thread builds never waits
        found, failed = _LOADED.get(key), key in _FAILED
    if found is not None:
        return found
    path = cache_dir() / f"step-{key}.pt2"
    if not failed and not path.exists():
        if not build_missing:
            return None
        with _BUILD_LOCK:  # one build at a time; a second caller finds the file the first wrote
            failed = not (path.exists() or _build(model, batch, path, key, quiet, with_kernel))
    if failed:  # with the kernel it did not build; with Inductor's own attention it may (outside the lock)
        return load(model, batch, build_missing=build_missing, quiet=quiet, attention_kernel=False) \
            if with_kernel else None
    fn = _load_package(path)
    with _LOCK:
        return _LOADED.setdefault(key, fn)


class _Runner:
    """Calls a package's C++ runner directly with the step's tensors: the step's signature never
    changes, so PyTorch's Python wrapper (`aoti_load_package`), which imports Inductor and rebuilds
    its input and output specs at every call, is skipped.

    The caches must be views of a full-context `KVCache` made like the build's (as `StepDecoder`
    passes them): the compiled code indexes with the strides seen at build time and checks nothing.
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


def _build(model, batch: int, path: Path, key: str, quiet: bool, attention_kernel: bool) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"compiling the decode step for batch {batch} (once; cached in {path.parent}) ...",
              file=sys.stderr, flush=True)
    try:
        build(model, batch, path, attention_kernel)
    except Exception as e:  # Inductor failures come in many types; eager still works
        with _LOCK:
            _FAILED.add(key)
        warnings.warn(f"could not compile the decode step ({type(e).__name__}: {str(e)[:200]}); "
                      "decoding eagerly", RuntimeWarning, stacklevel=3)
        return False
    return True


def decoder(model, batch: int, *, build_missing: bool = True, quiet: bool = False,
            attention_kernel: bool = True) -> step.StepDecoder | None:
    """A `StepDecoder` on the compiled decode step, or None where it does not apply."""
    fn = load(model, batch, build_missing=build_missing, quiet=quiet, attention_kernel=attention_kernel)
    return step.StepDecoder(model, batch, fn, draws=True) if fn is not None else None


def probe() -> dict:
    """For `cadenza doctor`: whether `cadenza generate` can use the compiled decode step here, how
    many packages are cached, and the attention kernel's state."""
    folder = cache_dir()
    return {"unavailable": unavailable_reason(), "cache": str(folder),
            "packages": len(list(folder.glob("step-*.pt2"))) if folder.is_dir() else 0,
            "attention_kernel": kernel.unavailable_reason() or ("built" if kernel.library_path().exists() else
                                                                "not built yet (built with the first compiled step)")}


def _rows(found: dict) -> list[tuple[str, str]]:
    """`probe`'s record as rows of doctor's table."""
    if found["unavailable"]:
        return [("compiled decode", f"no: {found['unavailable']} (generation decodes eagerly)")]
    return [("compiled decode", f"yes ({found['packages']} built, in {found['cache']})"),
            *([("attention kernel", found["attention_kernel"])] if found.get("attention_kernel") else [])]


DOCTOR_PROBE = StageProbe("compiled_decode", probe, _rows)  # what doctor asks generation (passed in by the caller)
