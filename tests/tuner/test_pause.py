"""A study's pause (``tuner.pause``): the rule on real storages, and ``jobs --pause``/``--resume``, ``run``,
``worker`` and ``status`` on a paused SQLite study, in this process (no fit: a paused study starts none)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.tuner.helpers import stored, with_a_feasible_trial
from tuner import StudyConfig
from tuner.cli import main
from tuner.pause import PAUSED, StopWhenPaused, pause_of, pause_study, resume_study


def test_a_pause_is_recorded_once_kept_until_resumed_and_then_reads_as_none() -> None:
    study = optuna.create_study()
    assert pause_of(study) is None and resume_study(study) is None
    pause, made = pause_study(study)
    assert made and pause.by == "jobs --pause" and pause.since.endswith("+00:00")  # UTC
    assert study.user_attrs[PAUSED] == {"since": pause.since, "by": pause.by}
    assert pause_study(study, by="someone else") == (pause, False)  # the first pause is kept
    assert pause_of(study) == pause
    assert resume_study(study) == pause
    assert pause_of(study) is None and resume_study(study) is None


def test_a_run_stops_after_the_trial_during_which_the_study_was_paused() -> None:
    """The trial that runs when the pause lands is finished and told as usual; no trial starts after it."""
    study = optuna.create_study()
    stop = StopWhenPaused()

    def objective(trial: optuna.Trial) -> float:
        if trial.number == 1:
            pause_study(study)  # as `jobs --pause` does from another process, mid-trial
        return float(trial.number)

    study.optimize(objective, n_trials=10, callbacks=[stop])
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert stop.pause == pause_of(study) and stop.pause is not None


def test_a_paused_study_still_verifies_its_sealed_claim(study_file: Callable[..., Path]) -> None:
    """The pause is an attribute of its own, outside the sealed claim: the study opens as before, and so after
    a resume."""
    path = study_file()
    pause_study(with_a_feasible_trial(path))
    assert pause_of(stored(path)) is not None  # stored() opens the study, which verifies the claim
    resume_study(stored(path))
    assert pause_of(stored(path)) is None


def test_jobs_pause_then_run_and_worker_start_no_trial_and_say_how_to_resume(
        study_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    name = StudyConfig.from_toml(path).study.name
    assert main(["jobs", str(path), "--pause"]) == 0
    out = capsys.readouterr().out
    assert out == (f"paused study {name!r}: every worker stops after its running trial (0 running now) and none "
                   f"starts a new one; `swagppm-tune jobs {path} --resume` lifts the pause\n")
    pause = pause_of(stored(path))
    assert pause is not None
    since = pause.since
    line = (f"study {name!r} is paused (since {since} by jobs --pause): `swagppm-tune jobs {path} --resume`, then "
            "launch or run it again")
    assert main(["jobs", str(path), "--pause"]) == 0
    assert capsys.readouterr().out.startswith(f"study {name!r} was already paused (since {since}): ")
    assert main(["run", str(path)]) == 0
    assert capsys.readouterr().out == f"stopped: {line} (0 new finished trials)\n"
    assert main(["worker", str(path)]) == 0
    assert capsys.readouterr().out == f"stopped: {line}\n"
    assert len(stored(path).trials) == 1  # the made-up trial only: nothing started
    assert main(["status", str(path)]) == 0
    assert f"\n{line}\n" in capsys.readouterr().out
    assert main(["jobs", str(path), "--resume"]) == 0
    assert capsys.readouterr().out == (f"resumed study {name!r} (paused since {since}): `swagppm-tune launch {path}` "
                                       f"or `swagppm-tune run {path}` goes on with it\n")
    assert main(["jobs", str(path), "--resume"]) == 0
    assert capsys.readouterr().out == f"study {name!r} is not paused: nothing to resume\n"
    assert main(["status", str(path)]) == 0
    assert line not in capsys.readouterr().out


def test_pause_resume_and_cancel_are_one_at_a_time(study_file: Callable[..., Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["jobs", str(path), "--pause", "--cancel"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
