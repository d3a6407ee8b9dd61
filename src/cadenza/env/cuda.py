"""Which CUDA build of torch fits this machine: a GPU against a build's architectures, and the
install line for the pinned torch (`cadenza.env.versions`) that fits the driver and the GPU.

Pure functions of strings and tuples, so `cadenza doctor` can test every case with a faked GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cadenza.env.versions import CUDA_BUILDS, CUDA_VERSION, TORCH_VERSION, CudaBuild

# Integrated (Jetson) GPUs run only code built for exactly their capability; discrete GPUs run
# any code of their major built for the same or a lower minor.
INTEGRATED = {(5, 3), (6, 2), (7, 2), (8, 7)}


def capability(cc: str | Sequence[int]) -> tuple[int, int]:
    """(major, minor) from "8.6" (how doctor reports it) or (8, 6) (torch.cuda.get_device_capability)."""
    if isinstance(cc, str):
        major, _, minor = cc.partition(".")
        return int(major), int(minor or 0)
    return int(cc[0]), int(cc[1])


def _arch_cc(arch: str) -> tuple[str, tuple[int, int], str]:
    """"sm_86" -> ("sm", (8, 6), ""); "compute_120" -> ("compute", (12, 0), ""); "sm_90a" -> (.., "a")."""
    kind, _, code = arch.partition("_")
    digits = code.rstrip("abcdefghijklmnopqrstuvwxyz")
    n = int(digits)
    return kind, (n // 10, n % 10), code[len(digits):]


def runs_on(arch: str, cc: tuple[int, int]) -> bool:
    """Whether code built as `arch` runs on a GPU of capability `cc`.

    sm_XY (machine code) runs on the same major at minor >= Y; sm_XYa (architecture-specific) on
    X.Y only; compute_XY (PTX) is compiled by the driver for any GPU of capability >= X.Y, later
    majors included, at the cost of a slow first launch.
    """
    kind, built, suffix = _arch_cc(arch)
    if kind == "compute":
        return cc >= built
    if suffix == "a" or cc in INTEGRATED or built in INTEGRATED:
        return cc == built
    return cc[0] == built[0] and cc[1] >= built[1]


def arch_problem(cc: str | Sequence[int], arch_list: Iterable[str], name: str = "the GPU") -> str | None:
    """Why this torch build cannot run on a GPU of capability `cc`, or None when it can.

    `arch_list` is the build's `torch.cuda.get_arch_list()`; an empty list (a CPU build, or torch
    that could not say) is no finding here. A V100 (sm_70) on a CUDA 13 build, or a GPU newer than
    a build with no PTX, fails at first use with "no kernel image is available"; this says so before.
    """
    archs = list(arch_list)
    cc = capability(cc)
    if not archs or any(runs_on(a, cc) for a in archs):
        return None
    return (f"{name} (compute capability {cc[0]}.{cc[1]}) cannot run this torch build, which carries code for "
            f"{' '.join(archs)} only: CUDA calls will fail with 'no kernel image is available'")


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def builds_for(cc: str | Sequence[int] | None = None) -> list[CudaBuild]:
    """The stable CUDA builds of the pinned torch that run on a GPU of capability `cc` (any GPU when
    None), the default build first."""
    stable = sorted((b for b in CUDA_BUILDS if b.stable), key=lambda b: b.cuda != CUDA_VERSION)
    if cc is None:
        return stable
    return [b for b in stable if any(runs_on(a, capability(cc)) for a in b.archs)]


def install_hint(driver: str | None = None, cc: str | Sequence[int] | None = None) -> str:
    """The command that installs the pinned torch's CUDA build for this machine.

    The default build (`versions.CUDA_VERSION`) unless the GPU of capability `cc` needs another;
    among those, the first whose driver minimum `driver` meets. When none does, the driver upgrade
    that the oldest-driver build needs.
    """
    fits_gpu = builds_for(cc)
    if not fits_gpu:
        return (f"no stable CUDA build of torch {TORCH_VERSION} runs on compute capability "
                f"{'.'.join(map(str, capability(cc)))}: use a torch release that supports this GPU")
    fits = [b for b in fits_gpu if driver is None or _vtuple(driver) >= _vtuple(b.min_driver)]
    if not fits:
        oldest = min(fits_gpu, key=lambda b: _vtuple(b.min_driver))
        return (f"upgrade the NVIDIA driver to >= {oldest.min_driver} (torch {TORCH_VERSION}'s CUDA "
                f"{oldest.cuda} build needs it)")
    return f"pip uninstall -y torch && pip install torch=={TORCH_VERSION} --index-url {fits[0].index_url}"
