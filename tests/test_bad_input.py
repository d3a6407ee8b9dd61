"""Every bad input a user can give: exit code 2, one line naming the file or setting and the
reason, no traceback, and nothing half-written left behind."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from conftest import make_score, write_score

from cadenza.atomic import exclusive
from cadenza.cli import main
from cadenza.models import checkpoint as ckpt

SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_every=2", "eval_windows=4", "sample_tokens=0", "save_every=2", "keep_last=3"]


def run(argv: list[str], capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return code, err


def one_line_error(code: int, err: str, verb: str, *words: str) -> None:
    """exit 2; exactly one line, `cadenza VERB: error: ...`, holding `words`; no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"cadenza {verb}: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".*") if p.name.endswith((".tmp", ".old"))] if folder.exists() else []


@pytest.fixture(scope="module")
def trained(midi_folder, tmp_path_factory):
    """A store and a run with checkpoints at steps 2, 4 and 6."""
    root = tmp_path_factory.mktemp("bad")
    assert main(["prepare", str(midi_folder), "--out", str(root / "store"), "--quiet", "--workers", "1",
                 "--valid-fraction", "0.3", "--test-fraction", "0"]) == 0
    assert main(["train", "--data", str(root / "store"), "--out", str(root / "run"), "--max-steps", "6",
                 "--quiet", "--precision", "fp32", "--device", "cpu", *SMALL]) == 0
    return root


@pytest.fixture
def run_copy(trained, tmp_path):
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path / "run"


def damage(run_dir: Path, how: str) -> Path:
    step = ckpt.latest_checkpoint(run_dir)
    f = step / "model.safetensors"
    if how == "truncated":
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    else:  # a pickle saved under the name of the weights
        import pickle

        f.write_bytes(pickle.dumps({"weights": [1, 2, 3]}))
    return step


# ---- checkpoints --------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["truncated", "pickle"])
@pytest.mark.parametrize("verb", ["generate", "evaluate"])
def test_a_damaged_checkpoint_names_itself_and_the_last_good_one(verb, how, run_copy, trained, tmp_path, capsys):
    step = damage(run_copy, how)
    argv = {"generate": ["generate", "--checkpoint", step, "--max-tokens", "8", "--out", tmp_path / "s"],
            "evaluate": ["evaluate", "--checkpoint", step, "--data", trained / "store"]}[verb]
    code, err = run(argv, capsys)
    one_line_error(code, err, verb, f"{step} is not a valid checkpoint (model.safetensors",
                   f"the last good one is {run_copy / 'checkpoints' / 'step-0000004'}")
    assert not (tmp_path / "s").exists()


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(run_copy, capsys):
    damage(run_copy, "truncated")
    code, err = run(["train", "--out", run_copy, "--resume", "--quiet", "max_steps=8"], capsys)
    assert code == 0, err
    assert "step-0000006 is not a valid checkpoint" in err and "resuming from" in err and "step-0000004" in err
    newest = ckpt.latest_checkpoint(run_copy)
    assert newest.name == "step-0000008" and ckpt.verify(newest) is None


def test_resume_with_no_good_checkpoint_is_one_line(run_copy, capsys):
    for _, d in ckpt.list_checkpoints(run_copy):
        (d / "model.safetensors").write_bytes(b"\0" * 10)
    code, err = run(["train", "--out", run_copy, "--resume", "--quiet", "max_steps=8"], capsys)
    one_line_error(code, err, "train", "is not a valid checkpoint", "no other checkpoint in")


# ---- output folders: locks, leftovers, failed runs ----------------------------------------------
def test_two_prepares_into_one_folder(midi_folder, tmp_path, capsys):
    with exclusive(tmp_path / "store", "prepare"):  # another prepare holds the folder
        code, err = run(["prepare", midi_folder, "--out", tmp_path / "store", "--quiet"], capsys)
    one_line_error(code, err, "prepare", str(tmp_path / "store"), "in use by another cadenza process", "pid ")
    assert not (tmp_path / "store" / "manifest.json").exists()


def test_two_trainings_into_one_run_folder(trained, tmp_path, capsys):
    with exclusive(tmp_path / "run", "train"):
        code, err = run(["train", "--data", trained / "store", "--out", tmp_path / "run", "--quiet", *SMALL], capsys)
    one_line_error(code, err, "train", "in use by another cadenza process", "pid ")
    assert not ckpt.list_checkpoints(tmp_path / "run")


def test_leftovers_of_interrupted_writes_are_removed_on_the_next_run(midi_folder, run_copy, trained, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / ".tokens.bin.x7f3a.tmp").write_bytes(b"half a store")
    (run_copy / "checkpoints" / ".step-0000008.k2j1.tmp").mkdir()
    (run_copy / "checkpoints" / ".step-0000008.k2j1.tmp" / "model.safetensors").write_bytes(b"half")
    assert main(["prepare", str(midi_folder), "--out", str(store), "--quiet", "--workers", "1"]) == 0
    assert main(["train", "--out", str(run_copy), "--resume", "--quiet", "max_steps=8"]) == 0
    assert leftovers(store) == [] and leftovers(run_copy) == []


def test_a_failed_prepare_removes_the_folder_it_created(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.mid").write_bytes(b"MThd not really")
    code, err = run(["prepare", bad, "--out", tmp_path / "store", "--quiet"], capsys)
    one_line_error(code, err, "prepare", "none of the 1 files could be used", "a.mid")
    assert not (tmp_path / "store").exists()


def test_a_failed_train_removes_the_run_folder_it_created(tmp_path, capsys):
    code, err = run(["train", "--data", tmp_path / "no-store", "--out", tmp_path / "run", "--quiet"], capsys)
    one_line_error(code, err, "train", str(tmp_path / "no-store"), "not a token store")
    assert not (tmp_path / "run").exists()


# ---- numeric options of every verb --------------------------------------------------------------
BAD_OPTIONS = [
    (["train", "--data", "D", "--out", "R", "--max-minutes", "-1"], "train", "--max-minutes must be >= 0, got -1.0"),
    (["train", "--data", "D", "--out", "R", "--context", "0"], "train", "--context must be >= 2, got 0"),
    (["train", "--data", "D", "--out", "R", "--batch-size", "0"], "train", "--batch-size must be >= 1, got 0"),
    (["train", "--data", "D", "--out", "R", "lr=-1"], "train", "lr must be > 0, got -1"),
    (["train", "--data", "D", "--out", "R", "dropout=1.5"], "train", "dropout must be in [0, 1), got 1.5"),
    (["render", "x.mid", "--sample-rate", "0"], "render", "--sample-rate must be in [8000, 192000], got 0"),
    (["prepare", "x", "--out", "S", "--valid-fraction", "1.5"], "prepare",
     "--valid-fraction must be in [0, 1), got 1.5"),
    (["prepare", "x", "--out", "S", "--workers", "0"], "prepare", "--workers must be >= 1, got 0"),
    (["prepare", "x", "--out", "S", "--valid-fraction", "0.6", "--test-fraction", "0.5"], "prepare",
     "--valid-fraction plus test_fraction must be < 1"),
    (["evaluate", "--checkpoint", "R", "--data", "D", "--stride", "0"], "evaluate", "--stride must be >= 1, got 0"),
    (["demo", "--minutes", "0"], "demo", "--minutes must be in (0, 600], got 0.0"),
    (["bench", "polyphonic", "--data", "JSB_Chorales.mat", "--out", "R", "--max-steps", "0"], "bench",
     "--max-steps must be >= 1, got 0"),
]


@pytest.mark.parametrize("argv,verb,words", BAD_OPTIONS, ids=[" ".join(b[0][:1] + b[0][-2:]) for b in BAD_OPTIONS])
def test_out_of_range_options_name_the_option_and_its_range(argv, verb, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = run(argv, capsys)
    one_line_error(code, err, verb, words)
    assert list(tmp_path.iterdir()) == []  # nothing written


# ---- files prepare cannot use: each skipped with its own reason ---------------------------------
def midi_bytes(division: int | None = None, drums_only: bool = False) -> bytes:
    s = make_score([[(0, 480, 38, 100), (480, 480, 42, 100)]], drums=(0,)) if drums_only else \
        make_score([[(0, 480, 60, 90), (480, 480, 64, 70)]])
    data = bytearray(s.dumps_midi())
    if division is not None:
        data[12:14] = division.to_bytes(2, "big")
    return bytes(data)


BAD_FILES = [
    ("tpq0.mid", midi_bytes(division=0), "ticks per quarter is 0"),
    ("smpte.mid", midi_bytes(division=0xE728), "SMPTE time division (25 frames per second) is not supported"),
    ("drums.mid", midi_bytes(drums_only=True), "only drums (2 drum notes)"),
    ("empty.mid", b"", "empty file (0 bytes)"),
    ("text.mid", b"hello, not MIDI at all\n", "not a MIDI file (no MThd header)"),
    ("cut.mid", midi_bytes()[:30], "corrupt MIDI"),
]


@pytest.mark.parametrize("name,data,reason", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_files_prepare_cannot_use_are_named_with_their_reason(name, data, reason, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(data)
    with _no_warnings():
        code, err = run(["prepare", tmp_path / "in", "--out", tmp_path / "store", "--quiet"], capsys)
    one_line_error(code, err, "prepare", f"{tmp_path / 'in' / name}: {reason}")
    assert not (tmp_path / "store").exists()


def test_riff_wrapped_midi_is_unwrapped_and_kept(tmp_path):
    from cadenza.data.prepare import prepare

    smf = midi_bytes()
    riff = b"RIFF" + struct.pack("<I", 12 + len(smf)) + b"RMID" + b"data" + struct.pack("<I", len(smf)) + smf
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "song.mid").write_bytes(riff)
    write_score(make_score([[(0, 240, 67, 80)]]), tmp_path / "in" / "plain.mid")
    res = prepare(tmp_path / "in", tmp_path / "store", workers=1, progress=False)
    assert len(res.store) == 2 and res.skipped == []


class _no_warnings:
    """Fail on any warning (numpy's divide-by-zero on a 0-tpq file was printed before)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
