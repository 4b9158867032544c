"""The verbs of many workers that need no server: ``create`` (a study and its start points, no trial) and the
refusals of ``proxy``; ``jobs`` and ``launch`` on real jobs are in test_cluster_jobs.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.tuner.helpers import one_error_line
from tuner.cli import main
from tuner.config import StudyConfig
from tuner.study import open_study
from tuner.tuning import ACCOUNTED_TRIALS, CLAIM


def test_create_makes_the_study_and_its_start_points_without_a_trial_and_again_changes_nothing(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"storage": "journal:s.log"})
    for _ in range(2):
        assert main(["create", str(path)]) == 0
        assert capsys.readouterr().out == (
            f"study 'small' in journal:{tmp_path / 's.log'}: 0 finished trial(s), 2 waiting; workers join it with "
            f"`swagppm-tune worker {path}`\n")
    study = open_study(StudyConfig.from_toml(path), create=False)
    assert [t.state for t in study.get_trials()] == [TrialState.WAITING, TrialState.WAITING]
    assert study.user_attrs[CLAIM]["terms"]["accounting"] is None and "definition" in study.user_attrs
    assert not (tmp_path / "small-artifacts").exists() and not (tmp_path / "cache").exists()  # no fit, no stage 1


def test_create_fixes_an_accounted_studys_terms_once(study_file: Callable[..., Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``open_study``: the accounting and the number of trials K are drawn when the study is created."""
    path = study_file(study={"storage": "journal:s.log", "accounted": True, "sampler": "random",
                             "public_eval": "public.jsonl", "max_records": 1000})
    assert main(["create", str(path)]) == 0
    assert "0 waiting" in capsys.readouterr().out  # an accounted study enqueues no fixed point
    study = open_study(StudyConfig.from_toml(path), create=False)
    drawn = study.user_attrs[ACCOUNTED_TRIALS]
    terms = study.user_attrs[CLAIM]["terms"]
    assert terms["epsilon_cap"] == 50.0 and terms["mode"] == "accounted"
    assert main(["create", str(path)]) == 0
    assert open_study(StudyConfig.from_toml(path), create=False).user_attrs[ACCOUNTED_TRIALS] == drawn


def test_create_on_sqlite_is_fine_for_one_process(study_file: Callable[..., Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create", str(study_file())]) == 0
    assert "0 finished trial(s), 2 waiting" in capsys.readouterr().out


def test_the_proxy_listens_on_the_network_only_when_told(study_file: Callable[..., Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", str(study_file()), "--host", "0.0.0.0"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--host 0.0.0.0 would serve the study database to the network" in line and "--expose-to-network" in line


def test_the_proxy_refuses_a_storage_that_is_no_server_database(study_file: Callable[..., Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["proxy", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("swagppm-tune: error: storage sqlite:///") and "serves a PostgreSQL or MySQL" in line
