"""`cadenza doctor`: what Python / torch / CUDA / driver / container setup this is, what is wrong, how to fix it.

Every look at the machine goes through one `Probes` object (`cadenza.env.probes`), so each
diagnosis is tested by faking a probe. A stage above env/ adds its own look as a `StageProbe` that
the caller passes in (`cadenza.doctor` passes generation's). A new diagnosis is one more function
in `FINDINGS`.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cadenza.env.cuda import arch_problem, install_hint
from cadenza.env.probes import Probes, StageProbe
from cadenza.env.record import cache_dir, git_commit, library_versions
from cadenza.env.tools import MUSESCORE_BINARIES, PIP_HINT

GiB = 1 << 30
# Minimum Linux driver per CUDA major(.minor): CUDA's minor-version compatibility lets any driver of
# the major's first release run every later minor, so the major entry covers most builds.
MIN_DRIVER = {"10.2": "440.33", "11.0": "450.36.06", "11": "450.80.02", "12": "525.60.13", "13": "580"}


@dataclass
class Diagnosis:
    severity: str  # "ok" | "warn" | "error"
    code: str
    message: str
    fix: str = ""


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def min_driver(cuda: str) -> str | None:
    """The oldest Linux driver that runs a torch built for CUDA `cuda` ("12.8" -> "525.60.13")."""
    major_minor = ".".join(cuda.split(".")[:2])
    return MIN_DRIVER.get(major_minor) or MIN_DRIVER.get(cuda.split(".")[0])


def collect(probes: Probes | None = None, smoke: bool = True, precision: str | None = None,
            stages: Sequence[StageProbe] = ()) -> dict:
    """The full report (a JSON-able dict), with a field for each of `stages`. `smoke` runs the GPU
    smoke test when torch sees a GPU."""
    p = probes or Probes()
    env = p.env()
    t = p.torch_info()
    cache = str(cache_dir())
    report: dict[str, Any] = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "cadenza": {"version": library_versions(("cadenza",))["cadenza"], "commit": git_commit()},
        "torch": t,
        "build": ("rocm " + t["hip"]) if t.get("hip") else ("cuda " + t["cuda"]) if t.get("cuda") else "cpu",
        "nvidia_smi": p.nvidia_smi(),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "cpu": {**p.cpu(), "torch_threads": t.get("threads"), "omp_num_threads": env.get("OMP_NUM_THREADS")},
        "shm_bytes": p.shm_bytes(),
        "disk_free": {"cache": {"path": cache, "bytes": p.disk_free(cache)},
                      "cwd": {"path": os.getcwd(), "bytes": p.disk_free(os.getcwd())}},
        "container": p.container(),
        "optional": {"audio": p.audio_backend(),
                     "fluidsynth": p.which("fluidsynth"), "pyfluidsynth": p.module_version("pyfluidsynth"),
                     "soundfonts": p.soundfonts(), "cadenza_soundfont": env.get("CADENZA_SOUNDFONT"),
                     "musescore": next((w for b in MUSESCORE_BINARIES if (w := p.which(b))), None),
                     "tensorboard": p.module_version("tensorboard"), "miditok": p.module_version("miditok")},
    }
    report.update({s.key: s.probe() for s in stages})
    report["smoke"] = None
    if smoke and t.get("cuda_available") and t.get("gpus"):
        bf16_ok = all(g["bf16"] for g in t["gpus"])
        dtype = precision if precision in ("bf16", "fp16") else ("bf16" if bf16_ok else "fp16")
        report["smoke"] = p.gpu_smoke("cuda:0", dtype)
    return report


def _smi_gpus(r: dict) -> list[dict]:
    smi = r.get("nvidia_smi") or {}
    return smi.get("gpus", []) if smi.get("ok") else []


def target_device(r: dict, device: str = "auto") -> str:
    """The device training is meant for: auto means cuda whenever an NVIDIA GPU is in the machine."""
    if device != "auto":
        return device
    t = r["torch"]
    if t.get("cuda_available") or _smi_gpus(r):
        return "cuda"
    return "mps" if t.get("mps") else "cpu"


def _wheel_fix(r: dict, driver: str | None) -> str:
    """The pinned torch's CUDA build for this driver and the first GPU torch sees (any GPU when it sees none)."""
    gpus = r["torch"].get("gpus") or []
    return install_hint(driver, gpus[0]["capability"] if gpus else None)


def diagnose(report: dict, device: str = "auto", precision: str | None = None) -> list[Diagnosis]:
    """Findings in order of how much they block training on `device` at `precision`."""
    t, out = report["torch"], []

    def add(severity: str, code: str, message: str, fix: str = "") -> None:
        out.append(Diagnosis(severity, code, message, fix))

    if not t.get("installed"):
        add("error", "no_torch", f"torch is not importable: {t.get('error')}",
            "pip install torch (the tested version is in docker/versions.env), or `make install`")
        return out
    for findings in FINDINGS:
        findings(report, device, precision, add)
    if not any(d.severity == "error" for d in out):
        gpus = t.get("gpus") or []
        on = "cuda" if t.get("cuda_available") else "mps" if t.get("mps") else "cpu"
        n = f" ({len(gpus)} GPU{'s' if len(gpus) != 1 else ''})" if on == "cuda" else ""
        add("ok", "ready", f"training can run on {on}{n}" + (f" at {precision}" if precision else ""))
    return out


def _cuda_findings(r: dict, device: str, precision: str | None, add) -> None:
    """Why torch cannot use the NVIDIA GPUs the machine has: driver, build, visibility."""
    t, smi, smi_gpus = r["torch"], r.get("nvidia_smi"), _smi_gpus(r)
    blocking = "error" if target_device(r, device) == "cuda" else "warn"
    driver = smi_gpus[0]["driver"] if smi_gpus else None
    found = []

    def note(*args) -> None:
        found.append(args[1])
        add(*args)

    if smi and not smi.get("ok"):
        note("warn" if device != "cuda" else "error", "nvidia_smi_failed", f"nvidia-smi fails: {smi.get('error')}",
             "the NVIDIA kernel driver is not loaded or does not match its libraries: reboot or reinstall it")
    if t.get("cuda_available") and t.get("cuda_error"):
        note(blocking, "cuda_failing", f"torch sees CUDA but cannot use it: {t['cuda_error']}",
             "check `nvidia-smi` for a GPU in an error state (Xid) or held by another process")
    if smi_gpus and not t.get("cuda") and not t.get("hip"):
        note(blocking, "cpu_torch_with_gpu",
             f"torch {t['version']} is a CPU-only build but nvidia-smi sees {len(smi_gpus)} GPU(s) "
             f"({smi_gpus[0]['name']})", _wheel_fix(r, driver))
    need = min_driver(t["cuda"]) if t.get("cuda") else None
    too_old = bool(driver and need and _vtuple(driver) < _vtuple(need))
    if too_old:
        hint = _wheel_fix(r, driver)  # a pinned build this driver runs, else the driver that build needs
        note(blocking, "driver_too_old",
             f"NVIDIA driver {driver} is too old for torch's CUDA {t['cuda']} (needs >= {need})",
             f"upgrade the driver to >= {need}" + (f", or match torch to it: {hint}" if hint.startswith("pip") else ""))
    for g in t.get("gpus") or []:
        if problem := arch_problem(g["capability"], t.get("arch_list") or (), f"GPU {g['index']} ({g['name']})"):
            note(blocking, "arch_unsupported", problem, install_hint(driver, g["capability"]))
    cvd = r.get("cuda_visible_devices")
    if cvd is not None and not too_old:
        first = cvd.split(",")[0].strip()
        if first in ("", "-1") or (smi_gpus and (t.get("cuda") or t.get("hip")) and not t.get("device_count")):
            note("error" if device == "cuda" else "warn", "cuda_visible_devices_hides_all",
                 f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
                 + (f" (nvidia-smi sees {len(smi_gpus)})" if smi_gpus else ""),
                 "unset CUDA_VISIBLE_DEVICES, or list real indices/UUIDs: export CUDA_VISIBLE_DEVICES="
                 + ",".join(str(i) for i in range(max(1, len(smi_gpus)))))
    if device == "cuda" and not t.get("cuda_available") and not found:
        if not smi:
            fix = ("start the container with `docker run --gpus all` (NVIDIA Container Toolkit)" if r.get("container")
                   else "no NVIDIA driver found (no nvidia-smi): install it") + ", or use --device cpu"
        else:
            fix = "check `nvidia-smi` and that the driver matches torch's CUDA, or use --device cpu"
        add("error", "no_cuda", "--device cuda was requested but torch sees no CUDA device"
            + (f" ({t['cuda_error']})" if t.get("cuda_error") else ""), fix)


def _accelerator_findings(r: dict, device: str, precision: str | None, add) -> None:
    """MPS, NCCL, bf16 support and the GPU smoke test."""
    t, smi_gpus = r["torch"], _smi_gpus(r)
    target = target_device(r, device)
    driver = smi_gpus[0]["driver"] if smi_gpus else None
    if device == "mps" and not t.get("mps"):
        add("error", "no_mps", "--device mps was requested but MPS is unavailable (needs Apple silicon, macOS >= 12.3)",
            "use --device cpu")
    gpus = t.get("gpus") or []
    if len(gpus) > 1 and not t.get("nccl"):
        add("warn", "no_nccl", f"NCCL is unavailable with {len(gpus)} GPUs: multi-GPU training falls back to gloo "
            "(slow) or fails", f"install the Linux CUDA wheel of torch, which bundles NCCL: {_wheel_fix(r, driver)}")
    if precision == "bf16" and target == "cpu" and not t.get("cpu_bf16", True):
        add("warn", "no_cpu_bf16", "bf16 requested on a CPU without native bf16 (no AVX512-BF16 or AMX): bf16 "
            "arithmetic is emulated, slower than fp32, and the LSTM's cell runs in fp32",
            "use --precision fp32, or auto, which picks fp32 on this CPU")
    if precision == "bf16" and target == "cuda":
        for g in (g for g in gpus if not g["bf16"]):
            add("error", "no_bf16", f"bf16 requested but GPU {g['index']} ({g['name']}, compute capability "
                f"{g['capability']}) has no bf16 support (needs >= 8.0)", "use --precision fp16 (or fp32)")
    smoke = r.get("smoke")
    if smoke and not smoke["ok"]:
        add("error" if target == "cuda" else "warn", "smoke_failed",
            f"GPU smoke test failed on {smoke['device']}: {smoke['error']}",
            "check `nvidia-smi` for other processes holding the GPU, and the driver / torch CUDA match")
    elif smoke:
        add("ok", "smoke_ok", f"GPU smoke test passed on {smoke['device']} ({smoke['dtype']} step "
            f"{smoke['autocast_step_ms']} ms, 1024^2 matmul {smoke['matmul_ms']} ms)")


def _resource_findings(r: dict, device: str, precision: str | None, add) -> None:
    shm = r.get("shm_bytes")
    if shm is not None and shm < GiB:
        add("warn", "small_shm", f"/dev/shm is {_size(shm)} (< 1 GiB): DataLoader workers share batches through it "
            "and die with 'bus error'", "docker run --shm-size=8g (or --ipc=host); compose: shm_size: 8gb")
    for where, d in r.get("disk_free", {}).items():
        if d["bytes"] is not None and d["bytes"] < 5 * GiB:
            add("warn", "low_disk", f"only {_size(d['bytes'])} free in the {where} folder {d['path']}",
                "free space, or point CADENZA_CACHE / --out at a bigger disk")


def _audio_findings(r: dict, device: str, precision: str | None, add) -> None:
    """Audio with real instruments needs a SoundFont renderer; without one WAVs are synthetic tones."""
    opt = r["optional"]
    if opt["cadenza_soundfont"] and opt["cadenza_soundfont"] not in opt["soundfonts"]:
        add("warn", "soundfont_missing", f"CADENZA_SOUNDFONT={opt['cadenza_soundfont']} is not a file",
            "point CADENZA_SOUNDFONT at an existing .sf2 file")
    if opt["audio"].startswith("audio: the built-in numpy"):
        add("warn", "no_soundfont_renderer", "no SoundFont renderer is installed: audio is the built-in numpy "
            "synthesizer's tones, not sampled instruments", f"{PIP_HINT}, or apt-get install fluidsynth "
            "fluid-soundfont-gm")


# Each adds its diagnoses, most blocking first: f(report, device, precision, add(severity, code, message, fix)).
FINDINGS: tuple[Callable[..., None], ...] = (_cuda_findings, _accelerator_findings, _resource_findings,
                                             _audio_findings)


def exit_code(diagnoses: list[Diagnosis]) -> int:
    return 1 if any(d.severity == "error" for d in diagnoses) else 0


def doctor_summary(probes: Probes | None = None) -> dict:
    """A short JSON-able environment summary for run folders: no smoke test, well under a second."""
    p = probes or Probes()
    r = collect(p, smoke=False)
    t, smi = r["torch"], r["nvidia_smi"] or {}
    return {"python": r["python"]["version"], "platform": r["platform"], "cadenza": r["cadenza"]["version"],
            "git_commit": r["cadenza"]["commit"], "torch": t.get("version"), "build": r["build"],
            "cudnn": t.get("cudnn"), "nccl": t.get("nccl"),
            "driver": (smi.get("gpus") or [{}])[0].get("driver") if smi.get("ok") else None,
            "gpus": [f"{g['name']} (cc {g['capability']}, {_size(g['memory_bytes'])})" for g in t.get("gpus", [])],
            "cuda_visible_devices": r["cuda_visible_devices"], "cpu_count": r["cpu"]["usable"],
            # The CPU and its vector instruction sets: speed (and bf16) depend on them.
            "cpu": r["cpu"].get("model"), "cpu_isa": r["cpu"].get("isa", []),
            "torch_threads": r["cpu"]["torch_threads"], "container": r["container"],
            "versions": {k: p.module_version(k) for k in ("numpy", "symusic", "miditok", "music21")}}


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / (1 << 20):.0f} MiB"


def format_report(r: dict, diagnoses: list[Diagnosis], device: str, precision: str | None,
                  stages: Sequence[StageProbe] = ()) -> str:
    t, opt, smi = r["torch"], r["optional"], r.get("nvidia_smi")
    smi_gpus = _smi_gpus(r)
    rows = [("python", f"{r['python']['version']} ({r['python']['executable']})"),
            ("platform", r["platform"]),
            ("cadenza", f"{r['cadenza']['version']} (commit {(r['cadenza']['commit'] or '-')[:12]})"),
            ("torch", f"{t.get('version', 'not installed')}  [{r['build']} build]"),
            ("CUDA / cuDNN / NCCL", f"{t.get('cuda') or t.get('hip') or '-'} / {t.get('cudnn') or '-'} / "
                                    f"{t.get('nccl') or '-'}"),
            ("NVIDIA driver", smi_gpus[0]["driver"] if smi_gpus else "no nvidia-smi" if smi is None
             else f"nvidia-smi: {smi.get('error') or 'no GPUs'}")]
    for g in smi_gpus:
        rows.append(("  nvidia-smi GPU", f"{g['name']}, {g['memory_mib']} MiB"))
    rows.append(("torch GPUs", str(t.get("device_count", 0)) + (f"  ({t['cuda_error']})" if t.get("cuda_error")
                                                                 else "")))
    for g in t.get("gpus", []):
        rows.append((f"  cuda:{g['index']}", f"{g['name']}  cc {g['capability']}  {_size(g['memory_bytes'])}  "
                     f"bf16 {'yes' if g['bf16'] else 'no'}  TF32 {'yes' if g['tf32'] else 'no'}"))
    cvd = r["cuda_visible_devices"]
    c = r["cpu"]
    rows += [("CUDA_VISIBLE_DEVICES", "(unset)" if cvd is None else repr(cvd)),
             ("MPS", "yes" if t.get("mps") else "no"),
             ("CPU", f"{c.get('model') or '-'}; {' '.join(c.get('isa') or []) or 'no SIMD flags read'}; native bf16 "
                     f"{'yes' if t.get('cpu_bf16') else 'no'}"),
             ("CPU threads", f"{c['usable']} usable of {c['count']}, torch {c['torch_threads']}, "
                             f"OMP_NUM_THREADS={c['omp_num_threads'] or '(unset)'}"),
             ("/dev/shm", _size(r["shm_bytes"]))]
    rows += [(f"free disk ({k})", f"{_size(d['bytes'])}  {d['path']}") for k, d in r["disk_free"].items()]
    rows += [("container", r["container"] or "no"),
             ("Audio", opt["audio"].removeprefix("audio: ")),
             ("FluidSynth", f"binary {opt['fluidsynth'] or '-'}, pyfluidsynth {opt['pyfluidsynth'] or '-'}"),
             ("SoundFont", opt["soundfonts"][0] if opt["soundfonts"] else "-"),
             ("MuseScore", opt["musescore"] or "-"), ("TensorBoard", opt["tensorboard"] or "-"),
             ("MidiTok", opt["miditok"] or "-")]
    rows += [row for s in stages if r.get(s.key) for row in s.rows(r[s.key])]
    if r.get("smoke"):
        s = r["smoke"]
        rows.append(("GPU smoke test", f"{'ok' if s['ok'] else 'FAILED'} on {s['device']} ({s['dtype']})"
                     + (f": {s['error']}" if s["error"] else f", step {s['autocast_step_ms']} ms")))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", f"Diagnoses (device {device} -> {target_device(r, device)}, precision {precision or 'any'}):"]
    for d in diagnoses:
        lines.append(f"  {d.severity.upper():<5}  {d.message}")
        if d.fix:
            lines.append(f"  {'':<5}  fix: {d.fix}")
    return "\n".join(lines)


def doctor(device: str = "auto", precision: str | None = None, smoke: bool = True,
           probes: Probes | None = None, stages: Sequence[StageProbe] = ()) -> dict:
    """The environment report, with each of `stages`, and the diagnoses for training on `device`
    at `precision`: {"report", "device": {"requested", "target"}, "precision", "diagnoses", "exit_code"}."""
    report = collect(probes, smoke=smoke, precision=precision, stages=stages)
    found = diagnose(report, device=device, precision=precision)
    return {"report": report, "device": {"requested": device, "target": target_device(report, device)},
            "precision": precision, "diagnoses": [asdict(d) for d in found], "exit_code": exit_code(found)}
