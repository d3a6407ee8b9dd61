"""bench_generate's vocabularies, and the docs' generate tables: one per vocabulary, each from its
own newest result file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_generate")


@pytest.fixture(scope="module")
def table():
    return load_benchmark("bench_table")


def test_the_note_vocabulary_races_from_the_shipped_models_prompt(bench):
    tok, prompts = bench.vocabulary("notes")
    assert tok.vocab_size == 718 and list(tok.styles) == ["bach", "palestrina", "irish", "german", "chinese"]
    assert prompts(2).tolist() == [[tok.style_id("bach"), tok.autoregress_id, tok.bos_id]] * 2
    hf = bench.hf_model(tok).config
    assert (hf.vocab_size, hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (718, tok.bos_id, tok.eos_id,
                                                                                  tok.pad_id)
    assert bench.cadenza_model("rope", "notes").config.vocab_size == 718


def test_the_performance_vocabulary_races_as_before(bench):
    tok, prompts = bench.vocabulary("performance")
    assert tok.vocab_size == 391 and prompts(1).tolist() == [[tok.bos_id]]
    assert bench.cadenza_model("rope").config.vocab_size == 391


def _result(folder: Path, name: str, ratio: float, vocab: str | None, size: int = 391) -> None:
    rows = [{"generator": g, "tokens_per_s": {"1": r * 100}, "vs_hf": {"1": r}}
            for g, r in (("HF GPT2 generate", 1.0), ("cadenza rope, compiled step", ratio))]
    r = {"benchmark": "generate", "new_tokens": 512, "repeats": 3, "batches": [1], "rows": rows,
         "command": f"python benchmarks/bench_generate.py --out {name}"}
    if vocab is not None:
        r |= {"vocab": vocab, "vocab_size": size}
    (folder / "generate").mkdir(parents=True, exist_ok=True)
    (folder / "generate" / name).write_text(json.dumps(r))


def test_each_vocabulary_gets_its_own_newest_run(table, tmp_path, monkeypatch):
    monkeypatch.setattr(table, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    _result(table.RESULTS, "generate-a.json", 5.0, None)  # from before --vocab: the performance one
    _result(table.RESULTS, "generate-notes.json", 3.0, "notes", 718)
    _result(table.RESULTS, "generate-z.json", 4.5, "performance")
    _result(table.RESULTS, "generate-notes-0.json", 9.0, "notes", 718)  # sorts first: older
    # another benchmark's file in the folder (bench_vocab_speed), newest by name: not a generate run
    (table.RESULTS / "generate" / "vocab-speed.json").write_text(json.dumps({"benchmark": "vocab-speed", "rows": []}))
    performance, notes = "\n".join(table.TABLES["generate"]()), "\n".join(table.TABLES["generate-notes"]())
    assert "generate-z.json" in performance and "**met** (4.50x)" in performance
    assert "generate-notes.json" in notes and "**not met** (3.00x)" in notes
    assert "The notes vocabulary (718 ids)" in notes and "The performance vocabulary (391 ids)" in performance
