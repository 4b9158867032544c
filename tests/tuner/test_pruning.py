"""``tuner.pruning`` without fits: where the privacy draws stop, what is reported, and how a stopped trial reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from tests.tuner.helpers import result, tight, with_a_feasible_trial
from tuner import StudyConfig
from tuner.objective import Objective, record_outcome
from tuner.outcome import judge
from tuner.pruning import REPORT_EVERY, DrawPruner, draw_pruner, pruned_outcome
from tuner.record import TrialRecord
from tuner.study import open_storage, open_study


def _feed(pruner: DrawPruner, series: list[float]) -> int:
    """The draws ``stage2.fit`` would run with ``pruner`` as ``on_draws`` on this max-delta series."""
    for draws in range(1, len(series) + 1):
        if pruner(draws, 2 * max(series[:draws])):
            return draws
    return len(series)


def test_the_draws_stop_at_the_first_running_epsilon_above_the_lower_bound() -> None:
    series = [1.0, 2.0, 2.5, 2.4, 3.0, 3.5]
    assert _feed(DrawPruner(cap=5.0), series) == 5  # 2·2.5 = 5 is not above the cap; 2·3.0 is
    best = DrawPruner(cap=10.0, best=4.0)
    assert _feed(best, series) == 3 and best.stopped_by == "best"
    capped = DrawPruner(cap=4.5, best=4.8)
    assert _feed(capped, series) == 3 and capped.stopped_by == "cap"
    never = DrawPruner(cap=None)
    assert _feed(never, series) == len(series) and never.stopped_by is None and never.bound == float("inf")
    with pytest.raises(ValueError, match="every 1 or more"):
        DrawPruner(cap=1.0, every=0)


def test_the_running_epsilon_is_reported_every_few_draws_and_at_the_stop() -> None:
    study = optuna.create_study()
    trial = study.ask()
    series = [0.1] * 12 + [5.0]
    pruner = DrawPruner(cap=1.0, trial=trial)
    assert _feed(pruner, series) == 13
    reported = study.trials[0].intermediate_values
    assert reported == {**{d: pytest.approx(0.2) for d in range(REPORT_EVERY, 13, REPORT_EVERY)}, 13: 10.0}


def test_a_study_minimising_epsilon_stops_at_its_cap_and_its_best_feasible_trial(
        study_file: Callable[..., Path]) -> None:
    path = study_file(targets={"require_well_fit": False})
    study = with_a_feasible_trial(path)
    config = StudyConfig.from_toml(path)
    assert config.early_stop
    pruner = draw_pruner(study.ask(), config)
    assert pruner.cap == config.targets.epsilon_cap and pruner.trial is not None
    assert pruner.best == pytest.approx(study.trials[0].value)


def test_stop_above_best_false_keeps_the_cap_alone(study_file: Callable[..., Path]) -> None:
    path = study_file(targets={"require_well_fit": False, "stop_above_best": False})
    study = with_a_feasible_trial(path)
    pruner = draw_pruner(study.ask(), StudyConfig.from_toml(path))
    assert pruner.cap is not None and pruner.best is None and pruner.trial is not None


def test_a_pareto_study_stops_at_its_cap_only_and_reports_nothing(study_file: Callable[..., Path]) -> None:
    path = study_file(study={"objective": "pareto"}, targets={"require_well_fit": False})
    config = StudyConfig.from_toml(path)
    pruner = draw_pruner(optuna.create_study(directions=["minimize", "maximize"]).ask(), config)
    assert pruner.cap == config.targets.epsilon_cap and pruner.best is None and pruner.trial is None


def test_without_the_early_stop_the_draws_run_on_and_are_reported(study_file: Callable[..., Path]) -> None:
    path = study_file(targets={"early_stop": False, "require_well_fit": False})
    study = with_a_feasible_trial(path)
    pruner = draw_pruner(study.ask(), StudyConfig.from_toml(path))
    assert pruner.cap is None and pruner.best is None and pruner.trial is not None


def test_a_trial_stopped_by_the_best_feasible_one_says_so(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(targets={"require_well_fit": False}))
    series = tight(median=3.0, n=12)
    pruner = DrawPruner(cap=config.targets.epsilon_cap, best=5.0)
    drawn = _feed(pruner, series)
    stopped = result(series[:drawn], f1_macro=[], f1_weighted=[], epsilon_is_lower_bound=True,
                     draws_skipped=len(series) - drawn)
    outcome = pruned_outcome(judge(stopped, targets=config.targets, search=config.search), pruner, config.search)
    assert drawn == 1 and not outcome.feasible and outcome.constraints["epsilon"] < 0
    assert "above the best feasible trial's 5" in outcome.reasons[0]
    assert outcome.recommendation.action == "lower_c"
    assert "infeasible (f1_macro unmeasured, f1_weighted unmeasured)" in outcome.line()
    capped = DrawPruner(cap=1.0)
    _feed(capped, series)
    at_the_cap = judge(stopped, targets=config.targets, search=config.search)
    assert pruned_outcome(at_the_cap, capped, config.search) is at_the_cap


@pytest.mark.fits
def test_a_real_trial_above_the_best_feasible_epsilon_stops_at_its_first_draw(
        study_file: Callable[..., Path]) -> None:
    """A study whose best feasible trial has ε = 2e-6: the next real trial's first draw is above it, so it runs one
    privacy draw, no utility draw, reports its running ε and is recorded as stopped by the best trial."""
    path = study_file(targets={"require_well_fit": False})
    config = StudyConfig.from_toml(path)
    storage = open_storage(config)
    study = open_study(config, storage=storage)
    made_up = study.ask()
    made = config.search.suggest(made_up)
    c, epochs = made.c, made.ft_epochs
    outcome = judge(result(tight(median=1e-6), c=c, epochs=epochs), targets=config.targets, search=config.search)
    record_outcome(made_up, outcome, storage=storage)
    study.tell(made_up, outcome.objective_values("epsilon"))
    objective = Objective(config, storage=storage, echo=lambda line: None)
    try:
        study.optimize(objective, n_trials=1)
    finally:
        objective.close()
    trial = study.trials[1]
    record = TrialRecord.of(trial)
    assert record is not None and record.epsilon_is_lower_bound and record.draws_privacy == 1
    assert record.draws_skipped == config.fit.draws_privacy - 1 and record.f1_macro_median is None
    assert "above the best feasible trial's" in record.reasons[0]
    assert trial.intermediate_values == {1: pytest.approx(record.epsilon)}
