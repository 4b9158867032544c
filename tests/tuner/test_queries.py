"""Reading a study back: the best feasible trial, the closest one, and what a trial violates."""

from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState

from tests.tuner.helpers import synthetic_trial
from tuner import best_feasible, closest_trial
from tuner.queries import describe_violations, format_table, trial_rows, trials_run, violated
from tuner.record import CONSTRAINT_KEYS


def test_best_feasible_is_the_lowest_epsilon_among_feasible_trials() -> None:
    study = optuna.create_study()
    ok = dict.fromkeys(CONSTRAINT_KEYS, -0.1)
    # the lowest ε, but infeasible
    study.add_trial(synthetic_trial(0, epsilon=2.0, f1=0.9, constraints={**ok, "f1_macro": 0.3}))
    study.add_trial(synthetic_trial(1, epsilon=6.0, f1=0.9, constraints=ok))
    study.add_trial(synthetic_trial(2, epsilon=4.0, f1=0.8, constraints=ok))
    study.add_trial(synthetic_trial(3, epsilon=4.0, f1=0.85, constraints=ok))  # same ε, better F1
    study.add_trial(synthetic_trial(4, epsilon=1.0, f1=0.0, constraints=dict.fromkeys(CONSTRAINT_KEYS, 10.0),
                                    state=TrialState.PRUNED))
    best = best_feasible(study)
    assert best is not None and best.number == 3


def test_without_a_feasible_trial_the_closest_is_the_smallest_total_violation() -> None:
    study = optuna.create_study()
    study.add_trial(synthetic_trial(0, epsilon=20.0, f1=0.9, constraints={**dict.fromkeys(CONSTRAINT_KEYS, 0.0),
                                                                          "epsilon": 1.0}))
    study.add_trial(synthetic_trial(1, epsilon=11.0, f1=0.5, constraints={**dict.fromkeys(CONSTRAINT_KEYS, -1.0),
                                                                          "epsilon": 0.1, "f1_macro": 0.2}))
    study.add_trial(synthetic_trial(2, epsilon=math.inf, f1=0.0, constraints=dict.fromkeys(CONSTRAINT_KEYS, 10.0),
                                    state=TrialState.PRUNED))
    assert best_feasible(study) is None
    closest = closest_trial(study)
    assert closest is not None and closest.number == 1  # 0.1 + 0.2 < 1.0


def test_trials_that_all_miss_epsilon_beyond_the_cap_rank_by_their_unclipped_miss() -> None:
    """ε 600, 1200 and 900 against a target of 50 all store the ε constraint clipped at +10 (Optuna needs bounded
    values): the closest is the ε 600 trial, and its miss reads +11.000, not the cap."""
    study = optuna.create_study()
    study.set_user_attr("definition", {"targets": {"epsilon_cap": 50.0}})
    for number, epsilon in enumerate((1200.0, 600.0, 900.0)):
        study.add_trial(synthetic_trial(number, epsilon=epsilon, f1=0.9,
                                        constraints={**dict.fromkeys(CONSTRAINT_KEYS, -0.1), "epsilon": 10.0}))
    closest = closest_trial(study)
    assert closest is not None and closest.number == 1
    assert describe_violations(closest, epsilon_cap=50.0) == "epsilon +11.000"
    assert describe_violations(closest) == "epsilon +10.000"  # as stored


def test_what_an_early_stop_did_not_measure_is_neither_missed_nor_counted_in_the_closest_choice() -> None:
    study = optuna.create_study()
    unmeasured = ("f1_macro", "f1_weighted", "fit_spread", "fit_spikes")
    study.add_trial(synthetic_trial(0, epsilon=13.0, f1=0.9, unmeasured=unmeasured, constraints={
        **dict.fromkeys(unmeasured, 1.0), "epsilon": 0.3}))
    study.add_trial(synthetic_trial(1, epsilon=11.0, f1=0.5, constraints={**dict.fromkeys(CONSTRAINT_KEYS, -1.0),
                                                                          "epsilon": 0.1, "f1_macro": 0.3}))
    early = study.trials[0]
    assert violated(early) == {"epsilon": 0.3}
    assert describe_violations(early) == "epsilon +0.300; not measured: f1_macro, f1_weighted, fit_spread, fit_spikes"
    closest = closest_trial(study)  # 0.3 measured < 0.1 + 0.3: unmeasured targets are not misses
    assert closest is not None and closest.number == 0


def test_the_trial_table_shows_a_queued_trials_point_and_judges_no_unfinished_trial() -> None:
    """A re-queued WAITING trial showed `c -` and a RUNNING one "feasible no"; the count said "2 trials" for one
    finished: the table shows the queued point and "-" until a trial ends, the count names running and waiting."""
    study = optuna.create_study()
    study.add_trial(synthetic_trial(0, epsilon=0.5, f1=0.9, constraints=dict.fromkeys(CONSTRAINT_KEYS, -0.5)))
    study.enqueue_trial({"c": 0.4, "ft_epochs": 9})
    running = study.ask()  # takes the queued point
    study.enqueue_trial({"c": 0.6, "ft_epochs": 3})
    assert running.number == 1
    rows = {row["number"]: row for row in trial_rows(study)}
    assert (rows[1]["state"], rows[1]["c"], rows[1]["feasible"]) == ("RUNNING", 0.4, None)
    assert (rows[2]["state"], rows[2]["c"], rows[2]["ft_epochs"], rows[2]["feasible"]) == ("WAITING", 0.6, 3, None)
    table = format_table(list(rows.values())).splitlines()
    assert table[3].split()[1:4] == ["RUNNING", "0.400", "9"] and table[3].split()[-2] == "-"
    assert table[4].split()[1:4] == ["WAITING", "0.600", "3"] and table[4].split()[-2] == "-"
    assert trials_run(study) == {"complete": 1, "pruned": 0, "fail": 0, "running": 1, "waiting": 1, "total": 1}
