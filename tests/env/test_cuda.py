"""Which CUDA build fits a machine: a GPU against a build's architectures (faked devices and builds),
and the install line derived from the pinned versions."""

from __future__ import annotations

import pytest

from cadenza.env import cuda, versions
from cadenza.env.cuda import arch_problem, install_hint

CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # torch.cuda.get_arch_list() of each build
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


@pytest.mark.parametrize("name, cc, archs", [
    ("Tesla V100-SXM2-16GB", "7.0", CU130),     # Volta left the CUDA 13 builds
    ("NVIDIA GeForce RTX 5090", "12.0", CU126),  # newer than a build with no PTX
    ("NVIDIA B200", (10, 0), CU126),
    ("NVIDIA A100", "8.0", ["sm_86", "sm_90"]),  # machine code runs on its own minor and later ones only
    ("Jetson AGX Orin", "8.7", ["sm_80", "sm_86"]),  # an integrated GPU runs only code built for it
    ("NVIDIA H100", "9.0", ["sm_80", "sm_86"]),  # another major without PTX
])
def test_a_gpu_the_build_has_no_code_for_is_a_problem_that_names_both(name, cc, archs):
    problem = arch_problem(cc, archs, name)
    major_minor = cc if isinstance(cc, str) else f"{cc[0]}.{cc[1]}"
    assert problem is not None and name in problem and major_minor in problem
    assert " ".join(archs) in problem and "no kernel image" in problem


@pytest.mark.parametrize("cc, archs", [
    ("9.0", ["sm_80", "compute_80"]),  # covered by PTX, compiled by the driver at first use
    ("12.1", CU130),                   # same major, later minor
    ("8.6", ["sm_80"]),
    ("10.0", CU130),
    ("7.0", CU126),
    ("9.0", ["sm_90a"]),
    ("7.5", []),                       # a build that lists nothing: no finding here
])
def test_a_gpu_the_build_covers_is_no_problem(cc, archs):
    assert arch_problem(cc, archs) is None


def test_architecture_specific_code_runs_on_its_own_capability_only():
    assert arch_problem("10.0", ["sm_90a"]) is not None
    assert arch_problem("9.0", ["sm_90a"]) is None


def test_the_hint_installs_the_pinned_torch_from_the_pinned_default_build():
    hint = install_hint()
    assert f"torch=={versions.TORCH_VERSION} " in hint
    assert hint.endswith(f"--index-url https://download.pytorch.org/whl/cu{versions.CUDA_VERSION.replace('.', '')}")


def test_the_hint_follows_the_pin(monkeypatch):
    monkeypatch.setattr(cuda, "CUDA_VERSION", "13.0")
    monkeypatch.setattr(cuda, "TORCH_VERSION", "9.9.9")
    assert install_hint("590.48.01", "9.0").endswith("torch==9.9.9 --index-url https://download.pytorch.org/whl/cu130")


def test_every_pinned_build_is_one_torch_ships():
    # torch 2.13: CUDA 12.6 and 13.0 stable, 13.2 experimental; no 12.8 build exists for it
    assert versions.CUDA_VERSION in {b.cuda for b in versions.CUDA_BUILDS if b.stable}
    assert {b.tag for b in versions.CUDA_BUILDS} == {"cu126", "cu130", "cu132"}


@pytest.mark.parametrize("driver, cc, expected", [
    ("535.104.05", "9.0", "whl/cu126"),            # the default build, on a driver most machines have
    ("590.48.01", "7.0", "whl/cu126"),             # a V100 keeps 12.6: the 13.x builds have no sm_70
    ("590.48.01", "12.0", "whl/cu130"),            # Blackwell needs a 13.x build ...
    ("570.86.15", "12.0", "driver to >= 580"),     # ... and its driver
    ("470.57.02", "7.0", "driver to >= 525.60.13"),
    (None, "12.0", "whl/cu130"),
])
def test_the_hint_fits_the_driver_and_the_gpu(driver, cc, expected):
    assert expected in install_hint(driver, cc)


def test_a_gpu_no_stable_build_supports_says_so():
    assert "no stable CUDA build" in install_hint("590.48.01", "3.5")

