"""Study files: defaults, paths resolved beside the file, and errors naming the table and key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from swagppm import ConfigError
from tuner import StartPoint, StudyConfig, masked_url
from tests.tuner.conftest import write_study
from tuner._cli import main

REPO = Path(__file__).resolve().parents[2]


def test_defaults_and_paths_beside_the_file(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(write_study(tmp_path / "small.toml", {"study": {"name": "small"}}))
    assert config.storage_url == f"sqlite:///{tmp_path / 'small.db'}"
    assert config.artifact_dir == tmp_path / "small-artifacts"
    assert config.fit.model.name_or_path == "distilroberta-base"  # the paper's model by default
    assert config.study.sampler == "tpe" and config.study.objective == "epsilon"
    assert config.search.start == (StartPoint(1.0, 7),)  # the guide's starting point
    assert config.targets.epsilon == 10.0 and config.targets.max_f1_degradation == 0.10
    assert config.targets.statistic == "median" and config.targets.require_well_fit
    assert config.early_stop  # on by default ...
    flowchart = StudyConfig.from_toml(study_file(study={"sampler": "flowchart"}))
    assert not flowchart.early_stop  # ... except for the flowchart, which reads whole series


def test_relative_sqlite_and_artifacts_resolve_beside_the_file(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file(study={"storage": "sqlite:///runs/s.db", "artifacts": "art"}))
    assert config.storage_url == f"sqlite:///{tmp_path / 'runs' / 's.db'}"
    assert config.artifact_dir == tmp_path / "art"


def test_password_is_masked_everywhere_it_is_shown(study_file: Callable[..., Path]) -> None:
    url = "postgresql+psycopg://tuner:s3cret@db.example:5432/studies"
    assert masked_url(url) == "postgresql+psycopg://tuner:***@db.example:5432/studies"
    config = StudyConfig.from_toml(study_file(study={"storage": url}))
    assert "s3cret" not in str(config.to_dict())


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"study": {"sampler": "cmaes"}}, "study.sampler = 'cmaes'"),
        ({"study": {"n_trials": 0}}, "study.n_trials = 0"),
        ({"study": {"name": "a b"}}, "study.name = 'a b'"),
        ({"study": {"storage": "not a url"}}, "[study]: storage = 'not a url' is not a database URL"),
        ({"study": {"sampler": "flowchart", "objective": "pareto"}}, "cannot run study.objective = 'pareto'"),
        ({"search": {"c_max": 0.2}}, "search.c_max = 0.2: must be greater than c_min = 0.3"),
        ({"search": {"ft_epochs_max": 2.5}}, "[search]: ft_epochs_max = 2.5 has the wrong type"),
        ({"search": {"c_mni": 0.1}}, "[search]: unknown key(s) c_mni"),
        ({"search": {"g_min": 0.0}}, "search.g_min and search.g_max: give both"),
        ({"search": {"start": [{"c": 2.0, "ft_epochs": 6}]}}, "search.start[0].c = 2.0: must be within"),
        ({"search": {"start": [{"c": 1.0}]}}, "start[0]: missing required key(s) ft_epochs"),
        ({"search": {"start": 3}}, "start must be a list of tables"),
        ({"targets": {"epsilon": -1.0}}, "targets.epsilon = -1.0"),
        ({"targets": {"statistic": "mean"}}, "targets.statistic = 'mean'"),
        ({"targets": {"max_f1_degradation": 1.5}}, "targets.max_f1_degradation = 1.5"),
        ({"study": {"sampler": "flowchart"}, "targets": {"early_stop": True}}, "early_stop = true cannot be used"),
        ({"swagppm": {"draws_privacy": 0}}, "swagppm.draws_privacy = 0"),
        ({"serach": {"c_min": 0.1}}, "unknown table(s) [serach]"),
    ],
)
def test_bad_values_name_the_table_and_key(
    study_file: Callable[..., Path], changes: dict[str, dict[str, object]], expected: str
) -> None:
    path = study_file(**changes)
    with pytest.raises(ConfigError) as info:
        StudyConfig.from_toml(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value) or "." in expected  # table-level errors also name the file


def test_missing_name_and_missing_file(study_file: Callable[..., Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"name": None})
    with pytest.raises(ConfigError, match=r"\[study\]: name is required"):
        StudyConfig.from_toml(path)
    assert main(["status", str(tmp_path / "nope.toml")]) == 2
    err = capsys.readouterr().err
    assert "nope.toml: study file not found" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["demo.toml", "osha.toml"])
def test_shipped_studies_are_valid(name: str) -> None:
    config = StudyConfig.from_toml(REPO / "studies" / name)
    assert config.study.name == Path(name).stem
    assert config.search.start[0] == StartPoint(1.0, 7)
