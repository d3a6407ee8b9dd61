"""`cadenza doctor`: the real run on this machine, and each diagnosis with its probe faked."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza.cli import doctor as doctor_cli
from cadenza.cli import main
from cadenza.env import doctor
from cadenza.env.doctor import collect, diagnose, exit_code, min_driver
from cadenza.env.probes import Probes, parse_nvidia_smi

REPO = Path(__file__).resolve().parents[2]
GiB = 1 << 30
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # torch.cuda.get_arch_list() of the build


def _gpu(i: int, name: str = "NVIDIA H100 80GB HBM3", cc: str = "9.0") -> dict:
    native = float(cc) >= 8.0
    return {"index": i, "name": name, "capability": cc, "memory_bytes": 80 * GiB, "bf16": native, "tf32": native}


class FakeProbes(Probes):
    """A healthy 2-GPU Linux box; each test breaks one probe by passing an override."""

    def __init__(self, **over):
        self.smoke_calls: list[tuple[str, str]] = []
        self._env = over.pop("env", {"PATH": "/usr/bin"})
        self._smi = over.pop("smi", {"ok": True, "error": None, "gpus": [
            {"driver": "570.86.15", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}] * 2})
        torch = {"installed": True, "version": "2.13.0+cu126", "cuda": "12.6", "hip": None, "cudnn": 91002,
                 "nccl": "2.27.3", "cuda_available": True, "cuda_error": None, "device_count": 2,
                 "gpus": [_gpu(0), _gpu(1)], "arch_list": CU126, "mps": False, "threads": 8}
        torch.update(over.pop("torch", {}))
        self._torch = torch
        self._smoke = over.pop("smoke", None)
        self._shm = over.pop("shm", 8 * GiB)
        self._free = over.pop("free", 500 * GiB)
        self._container = over.pop("container", None)
        self._which = over.pop("which", {"fluidsynth": "/usr/bin/fluidsynth"})
        self._soundfonts = over.pop("soundfonts", ["/usr/share/sounds/sf2/FluidR3_GM.sf2"])
        self._audio = over.pop("audio", "audio: fluidsynth with the SoundFont /usr/share/sounds/sf2/FluidR3_GM.sf2")
        assert not over, over

    def env(self):
        return dict(self._env)

    def which(self, name):
        return self._which.get(name)

    def module_version(self, dist):
        return {"tensorboard": "2.21.0", "miditok": "3.1.0"}.get(dist)

    def nvidia_smi(self, timeout=10.0):
        return self._smi

    def torch_info(self):
        return dict(self._torch)

    def gpu_smoke(self, device, dtype):
        self.smoke_calls.append((device, dtype))
        return self._smoke or {"device": device, "dtype": dtype, "ok": True, "error": None, "alloc_ms": 0.1,
                               "matmul_ms": 0.2, "autocast_step_ms": 1.5}

    def shm_bytes(self):
        return self._shm

    def disk_free(self, path):
        return self._free

    def container(self):
        return self._container

    def soundfonts(self):
        return list(self._soundfonts)

    def audio_backend(self):
        return self._audio

    def cpu(self):
        return {"count": 32, "usable": 32}


def run_doctor(capsys, probes, device="auto", precision=None) -> tuple[int, dict]:
    args = argparse.Namespace(json=True, device=device, precision=precision, no_smoke=False)
    code = doctor_cli.run(args, probes=probes)
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == code
    return code, out


def only(out: dict, code: str) -> dict:
    hits = [d for d in out["diagnoses"] if d["code"] == code]
    assert len(hits) == 1, out["diagnoses"]
    return hits[0]


# --- this machine -------------------------------------------------------------------------------------

def test_this_machine_json_in_process_and_console_script(capsys):
    import torch

    # The real console script runs beside the in-process call: each pays torch's ~1.5 s import.
    proc = subprocess.Popen([sys.executable, "-m", "cadenza", "doctor", "--device", "cpu"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    code = main(["doctor", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["exit_code"] == 0
    assert out["report"]["torch"]["version"] == torch.__version__
    if torch.version.cuda is None and not torch.cuda.is_available():  # the CPU machines CI runs on
        assert out["report"]["build"] == "cpu"
        assert out["report"]["torch"]["gpus"] == [] and out["report"]["smoke"] is None
        assert not [d for d in out["diagnoses"] if d["severity"] == "error"]
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "torch" in stdout and "Diagnoses (device cpu" in stdout and "/dev/shm" in stdout


def test_doctor_summary_is_short_names_the_cpu_and_skips_the_smoke_test():
    probes = FakeProbes()
    s = doctor.doctor_summary(probes)
    assert probes.smoke_calls == [] and json.loads(json.dumps(s)) == s
    assert s["build"] == "cuda 12.6" and s["driver"] == "570.86.15" and len(s["gpus"]) == 2
    real = doctor.doctor_summary()
    assert {"python", "torch", "build", "git_commit", "cpu_count", "cpu", "cpu_isa"} <= set(real)


# --- a healthy GPU box, then one broken probe per test -------------------------------------------------

def test_healthy_gpu_box_passes_and_runs_the_smoke_test(capsys):
    probes = FakeProbes()
    code, out = run_doctor(capsys, probes, device="cuda", precision="bf16")
    assert code == 0 and probes.smoke_calls == [("cuda:0", "bf16")]
    assert {d["code"] for d in out["diagnoses"]} == {"smoke_ok", "ready"}
    assert out["device"] == {"requested": "cuda", "target": "cuda"}


def test_cpu_torch_with_nvidia_gpu(capsys):
    probes = FakeProbes(torch={"version": "2.13.0+cpu", "cuda": None, "cudnn": None, "nccl": None,
                               "cuda_available": False, "device_count": 0, "gpus": []})
    code, out = run_doctor(capsys, probes)
    d = only(out, "cpu_torch_with_gpu")
    assert code == 1 and d["severity"] == "error" and "CPU-only build" in d["message"]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" in d["fix"]
    assert not [x for x in out["diagnoses"] if x["code"] == "no_cuda"]  # the specific cause, not twice
    code, out = run_doctor(capsys, probes, device="cpu")  # deliberately on CPU: only a warning
    assert code == 0 and only(out, "cpu_torch_with_gpu")["severity"] == "warn"


@pytest.mark.parametrize("cuda, driver, need, match", [("12.6", "515.65.01", "525.60.13", None),
                                                       ("11.8", "440.33", "450.80.02", None),
                                                       ("13.0", "575.51.03", "580", "whl/cu126")])
def test_driver_too_old_for_torch_cuda(capsys, cuda, driver, need, match):
    probes = FakeProbes(smi={"ok": True, "error": None, "gpus": [{"driver": driver, "name": "Tesla T4",
                                                                  "memory_mib": 15360}]},
                        torch={"cuda": cuda, "cuda_available": False, "device_count": 0, "gpus": [],
                               "cuda_error": "The NVIDIA driver on your system is too old"})
    code, out = run_doctor(capsys, probes)
    d = only(out, "driver_too_old")
    assert code == 1 and f"driver {driver} is too old for torch's CUDA {cuda} (needs >= {need})" in d["message"]
    assert d["fix"].startswith(f"upgrade the driver to >= {need}")
    # a pinned build the driver runs is named; when none does, upgrading the driver is the one fix
    assert (", or match torch to it: pip uninstall -y torch && pip install torch==2.13.0 --index-url "
            "https://download.pytorch.org/whl/cu126" in d["fix"]) == bool(match)


def test_a_gpu_the_build_has_no_code_for(capsys):
    v100 = [_gpu(0, "Tesla V100-SXM2-16GB", "7.0")]
    cu130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    probes = FakeProbes(smi={"ok": True, "error": None, "gpus": [{"driver": "590.48.01", "name": "Tesla V100",
                                                                  "memory_mib": 16384}]},
                        torch={"version": "2.13.0+cu130", "cuda": "13.0", "device_count": 1, "gpus": v100,
                               "arch_list": cu130})
    code, out = run_doctor(capsys, probes, precision="fp16")
    d = only(out, "arch_unsupported")
    assert code == 1 and d["severity"] == "error" and "GPU 0 (Tesla V100-SXM2-16GB)" in d["message"]
    assert "compute capability 7.0" in d["message"] and "no kernel image" in d["message"]
    assert d["fix"].endswith("--index-url https://download.pytorch.org/whl/cu126")  # 12.6 still has sm_70
    _, out = run_doctor(capsys, FakeProbes(torch={"device_count": 1, "gpus": v100}), precision="fp16")
    assert "arch_unsupported" not in {x["code"] for x in out["diagnoses"]}


def test_min_driver_table():
    assert min_driver("12.6") == min_driver("12.1") == "525.60.13"
    assert min_driver("11.8") == "450.80.02" and min_driver("13.0") == "580" and min_driver("9.0") is None


@pytest.mark.parametrize("cvd", ["", "-1", "7"])
def test_cuda_visible_devices_hides_every_gpu(capsys, cvd):
    probes = FakeProbes(env={"CUDA_VISIBLE_DEVICES": cvd},
                        torch={"cuda_available": False, "device_count": 0, "gpus": []})
    code, out = run_doctor(capsys, probes, device="cuda")
    d = only(out, "cuda_visible_devices_hides_all")
    assert code == 1 and d["severity"] == "error"
    assert f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU (nvidia-smi sees 2)" in d["message"]
    assert "unset CUDA_VISIBLE_DEVICES" in d["fix"] and "CUDA_VISIBLE_DEVICES=0,1" in d["fix"]
    code, out = run_doctor(capsys, probes, device="auto")  # hiding GPUs on purpose is common: warn only
    assert code == 0 and only(out, "cuda_visible_devices_hides_all")["severity"] == "warn"


def test_small_dev_shm(capsys):
    code, out = run_doctor(capsys, FakeProbes(shm=64 << 20))
    d = only(out, "small_shm")
    assert code == 0 and d["severity"] == "warn" and "/dev/shm is 64 MiB" in d["message"]
    assert "--shm-size=8g" in d["fix"] and "--ipc=host" in d["fix"]


def test_nccl_missing_with_many_gpus(capsys):
    code, out = run_doctor(capsys, FakeProbes(torch={"nccl": None}))
    d = only(out, "no_nccl")
    assert code == 0 and d["severity"] == "warn"
    assert "NCCL is unavailable with 2 GPUs" in d["message"] and "bundles NCCL" in d["fix"]
    _, out = run_doctor(capsys, FakeProbes(torch={"nccl": None, "device_count": 1, "gpus": [_gpu(0)]}))
    assert "no_nccl" not in {x["code"] for x in out["diagnoses"]}  # one GPU needs no NCCL


def test_bf16_requested_on_a_gpu_without_it(capsys):
    probes = FakeProbes(smi={"ok": True, "error": None, "gpus": [{"driver": "570.86.15", "name": "Tesla V100",
                                                                  "memory_mib": 16384}]},
                        torch={"device_count": 1, "gpus": [_gpu(0, "Tesla V100-SXM2-16GB", "7.0")]})
    code, out = run_doctor(capsys, probes, precision="bf16")
    d = only(out, "no_bf16")
    assert code == 1 and "compute capability 7.0" in d["message"] and "--precision fp16" in d["fix"]
    assert probes.smoke_calls == [("cuda:0", "bf16")]  # the smoke test tries what was asked for
    code, out = run_doctor(capsys, probes, precision="fp16")
    assert code == 0 and "no_bf16" not in {x["code"] for x in out["diagnoses"]}


def test_bf16_requested_on_a_cpu_without_native_bf16(capsys):
    cpu_box = dict(smi=None, torch={"cuda": None, "cuda_available": False, "device_count": 0, "gpus": [],
                                    "cpu_bf16": False})
    code, out = run_doctor(capsys, FakeProbes(**cpu_box), precision="bf16")
    d = only(out, "no_cpu_bf16")
    assert code == 0 and d["severity"] == "warn" and "no AVX512-BF16 or AMX" in d["message"]
    assert "LSTM" in d["message"] and "--precision fp32" in d["fix"]
    code, out = run_doctor(capsys, FakeProbes(**{**cpu_box, "torch": {**cpu_box["torch"], "cpu_bf16": True}}),
                           precision="bf16")
    assert "no_cpu_bf16" not in {x["code"] for x in out["diagnoses"]}


def test_a_soundfont_path_that_is_not_a_file(capsys):
    code, out = run_doctor(capsys, FakeProbes(env={"CADENZA_SOUNDFONT": "/nowhere/gm.sf2"}, soundfonts=[]))
    d = only(out, "soundfont_missing")
    assert code == 0 and d["severity"] == "warn" and "CADENZA_SOUNDFONT" in d["fix"]


def test_no_soundfont_renderer_means_synthetic_tones(capsys):
    numpy = "audio: the built-in numpy synthesizer (no SoundFont renderer found: pip install midirenderer ...)"
    code, out = run_doctor(capsys, FakeProbes(which={}, soundfonts=[], audio=numpy))
    d = only(out, "no_soundfont_renderer")
    assert code == 0 and d["severity"] == "warn" and "numpy" in d["message"]
    assert d["fix"] == "pip install midirenderer pretty_midi, or apt-get install fluidsynth fluid-soundfont-gm"
    pip_only = "audio: midirenderer with the SoundFont /venv/pretty_midi/TimGM6mb.sf2"
    _, out = run_doctor(capsys, FakeProbes(which={}, soundfonts=[], audio=pip_only))
    assert not [x for x in out["diagnoses"] if x["severity"] == "warn"]  # real instruments from pip alone


def test_the_table_says_which_synthesizer_renders(capsys):
    args = argparse.Namespace(json=False, device="auto", precision=None, no_smoke=False)
    doctor_cli.run(args, probes=FakeProbes())
    assert re.search(r"\nAudio +fluidsynth with the SoundFont /usr/share/sounds/sf2/FluidR3_GM.sf2\n",
                     capsys.readouterr().out)


@pytest.mark.parametrize("container, smi, fix", [
    ("docker", None, "docker run --gpus all"),
    (None, None, "no NVIDIA driver found"),
    (None, {"ok": True, "error": None, "gpus": []}, "check `nvidia-smi`"),
])
def test_cuda_requested_but_unavailable(capsys, container, smi, fix):
    probes = FakeProbes(container=container, smi=smi,
                        torch={"cuda_available": False, "device_count": 0, "gpus": []})
    code, out = run_doctor(capsys, probes, device="cuda")
    d = only(out, "no_cuda")
    assert code == 1 and "--device cuda was requested" in d["message"] and fix in d["fix"]
    assert run_doctor(capsys, probes, device="cpu")[0] == 0


def test_nvidia_smi_failing(capsys):
    smi = {"ok": False, "error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
           "gpus": []}
    probes = FakeProbes(smi=smi, torch={"cuda_available": False, "device_count": 0, "gpus": []})
    code, out = run_doctor(capsys, probes, device="cuda")
    assert code == 1 and "couldn't communicate" in only(out, "nvidia_smi_failed")["message"]


def test_gpu_that_cannot_be_queried(capsys):
    probes = FakeProbes(torch={"gpus": [], "cuda_error": "CUDA error: uncorrectable ECC error encountered"})
    code, out = run_doctor(capsys, probes)
    assert code == 1 and "ECC" in only(out, "cuda_failing")["message"] and probes.smoke_calls == []


def test_gpu_smoke_test_failure_blocks(capsys):
    smoke = {"device": "cuda:0", "dtype": "bf16", "ok": False, "error": "RuntimeError: CUDA error: out of memory"}
    code, out = run_doctor(capsys, FakeProbes(smoke=smoke))
    assert code == 1 and "out of memory" in only(out, "smoke_failed")["message"]


def test_low_disk(capsys):
    code, out = run_doctor(capsys, FakeProbes(free=1 * GiB))
    assert code == 0 and {d["code"] for d in out["diagnoses"]} >= {"low_disk"}


def test_torch_missing_is_an_error():
    report = collect(FakeProbes(), smoke=False)
    report["torch"] = {"installed": False, "error": "No module named 'torch'"}
    found = diagnose(report)
    assert exit_code(found) == 1 and found[0].code == "no_torch"


# --- parsing and formatting --------------------------------------------------------------------------

def test_parse_nvidia_smi():
    text = "570.86.15, NVIDIA H100 80GB HBM3, 81559 MiB\n570.86.15, NVIDIA H100 80GB HBM3, 81559 MiB\n"
    assert parse_nvidia_smi(text) == [{"driver": "570.86.15", "name": "NVIDIA H100 80GB HBM3",
                                       "memory_mib": 81559}] * 2
    assert parse_nvidia_smi("") == []


def test_human_output_is_a_table_then_fixes(capsys):
    args = argparse.Namespace(json=False, device="auto", precision=None, no_smoke=False)
    assert doctor_cli.run(args, probes=FakeProbes(shm=64 << 20)) == 0
    text = capsys.readouterr().out
    table, _, diag = text.partition("\nDiagnoses")
    assert "cuda:1" in table and "cc 9.0" in table and "bf16 yes" in table and "GPU smoke test" in table
    assert "WARN   /dev/shm is 64 MiB" in diag and "fix: docker run --shm-size=8g" in diag


def test_the_install_hint_names_the_build_versions_env_pins(capsys):
    env = dict(line.split("=", 1) for line in (REPO / "docker" / "versions.env").read_text().splitlines()
               if line and not line.startswith("#"))
    probes = FakeProbes(torch={"version": "2.13.0+cpu", "cuda": None, "cuda_available": False, "device_count": 0,
                               "gpus": []})
    _, out = run_doctor(capsys, probes)
    assert only(out, "cpu_torch_with_gpu")["fix"].endswith(
        f"torch=={env['TORCH_VERSION']} --index-url https://download.pytorch.org/whl/"
        f"cu{env['CUDA_VERSION'].replace('.', '')}")


def test_smoke_dtype_follows_the_gpus():
    v100 = FakeProbes(torch={"device_count": 1, "gpus": [_gpu(0, "Tesla V100", "7.0")]})
    assert collect(v100)["smoke"]["dtype"] == "fp16" and v100.smoke_calls == [("cuda:0", "fp16")]
    assert collect(FakeProbes(), smoke=False)["smoke"] is None


def test_real_smoke_code_runs_on_cpu():
    # The GPU path minus the device: catches API drift in the smoke test on machines without a GPU.
    s = Probes().gpu_smoke("cpu", "bf16")
    assert s["ok"] and s["error"] is None and s["autocast_step_ms"] >= 0


def test_doctor_says_whether_the_compiled_decode_step_is_available(capsys, monkeypatch, tmp_path):
    import cadenza
    from cadenza.env.doctor import format_report

    def compiled_decode() -> dict:
        return collect(FakeProbes(), smoke=False, stages=cadenza.doctor_probes())["compiled_decode"]

    monkeypatch.setenv("CADENZA_CACHE", str(tmp_path))
    monkeypatch.setenv("CADENZA_NO_COMPILE", "1")
    _, out = run_doctor(capsys, FakeProbes())
    assert out["report"]["compiled_decode"]["unavailable"] == "CADENZA_NO_COMPILE is set"
    report = collect(FakeProbes(), smoke=False, stages=cadenza.doctor_probes())
    assert re.search(r"compiled decode +no: CADENZA_NO_COMPILE is set",
                     format_report(report, [], "auto", None, stages=cadenza.doctor_probes()))
    monkeypatch.delenv("CADENZA_NO_COMPILE")
    (tmp_path / "decode").mkdir()
    (tmp_path / "decode" / "step-0123.pt2").write_bytes(b"")
    cd = compiled_decode()
    assert cd["packages"] == 1 and cd["cache"] == str(tmp_path / "decode")
    if not cd["unavailable"]:  # a machine with a C++ compiler: the attention kernel is built on first use
        assert cd["attention_kernel"].startswith("not built yet")
        from cadenza.generation import kernel

        kernel.library_path().parent.mkdir(parents=True)
        kernel.library_path().write_bytes(b"")
        assert compiled_decode()["attention_kernel"] == "built"
