"""Build cadenza's images from the repo's Dockerfile, unedited, and run them (`make images-check`).

Where no image registry can be reached (CI, this project's machines), a CPU stand-in for the
official pytorch/pytorch base is made from Debian packages (mmdebstrap), torch installed where
those images keep pip, and tagged with their exact names; the runtime and devel targets are then
built on it with --pull=never. pip inside a build reaches PyPI (or a proxy with its own CA) through
the machine's own pip configuration and CA certificates, mounted read-only for the build: nothing of
the machine is baked into an image.

Checks, each a line in the result:
  runtime  `cadenza --help`; `cadenza doctor --json` sees the container, FluidSynth and its SoundFont,
           the commit, and a C++ compiler for the compiled decode step; a 10 s `cadenza generate
           --render` decodes with the compiled step; its tokens/s is recorded beside the host's
           (one run; a measure, not a check);
  devel    `jupyter lab --version`, `tensorboard --version`, a 20-step `cadenza train` on a built-in
           corpus, `pytest tests/test_docker.py`, and the commit in `cadenza doctor`.
Build times and sizes are recorded. Without buildah, podman and mmdebstrap it says so and exits 0
(--require: 1).

    python tools/images_check.py --out benchmarks/results/images/images.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OS_IMAGE = "localhost/cadenza-standin-os:bookworm"
TOOLS = ("buildah", "podman", "mmdebstrap")
# decoding speed, image beside host: one sample of 600 tokens, never ended early by the model
SPEED = ("generate", "--style", "bach", "--max-tokens", "600", "--no-eos", "--seed", "1")


def sh(*cmd: str, timeout: float = 1800, check: bool = True, quiet: bool = False) -> str:
    """Run a command; its stdout (stderr joined), or a RuntimeError naming it and its last lines."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {r.returncode}: {out[-1500:]}")
    if not quiet:
        print(f"$ {' '.join(cmd)[:160]}", file=sys.stderr)
    return out


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (REPO / "docker" / "versions.env").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def host_mounts() -> list[str]:
    """`-v SRC:SRC:ro` for the machine's CA certificates and every file or folder its pip
    configuration names (its config files, certificates, constraints, local indexes, find-links)."""
    import re

    debug = sh(sys.executable, "-m", "pip", "config", "debug", check=False, quiet=True)
    found = {"/etc/ssl/certs", *re.findall(r"^\s*(/\S+), exists: True", debug, re.M)}
    found |= {p for p in re.findall(r"(?:file://)?(/[^\s'\"]+)", debug) if not p.endswith(":")}
    found = {p.removesuffix("/simple") for p in found}  # a local index: its pages link to files beside them
    kept = [p for p in sorted(found) if Path(p).exists()]
    kept = [p for p in kept if not any(p != q and p.startswith(q + "/") for q in kept)]  # inside another: once
    return [f"-v={p}:{p}:ro" for p in kept]


def build_standin(v: dict, mounts: list[str], timings: dict) -> None:
    """The stand-in base, tagged with both official names."""
    if not sh("podman", "images", "-q", OS_IMAGE, quiet=True).strip():
        with tempfile.TemporaryDirectory() as d:
            t = time.monotonic()
            tar = Path(d) / "os.tar"
            sh("mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,python3-dev,ca-certificates",
               "bookworm", str(tar))
            sh("podman", "import", str(tar), OS_IMAGE)
            timings["standin_os_seconds"] = time.monotonic() - t
    base = f"docker.io/pytorch/pytorch:{v['TORCH_VERSION']}-cuda{v['CUDA_VERSION']}-cudnn{v['CUDNN_VERSION']}"
    t = time.monotonic()
    sh("buildah", "bud", "--isolation", "chroot", "--network", "host", *mounts, "--build-arg",
       f"TORCH_VERSION={v['TORCH_VERSION']}", "-f", str(REPO / "docker" / "standin.Dockerfile"),
       "-t", f"{base}-runtime", str(REPO / "docker"))
    sh("buildah", "tag", f"{base}-runtime", f"{base}-devel")
    timings["standin_torch_seconds"] = time.monotonic() - t


def build(target: str, mounts: list[str], commit: str, timings: dict) -> None:
    t = time.monotonic()
    sh("buildah", "bud", "--isolation", "chroot", "--network", "host", "--pull=never", *mounts,
       "--build-arg", f"GIT_COMMIT={commit}", "-f", "docker/Dockerfile", "--target", target,
       "-t", f"localhost/cadenza:{target}", str(REPO))
    timings[f"{target}_build_seconds"] = time.monotonic() - t


def size_gb(image: str) -> float:
    info = json.loads(sh("podman", "image", "inspect", image, quiet=True))
    return round(info[0]["Size"] / 1e9, 2)


class Container:
    """A working container of an image, commands run in it with buildah (podman run cannot set its
    limits on these machines)."""

    def __init__(self, image: str):
        self.name = sh("buildah", "from", "--pull=never", image, quiet=True).strip().splitlines()[-1]

    def run(self, *cmd: str, timeout: float = 900) -> str:
        return sh("buildah", "run", "--isolation", "chroot", self.name, "--", *cmd, timeout=timeout)

    def remove(self) -> None:
        sh("buildah", "rm", self.name, check=False, quiet=True)


def tokens_per_s(output: str) -> float:
    line = next(x for x in output.splitlines() if "tokens/s on" in x)
    return float(line.split(" tokens/s")[0].replace(",", "").split()[-1])


def check_runtime(commit: str) -> dict:
    c = Container("localhost/cadenza:runtime")
    try:
        checks = {"help": "usage: cadenza" in c.run("cadenza", "--help")}
        doc = json.loads(c.run("cadenza", "doctor", "--json"))["report"]
        checks.update(container=bool(doc.get("container")), fluidsynth=bool(doc["optional"].get("fluidsynth")),
                      soundfont=bool(doc["optional"].get("cadenza_soundfont") or doc["optional"].get("soundfonts")),
                      commit=doc["cadenza"].get("commit") == commit,
                      compiler=not (doc.get("compiled_decode") or {}).get("unavailable"))
        gen = c.run("cadenza", "generate", "--style", "bach", "--seconds", "10", "--render", "--out", "/tmp/g")
        checks["compiled_decode"] = "compiled decode step" in gen
        checks["wav"] = ".wav" in c.run("ls", "/tmp/g")
        image_tps = tokens_per_s(c.run("cadenza", *SPEED, "--out", "/tmp/g2"))
    finally:
        c.remove()
    host = subprocess.run([sys.executable, "-m", "cadenza", *SPEED, "--out", tempfile.mkdtemp()], capture_output=True,
                          text=True, timeout=900)
    host_tps = tokens_per_s(host.stdout)
    # recorded, never asserted: a timing depends on what else the machine runs
    return {"checks": checks, "tokens_per_s": {"image": image_tps, "host": host_tps,
                                                "image_over_host": round(image_tps / host_tps, 3)}}


def check_devel(commit: str) -> dict:
    c = Container("localhost/cadenza:devel")
    try:
        checks = {"jupyter": bool(c.run("jupyter", "lab", "--version").strip()),
                  "tensorboard": bool(c.run("tensorboard", "--version").strip())}
        c.run("cadenza", "prepare", "--corpus", "bach:12", "--tokenizer", "notes", "--out", "/tmp/d", "--quiet")
        train = c.run("cadenza", "train", "--data", "/tmp/d", "--out", "/tmp/r", "--preset", "tiny", "--max-steps",
                      "20", "--quiet")
        checks["train"] = "step 20" in train
        checks["pytest_docker"] = " passed" in c.run("python", "-m", "pytest", "-q", "tests/test_docker.py")
        checks["commit"] = commit[:12] in c.run("cadenza", "doctor")
    finally:
        c.remove()
    return {"checks": checks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON")
    ap.add_argument("--require", action="store_true", help="fail (exit 1) where the tools are missing")
    a = ap.parse_args(argv)
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print(f"images-check skipped: {', '.join(missing)} not installed (Debian: apt-get install buildah podman "
              "mmdebstrap runc)")
        return 1 if a.require else 0
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    v, mounts, timings = versions(), host_mounts(), {}
    t0 = time.monotonic()
    build_standin(v, mounts, timings)
    for target in ("runtime", "devel"):
        build(target, mounts, commit, timings)
    from cadenza.env.record import cpu_info

    result = {"commit": commit, "cpu": cpu_info(), "versions": v, "timings": timings,
              "sizes_gb": {t: size_gb(f"localhost/cadenza:{t}") for t in ("runtime", "devel")},
              "runtime": check_runtime(commit), "devel": check_devel(commit)}
    result["seconds"] = time.monotonic() - t0
    failed = [f"{t}.{k}" for t in ("runtime", "devel") for k, ok in result[t]["checks"].items() if not ok]
    result["failed"] = failed
    print(json.dumps({**{k: result[k] for k in ("timings", "sizes_gb", "failed")},
                      "tokens_per_s": result["runtime"]["tokens_per_s"]}, indent=1))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
