"""The one pinned place: the torch release cadenza is tested with, the CUDA builds it ships, and
which of them cadenza installs by default.

Everything else follows from here: `docker/versions.env` is generated from this module
(`python -m cadenza.env.versions > docker/versions.env`; a test checks they agree), the Makefile
includes that file, compose passes it as build arguments, the Dockerfile's `FROM` lines take them,
and `cadenza doctor` derives its install hints from it at run time (`cadenza.env.cuda`).
"""

from __future__ import annotations

from dataclasses import dataclass

TORCH_VERSION = "2.13.0"
# The default CUDA build. 12.6 runs on the most machines: Linux drivers >= 525.60.13 (13.0 needs
# >= 580) and every GPU from Maxwell to Hopper (P100, V100, T4, A100, L4, H100). Blackwell GPUs
# need 13.0, which the install hint names where it sees one (cadenza.env.cuda.install_hint).
CUDA_VERSION = "12.6"
CUDNN_VERSION = "9"  # the cuDNN major in the official image tags (pytorch/pytorch:...-cudnn9-...)
INDEX_URL = "https://download.pytorch.org/whl/"


@dataclass(frozen=True)
class CudaBuild:
    """One CUDA build of the pinned torch: the oldest Linux driver it runs on and the GPU code it
    carries (`torch.cuda.get_arch_list()` of that build)."""

    cuda: str
    min_driver: str
    archs: tuple[str, ...]
    stable: bool = True

    @property
    def tag(self) -> str:
        """The wheel index's name for it: cu126."""
        return "cu" + self.cuda.replace(".", "")

    @property
    def index_url(self) -> str:
        return INDEX_URL + self.tag


_HOPPER_AND_BLACKWELL = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
# torch 2.13's CUDA builds (pytorch/pytorch RELEASE.md): 12.6 and 13.0 stable, 13.2 experimental.
# There is no 12.8 build of 2.13 (it left the matrix with 2.12).
CUDA_BUILDS = (
    CudaBuild("12.6", "525.60.13", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")),
    CudaBuild("13.0", "580", _HOPPER_AND_BLACKWELL),
    CudaBuild("13.2", "580", _HOPPER_AND_BLACKWELL, stable=False),
)


def env_file() -> str:
    """docker/versions.env, as generated from this module."""
    return ("# Generated from src/cadenza/env/versions.py (python -m cadenza.env.versions > docker/versions.env):\n"
            "# edit that module, not this file. Read by the Makefile, docker/compose.yaml and the Dockerfile.\n"
            f"TORCH_VERSION={TORCH_VERSION}\nCUDA_VERSION={CUDA_VERSION}\nCUDNN_VERSION={CUDNN_VERSION}\n")


if __name__ == "__main__":
    print(env_file(), end="")
