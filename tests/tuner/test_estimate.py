"""The cost line a run prints before its trials: the trials to go times a trial's seconds on this machine, measured
or estimated from stage 1."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import create_trial

from tests.tuner.helpers import synthetic_trial
from tuner.cli import main
from tuner.config import StudyConfig
from tuner.estimate import cost_line, from_stage1, trial_seconds
from tuner.record import CONSTRAINT_KEYS, TrialRecord


def timed(number: int, seconds: float, *, device: str = "cpu", threads: int = 2) -> optuna.trial.FrozenTrial:
    base = synthetic_trial(number, epsilon=0.5, f1=0.9, constraints=dict.fromkeys(CONSTRAINT_KEYS, -0.5))
    record = TrialRecord.of(base)
    assert record is not None
    record = dataclasses.replace(record, timings={"total": seconds}, device=device, threads=threads)
    return create_trial(state=base.state, value=base.value, params=base.params, distributions=base.distributions,
                        user_attrs=record.attrs(), system_attrs=base.system_attrs)


def test_a_trials_seconds_are_the_median_of_the_study_s_trials_on_this_device_and_thread_count() -> None:
    study = optuna.create_study()
    for number, (seconds, device, threads) in enumerate([(10.0, "cpu", 2), (30.0, "cpu", 2), (20.0, "cpu", 2),
                                                         (500.0, "cpu", 1), (1.0, "cuda", 0)]):
        study.add_trial(timed(number, seconds, device=device, threads=threads))
    assert trial_seconds(study, device="cpu", threads=2) == 20.0  # the one-thread trial is another machine's speed
    assert trial_seconds(study, device="cuda", threads=16) == 1.0  # a GPU's thread count does not matter
    assert trial_seconds(study, device="cpu", threads=4) is None
    assert trial_seconds(optuna.create_study(), device="cpu", threads=2) is None


def test_the_cost_line_names_the_trials_each_one_s_seconds_its_basis_and_the_total() -> None:
    assert cost_line(trials_left=6, seconds=12.4, basis="this run's first trial") == (
        "cost: 6 trial(s) to go, about 12 s each (this run's first trial): about 74 s in this process at most (a "
        "stop rule may end it sooner)")
    assert "about 20 min" in cost_line(trials_left=10, seconds=120.0, basis="b")
    assert "about 2.0 h" in cost_line(trials_left=12, seconds=600.0, basis="b")


def test_before_a_new_studys_first_trial_its_seconds_are_estimated_from_stage_1s_steps(
        study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(search={"ft_epochs_min": 2, "ft_epochs_max": 8}))
    fit = dataclasses.replace(config.fit, stage1_epochs=4, draws_risk=10, draws_privacy=100, draws_utility=20)
    timings = {"finetune": 40.0, "swag": 15.0, "risk": 5.0}  # 10 s an epoch, 0.5 s a draw over the training set
    seconds, basis = from_stage1(timings, fit=fit, search=config.search, num_train=400, num_test=100) or (0, "")
    assert seconds == pytest.approx(10 * 5 + 15 + 0.5 * (100 + 20 * 100 / 400))
    assert basis == "estimated from stage 1's steps on this machine: 400 training records, 5 epochs on average, " \
        "100 privacy draws"
    assert from_stage1({"finetune": 1.0}, fit=fit, search=config.search, num_train=400, num_test=100) is None


@pytest.mark.fits
def test_a_new_study_says_its_cost_before_its_first_trial_and_again_after_it(
        study_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"n_trials": 2})
    main(["run", str(path)])
    lines = capsys.readouterr().out.splitlines()
    costs = [number for number, line in enumerate(lines) if line.startswith("cost: ")]
    trials = [number for number, line in enumerate(lines) if re.match(r"trial +\d+  c=", line)]
    assert len(costs) == 2 and len(trials) == 2 and costs[0] < trials[0] < costs[1] < trials[1]
    assert lines[costs[0]].startswith("cost: 2 trial(s) to go, about ")
    assert "(estimated from stage 1's steps on this machine: " in lines[costs[0]]
    assert lines[costs[1]].startswith("cost: 1 trial(s) to go, about ")
    assert "(this run's first trial)" in lines[costs[1]]
