"""The flags of `cadenza generate` and `cadenza train` are the settings dataclasses' fields: each
field has its flag in --help, with the field's doc, its range or choices, and sets that field."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cadenza.cli import main, parse_args
from cadenza.generation.config import SamplingConfig
from cadenza.models.config import ModelConfig
from cadenza.settings import describe_range
from cadenza.training.config import TrainConfig, resolve

VERBS = {"generate": [SamplingConfig], "train": [ModelConfig, TrainConfig]}
# flags a user has typed since before they were made from the fields: they must keep working
KEPT = {"generate": ["--unconstrained", "--no-eos", "--no-compile", "--seconds", "--max-tokens", "--temperature",
                     "--top-p", "--style", "--guidance", "--primer"],
        "train": ["--model", "--attention", "--precision", "--device", "--max-steps", "--max-minutes",
                  "--batch-size", "--context", "--grad-checkpoint", "--compile", "--deterministic", "--seed",
                  "--init"]}


def help_entries(verb: str, capsys) -> dict[str, str]:
    """`cadenza VERB --help` as {flag: its help entry, whitespace collapsed}."""
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    entries: list[list[str]] = []
    current = None  # the entry being read, None outside one (usage, titles, text)
    for line in capsys.readouterr().out.splitlines():
        if re.match(r"^  -", line):
            current = [line]
            entries.append(current)
        elif current is not None and line.startswith("    "):
            current.append(line)
        else:
            current = None
    out = {}
    for lines in entries:
        flags = re.findall(r"--[a-z0-9-]+", lines[0].strip().split("  ")[0])  # the first column only
        for flag in flags:
            out[flag] = " ".join(" ".join(lines).split())
    return out


def flag_of(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


@pytest.mark.parametrize("verb", VERBS)
def test_every_field_has_its_flag_with_its_doc_and_range(verb, capsys):
    entries = help_entries(verb, capsys)
    for cls in VERBS[verb]:
        for f in dataclasses.fields(cls):
            entry = entries.get(flag_of(f))
            assert entry is not None, f"{cls.__name__}.{f.name} has no {flag_of(f)} in `cadenza {verb} --help`"
            assert " ".join(f.metadata["doc"].split()).rstrip(")") in entry, (f.name, entry)
            if f.metadata.get("choices"):
                assert "{" + ",".join(f.metadata["choices"]) + "}" in entry, (f.name, entry)
            elif describe_range(dict(f.metadata)):
                assert describe_range(dict(f.metadata)) in entry, (f.name, entry)
    assert set(KEPT[verb]) <= set(entries)


def test_generate_flags_set_their_fields():
    a = parse_args(["generate", "--unconstrained", "--no-eos", "--no-compile", "--no-use-cache", "--seconds", "8",
                    "--top-p", "0.9", "--style", "jig", "--guidance", "2"])
    given = {f.name: getattr(a, f.name) for f in dataclasses.fields(SamplingConfig) if getattr(a, f.name) is not None}
    assert given == {"constrained": False, "stop_at_eos": False, "compile": False, "use_cache": False,
                     "seconds": 8.0, "top_p": 0.9, "style": "jig", "guidance": 2.0}
    with pytest.raises(SystemExit):  # one length: tokens or seconds
        parse_args(["generate", "--seconds", "8", "--max-tokens", "100"])


def test_train_flags_override_the_preset_and_key_value_comes_last():
    a = parse_args(["train", "--preset", "tiny", "--d-model", "128", "--no-balance-styles", "--grad-checkpoint",
                    "--lr", "0.01", "lr=0.02"])
    direct = {f.name: getattr(a, f.name) for cls in VERBS["train"] for f in dataclasses.fields(cls)}
    cfg = resolve(a.preset, None, a.overrides, **direct)
    assert cfg.model.d_model == 128 and cfg.train.grad_checkpoint and not cfg.train.balance_styles
    assert cfg.train.lr == 0.02  # key=value overrides the flag
    assert cfg.model.n_layers == resolve("tiny").model.n_layers  # a flag left out leaves the preset's value


def test_prepare_takes_a_tokenizers_options(tmp_path, capsys, fake_corpus):
    import json

    assert main(["prepare", "--corpus", "fake", "--tokenizer", "metrical", "--tokenizer-option", "lookahead=true",
                 "--out", str(tmp_path / "s"), "--quiet", "--workers", "1"]) == 0
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["tokenizer"]["params"]["lookahead"] is True
    assert main(["prepare", "--corpus", "fake", "--tokenizer", "metrical", "--tokenizer-option", "nope=1",
                 "--out", str(tmp_path / "t"), "--quiet"]) == 2
    assert "--tokenizer-option: metrical takes no nope" in capsys.readouterr().err
