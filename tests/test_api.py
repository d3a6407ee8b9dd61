"""The public API does everything the command line does: one test per verb, calling the library.

(`cadenza.render` is tested in tests/listen/test_render.py, the generation settings in
tests/generation/test_sampling_config.py.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import cadenza
from cadenza.generation.config import SamplingConfig
from cadenza.training.config import resolve

SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_every=2", "eval_windows=4", "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\"",
         "save_every=2"]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return cadenza.prepare(midi_folder, tmp_path_factory.mktemp("api") / "store", workers=1, progress=False,
                           valid_fraction=0.25, test_fraction=0.25).store


@pytest.fixture(scope="module")
def run(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "run"
    cadenza.train(resolve("tiny", overrides=SMALL + ["max_steps=4"]), store.path, out, progress=False)
    return out


def test_prepare_a_builtin_corpus(fake_corpus, tmp_path):
    res = cadenza.prepare(corpus="fake", out=tmp_path / "store", workers=1, progress=False)
    assert len(res.store) == 2 and res.store.manifest["corpus"] == "fake"
    assert [s["source"] for s in res.skipped] == ["broken.abc"]  # music21's failure is named, not fatal
    assert [c.name for c in cadenza.list_corpora()][:2] == ["bach", "palestrina"]
    with pytest.raises(ValueError, match="not both"):
        cadenza.prepare([fake_corpus], tmp_path / "x", corpus="fake")


def test_resume_reads_the_data_path_and_config_from_the_run_folder(store, tmp_path):
    out = tmp_path / "r"
    cadenza.train(resolve("tiny", overrides=SMALL + ["max_steps=2", "lr_horizon=4"]), store.path, out,
                  progress=False)
    longer = resolve(None, overrides=["max_steps=4"], run_dir=out)  # the saved config, one setting changed
    res = cadenza.train(longer, out=out, resume=True, progress=False)  # no data: the run knows its store
    assert res.step == 4
    assert cadenza.train(out=out, resume=True, progress=False).step == 4  # nothing left to do: no error
    assert json.loads((out / "run.json").read_text())["resumes"][0]["step"] == 2


def test_train_never_modifies_the_callers_config(store, tmp_path):
    cfg = resolve("tiny", overrides=SMALL + ["max_steps=1"])
    before = cfg.to_dict()
    cadenza.train(cfg, store.path, tmp_path / "r", progress=False)
    assert cfg.to_dict() == before  # the trainer sets vocab_size on its own copy


def test_generate_takes_a_config_a_dict_or_keywords(run, tmp_path):
    cfg = SamplingConfig(num_samples=2, max_tokens=40, seed=5, top_p=0.9)
    a = cadenza.generate(run, cfg, out=tmp_path / "a")
    b = cadenza.generate(run, cfg.to_dict(), out=tmp_path / "b")
    c = cadenza.generate(run, num_samples=2, max_tokens=40, seed=5, top_p=0.9)
    assert a.ids == b.ids == c.ids and len(a.ids) == 2
    saved = json.loads((tmp_path / "a" / "generation.json").read_text())
    assert saved["settings"] == cfg.to_dict() and saved["run"]["step"] == 4
    assert SamplingConfig.from_dict(saved["settings"]) == cfg  # the file alone makes the sample again
    assert cadenza.generate(run, cfg, temperature=0.5).config.temperature == 0.5  # keywords override


def test_evaluate_nll_and_samples_in_one_call(run, store, tmp_path):
    cadenza.generate(run, num_samples=2, max_tokens=60, out=tmp_path / "samples")
    rep = cadenza.evaluate(run, store.path, split="valid", samples=tmp_path / "samples", reference=store.path,
                           json_path=tmp_path / "rep.json")
    nll = rep["nll"]
    assert nll["split"] == "valid" and nll["tokens"] > 0 and np.isfinite(nll["nll_nats"])
    assert nll["nll_bits"] == pytest.approx(nll["nll_nats"] / np.log(2))
    s = rep["samples"]
    assert s["samples"] == 2 and "pitch_range" in s["metrics"] and len(s["memorisation"]) == 2
    saved = json.loads((tmp_path / "rep.json").read_text())
    assert saved["nll"]["tokens"] == nll["tokens"]
    assert saved["cpu"]["model"] and saved["versions"]["torch"] and "command" in saved  # how it was made
    with pytest.raises(ValueError, match="needs both"):
        cadenza.evaluate(run)


def jsb_mat(folder):
    """A tiny piano-roll data set in the benchmark's .mat layout."""
    from scipy.io import savemat

    rng = np.random.default_rng(0)

    def rolls(n):
        out = np.empty(n, dtype=object)
        for i in range(n):
            r = np.zeros((int(rng.integers(6, 14)), 88))
            r[np.arange(r.shape[0]), rng.integers(30, 50, r.shape[0])] = 1
            out[i] = r
        return out

    mat = folder / "JSB_Chorales.mat"
    savemat(mat, {"traindata": rolls(6), "validdata": rolls(2), "testdata": rolls(2)})
    return mat


def test_benchmark_trains_scores_and_keeps_its_evidence(tmp_path):
    mat = jsb_mat(tmp_path)
    res = cadenza.benchmark("polyphonic", mat, tmp_path / "run", max_steps=2, device="cpu", progress=False,
                            overrides=SMALL)
    assert res["dataset"] == "jsb" and np.isfinite(res["test"]) and np.isfinite(res["valid"])
    saved = json.loads((tmp_path / "run" / "bench.json").read_text())
    assert saved["valid_curve"] and saved["valid_curve"][-1][0] == 2
    assert saved["cpu"]["isa"] is not None and saved["torch_threads"] >= 1 and saved["steps"] == 2
    again = cadenza.benchmark("polyphonic", mat, evaluate=tmp_path / "run", device="cpu")
    assert again["test"] == pytest.approx(res["test"])  # scoring is deterministic


def test_an_interrupted_benchmark_resumes_where_it_stopped(tmp_path):
    # A long CPU benchmark cut by a machine reset continues from its checkpoint, not from step 0.
    mat = jsb_mat(tmp_path)
    cadenza.benchmark("polyphonic", mat, tmp_path / "run", max_steps=2, device="cpu", progress=False,
                      overrides=SMALL)
    with pytest.raises(FileExistsError, match="--resume"):
        cadenza.benchmark("polyphonic", mat, tmp_path / "run", max_steps=4, device="cpu", progress=False,
                          overrides=SMALL)
    res = cadenza.benchmark("polyphonic", mat, tmp_path / "run", max_steps=4, device="cpu", progress=False,
                            resume=True)
    assert res["steps"] == 4 and "resumed at step 2" in res["note"]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [r["step"] for r in run["resumes"]] == [2]
    with pytest.raises(ValueError, match="--resume"):
        cadenza.benchmark("polyphonic", mat, tmp_path / "run", evaluate=tmp_path / "run", resume=True)


def test_doctor_reports_and_diagnoses():
    result = cadenza.doctor(smoke=False)
    assert {"report", "diagnoses", "exit_code", "device"} <= set(result)
    assert result["report"]["torch"]["installed"] and result["exit_code"] in (0, 1)
    assert any(d["code"] == "ready" for d in result["diagnoses"]) == (result["exit_code"] == 0)


def test_sample_i_is_the_same_whatever_the_batch(run):
    one = cadenza.generate(run, num_samples=1, max_tokens=40, seed=9)
    many = cadenza.generate(run, num_samples=3, max_tokens=40, seed=9, batch_size=2)
    assert many.ids[0] == one.ids[0]
    assert cadenza.generate(run, num_samples=3, max_tokens=40, seed=9, batch_size=3).ids == many.ids
    assert many.ids[1] != many.ids[0]  # each sample has a stream of its own


def test_note_length_limit_defaults_to_the_training_data(run, store, tmp_path):
    p999 = store.manifest["note_seconds"]["p999"]
    g = cadenza.generate(run, num_samples=2, max_tokens=200, out=tmp_path / "g")
    assert g.run["max_note_seconds"] == p999
    for ids in g.ids:
        notes = store.tokenizer.to_notes(ids)
        assert (notes.end - notes.start).max() <= p999 + 0.011  # one 10 ms step of rounding
    assert cadenza.generate(run, max_tokens=10, max_note_seconds=0).run["max_note_seconds"] is None
    assert cadenza.generate(run, max_tokens=10, max_note_seconds=1.5).run["max_note_seconds"] == 1.5


def test_polyphony_cap_defaults_to_the_training_data(run, store):
    from cadenza.data.statistics import onset_polyphony, polyphony_stats
    from cadenza.models import checkpoint as ckpt

    cap = ckpt.read_meta(ckpt.latest_checkpoint(run))["polyphony"]["all"]
    assert cap == polyphony_stats(store)["all"] >= 1
    g = cadenza.generate(run, num_samples=2, max_tokens=200)
    assert g.run["max_polyphony"] == cap
    assert all(onset_polyphony(store.tokenizer.to_notes(ids)).max(initial=0) <= cap for ids in g.ids)
    two = cadenza.generate(run, num_samples=2, max_tokens=200, max_polyphony=2)
    assert all(onset_polyphony(store.tokenizer.to_notes(ids)).max(initial=0) <= 2 for ids in two.ids)
    assert cadenza.generate(run, max_tokens=10, max_polyphony=0).run["max_polyphony"] is None


def test_corpus_specs_label_pieces_and_keep_their_origin(fake_corpus, tmp_path):
    # 2 of the corpus's 3 scores, spread over it: the first (broken.abc) and the last (the 2nd tune)
    res = cadenza.prepare(corpus="fake:2", out=tmp_path / "store", workers=1, progress=False)
    assert len(res.store) == 1 and res.store.manifest["corpus"] == "fake:2"
    piece = res.store.manifest["pieces"][0]
    assert piece["style"] == "fake" and piece["origin"] == "fake:tunes.abc#1"
    assert [(s["source"], s["style"]) for s in res.skipped] == [("broken.abc", "fake")]
    assert res.store.manifest["styles"]["fake"]["pieces"] == 1
    with pytest.raises(ValueError, match="NAME:COUNT"):
        cadenza.prepare(corpus="fake:many", out=tmp_path / "x")


def test_a_shipped_model_is_found_by_name_and_plays_by_default(run, tmp_path, monkeypatch, capsys):
    from cadenza.cli import main
    from cadenza.models import checkpoint as ckpt
    from cadenza.models import zoo
    from cadenza.training.export import export

    monkeypatch.setattr(zoo, "shipped_root", lambda: tmp_path / "shipped")
    folder = export(run, tmp_path / "shipped" / zoo.DEFAULT)
    assert ckpt.verify(folder) is None and (folder / "run.json").exists()
    assert (folder / "model.safetensors").stat().st_size < ckpt.fingerprint(
        ckpt.resolve(run) / "model.safetensors")["bytes"] * 0.6  # fp16: about half
    assert [m["name"] for m in cadenza.list_models()] == [zoo.DEFAULT]
    g = cadenza.generate(max_tokens=20, seed=1)  # no checkpoint: the shipped model
    assert g.run["checkpoint"] == str(folder) and g.ids[0]
    assert main(["models"]) == 0 and zoo.DEFAULT in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="not a shipped model"):
        zoo.resolve_model("nope")
