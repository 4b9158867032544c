"""The cost line a run prints before its trials: the trials to go times a trial's seconds on this machine."""

from __future__ import annotations

import dataclasses

import optuna
from optuna.trial import create_trial

from tests.tuner.helpers import synthetic_trial
from tuner.estimate import cost_line, trial_seconds
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
