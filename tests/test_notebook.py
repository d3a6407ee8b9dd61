"""notebooks/quickstart.ipynb runs top to bottom (its quick configuration) and shows what it promises."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"
BUDGET_S = 150  # the whole notebook; it takes 35-50 s on 2 busy CPU cores


def test_notebook_is_saved_clean_with_a_python3_kernel():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"cell {cell.id} was saved with outputs"


@pytest.fixture
def venv_kernel(tmp_path, monkeypatch):
    """A `python3` kernelspec that runs this interpreter, found before any other one named python3."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    kernels = tmp_path / "jupyter" / "kernels"
    write_kernel_spec(kernels / "python3", overrides={"display_name": "cadenza test kernel"})
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))  # searched first
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == sys.executable, spec.argv
    return "python3"


@pytest.mark.slow
def test_quickstart_notebook_runs_top_to_bottom(tmp_path, monkeypatch, venv_kernel):
    monkeypatch.setenv("CADENZA_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # One torch thread: on a shared CI machine, threads that spin-wait for a busy core make steps
    # up to 50x slower, and the notebook's untimed steps (evaluation, sampling) would feel it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    work = tmp_path / "cwd"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    deadline = time.monotonic() + BUDGET_S
    client = nbclient.NotebookClient(
        nb, kernel_name=venv_kernel, resources={"metadata": {"path": str(work)}},
        # one deadline for the whole notebook: each cell may use what the earlier ones left
        timeout_func=lambda cell: max(1, int(deadline - time.monotonic())), startup_timeout=60)
    client.execute()  # raises CellExecutionError (with the traceback) or CellTimeoutError

    outputs = {c.id: c.outputs for c in nb.cells if c.cell_type == "code"}
    errors = [(cid, o) for cid, outs in outputs.items() for o in outs if o.output_type == "error"]
    assert not errors, errors

    def text(cid: str) -> str:
        return "".join(o.get("text", "") for o in outputs[cid] if o.output_type == "stream" and o.name == "stdout")

    assert "pieces" in text("data") and "splits" in text("data")
    assert "unigram baseline" in text("eval") and "test NLL" in text("eval")
    displayed = [o.data for o in outputs["listen"] if o.output_type == "display_data"]
    assert sum("<audio" in d.get("text/html", "") for d in displayed) == 2
    assert sum("image/png" in d for d in displayed) == 2

    run = work / "runs" / "quickstart" / "run"
    assert json.loads((run / "config.json").read_text())["train"]["max_minutes"] == 0.3
    assert list((run / "checkpoints").glob("step-*/model.safetensors"))
    # A model trained for 20 seconds may end a piece early (EOS), even before its first note: check
    # the files, not the music.
    samples = work / "runs" / "quickstart" / "samples"
    magic = {".mid": b"MThd", ".wav": b"RIFF", ".png": b"\x89PNG\r\n\x1a\n"}
    for i in range(2):
        for suffix, head in magic.items():
            f = samples / f"sample-{i:03d}{suffix}"
            assert f.read_bytes().startswith(head), f
