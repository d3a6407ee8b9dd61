"""`SamplingConfig`: every out-of-range generation setting is refused in one place, with the
setting's name and its valid range, from the library and from the command line alike."""

from __future__ import annotations

import json

import pytest

import cadenza
from cadenza.cli import main
from cadenza.data.midi import Notes
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Continue
from cadenza.settings import SettingError

# (setting, bad value, the flag, words the message must hold)
BAD = [
    ("top_p", 1.5, "--top-p", "must be in (0, 1], got 1.5"),
    ("top_p", 0.0, "--top-p", "must be in (0, 1], got 0.0"),
    ("top_k", 0, "--top-k", "must be >= 1, got 0"),
    ("seconds", 0.0, "--seconds", "must be in (0, 3600], got 0.0"),
    ("seconds", -5.0, "--seconds", "must be in (0, 3600], got -5.0"),
    ("num_samples", 0, "--num-samples", "must be in [1, 10000], got 0"),
    ("max_tokens", 0, "--max-tokens", "must be in [1, 1000000], got 0"),
    ("temperature", 0.0, "--temperature", "must be in (0, 100], got 0.0"),
    ("temperature", -1.0, "--temperature", "must be in (0, 100], got -1.0"),
    ("batch_size", 0, "--batch-size", "must be in [1, 1024], got 0"),
    ("max_polyphony", -1, "--max-polyphony", "must be in [0, 128], got -1"),
    ("max_note_seconds", -1.0, "--max-note-seconds", "must be in [0, 3600], got -1.0"),
    ("max_note_seconds", 1e308, "--max-note-seconds", "must be in [0, 3600], got 1e+308"),
    ("seconds", float("inf"), "--seconds", "must be in (0, 3600], got inf"),
    ("seed", -1, "--seed", "must be in [0, 4294967296), got -1"),
]


@pytest.mark.parametrize("name,value,flag,words", BAD, ids=[f"{b[0]}={b[1]}" for b in BAD])
def test_library_refuses_out_of_range_settings(name, value, flag, words, tmp_path):
    with pytest.raises(SettingError) as e:
        SamplingConfig(**{name: value}).validate()
    assert e.value.field == name and str(e.value) == f"{name} {words}"
    with pytest.raises(SettingError, match=f"^{name} "):  # before any checkpoint is opened
        cadenza.generate(tmp_path / "no-such-run", **{name: value})


@pytest.mark.parametrize("name,value,flag,words", BAD, ids=[f"{b[0]}={b[1]}" for b in BAD])
def test_cli_exits_2_with_one_line_naming_the_flag(name, value, flag, words, tmp_path, capsys):
    argv = ["generate", "--checkpoint", str(tmp_path / "no-such-run"), flag, str(value)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"cadenza generate: error: {flag} {words}\n"


def test_exclusive_and_dependent_settings():
    for lengths in ({"seconds": 10, "max_tokens": 100}, {"bars": 8, "seconds": 10}):
        with pytest.raises(SettingError, match="max_tokens and bars are exclusive"):
            SamplingConfig(**lengths).validate()
    with pytest.raises(SettingError, match="bpm is not a sampling setting"):
        SamplingConfig.from_dict({"bpm": 120})
    with pytest.raises(SettingError, match="meter must be a time signature such as 4/4"):
        SamplingConfig(meter="4/5").validate()
    with pytest.raises(SettingError, match="unknown key 'H minor'"):
        SamplingConfig(key="H minor").validate()


def test_a_count_must_be_whole_from_json_too():
    with pytest.raises(SettingError, match=r"^num_samples must be a whole number in \[1, 10000\], got 2.5$"):
        SamplingConfig.from_dict({"num_samples": 2.5})
    assert SamplingConfig.from_dict({"num_samples": 2.0}).num_samples == 2  # a whole float is a count


def test_a_primer_cut_is_checked_before_any_file_is_read(tmp_path, capsys):
    with pytest.raises(SettingError, match="^primer_seconds must be > 0, got -3.0$"):
        Continue(Notes.empty(), -3.0)
    with pytest.raises(SettingError, match="^primer_seconds needs a primer to cut$"):
        Continue(seconds=4)
    argv = ["generate", "--checkpoint", str(tmp_path / "no-such-run"), "--primer", str(tmp_path / "no.mid"),
            "--primer-seconds", "-3"]
    assert main(argv) == 2
    assert capsys.readouterr().err == "cadenza generate: error: --primer-seconds must be > 0, got -3.0\n"


def test_config_round_trips_through_json_and_sets_the_token_budget():
    cfg = SamplingConfig(seconds=12.5, top_p=0.9, num_samples=3)
    again = SamplingConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert cfg.token_budget() == int(12.5 * 60) + 64
    assert SamplingConfig(max_tokens=77).token_budget() == 77 and SamplingConfig().token_budget() == 1024
