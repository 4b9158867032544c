"""``swagppm-tune fit``: one fit from a study file, its line, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner._cli import main

STUDY = """
[study]
name = "t"
[data]
source = "synthetic"
synthetic_size = 240
synthetic_classes = 4
[model]
name_or_path = "tiny"
tiny_hidden_size = 32
tiny_layers = 1
[swagppm]
stage1_epochs = 4
swag_epochs = 3
draws_risk = 4
draws_privacy = 5
draws_utility = 3
device = "cpu"
cache_dir = "cache"
"""


def test_fit_prints_a_line_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    code = main(["fit", str(study), "--c", "0.7", "--ft-epochs", "2", "--json", str(tmp_path / "r.json")])
    assert code == 0
    line = capsys.readouterr().out
    assert "c=0.700 epochs= 2" in line and "eps=" in line and "F1 macro" in line
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["epsilon"] == 2 * max(result["max_delta"]) and len(result["max_delta"]) == 5
    assert (tmp_path / "cache").is_dir()  # relative cache_dir resolved beside the study file


def test_bad_study_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY.replace('source = "synthetic"', 'source = "missing.csv"'))
    assert main(["fit", str(study)]) == 2
    err = capsys.readouterr().err
    assert "missing.csv" in err and "file not found" in err and "Traceback" not in err
    study.write_text(STUDY.replace("draws_utility = 3", "draws_utilty = 3"))
    assert main(["fit", str(study)]) == 2
    assert "draws_utilty" in capsys.readouterr().err


def test_release_of_a_tiny_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(tmp_path / "out")]) == 2
    assert "tokenizer" in capsys.readouterr().err
