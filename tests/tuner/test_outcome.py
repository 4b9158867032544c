"""Judging a fit: constraints with fixed keys, early-stopped and catastrophic fits, aggregates only."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scorers
from scorers import MIN_DRAWS
from tests.tuner.helpers import result, tight
from tuner import SearchSpace, Targets
from tuner.outcome import judge
from tuner.record import CONSTRAINT_KEYS

TARGETS = Targets(epsilon_cap=10.0)
SEARCH = SearchSpace()


def test_a_good_fit_is_feasible_with_every_constraint_key() -> None:
    outcome = judge(result(tight()), targets=TARGETS, search=SEARCH)
    assert outcome.label == "well_fit" and outcome.feasible
    assert tuple(outcome.constraints) == CONSTRAINT_KEYS
    assert all(v <= 0 for v in outcome.constraints.values())
    # golden: epsilon = 2 * max; constraint = eps / target - 1
    assert outcome.constraints["epsilon"] == pytest.approx(2 * max(tight()) / 10 - 1)
    assert outcome.recommendation.action == "stop"
    assert outcome.objective_values("epsilon") == pytest.approx(2 * max(tight()))
    eps, macro = outcome.objective_values("pareto")  # type: ignore[misc]
    assert macro == pytest.approx(np.median(result(tight()).f1_macro))


def test_epsilon_above_target_is_infeasible_and_lowers_c() -> None:
    outcome = judge(result(tight(median=6.0)), targets=TARGETS, search=SEARCH)
    assert outcome.label == "well_fit" and not outcome.feasible
    assert outcome.constraints["epsilon"] > 0 and outcome.constraints["f1_macro"] <= 0
    assert outcome.recommendation.action == "lower_c"
    assert (outcome.recommendation.c, outcome.recommendation.epochs) == (0.85, 7)


def test_an_early_stop_keeps_the_lower_bound_and_counts_what_it_did_not_measure_as_unmet() -> None:
    fit = result([4.0, 5.5], f1_macro=[], f1_weighted=[], epsilon=11.0, epsilon_is_lower_bound=True, draws_skipped=498)
    outcome = judge(fit, targets=TARGETS, search=SEARCH)
    assert outcome.label == "not_judged" and outcome.utility is None and not outcome.feasible
    # what a sampler reads: the region does not meet the targets it never measured (by a whole target)
    assert outcome.constraints == {"epsilon": pytest.approx(0.1), "f1_macro": 1.0, "f1_weighted": 1.0,
                                   "fit_spread": 1.0, "fit_spikes": 1.0}
    assert outcome.unmeasured == ("f1_macro", "f1_weighted", "fit_spread", "fit_spikes")
    assert "stopped after 2 of 500" in outcome.reasons[0]
    attrs = outcome.attributes()
    assert attrs["epsilon_is_lower_bound"] and attrs["draws_skipped"] == 498 and attrs["f1_macro_median"] is None
    assert attrs["unmeasured"] == ["f1_macro", "f1_weighted", "fit_spread", "fit_spikes"]
    line = outcome.line()  # what a user reads: only epsilon is missed; the rest was not measured
    assert "F1 not measured (498 privacy draws skipped)" in line and "infeasible (epsilon)" in line
    assert outcome.objective_values("pareto") == (11.0, 0.0)


def test_an_early_stop_without_a_fit_requirement_leaves_the_fit_constraints_at_zero() -> None:
    fit = result([4.0, 5.5], f1_macro=[], f1_weighted=[], epsilon=11.0, epsilon_is_lower_bound=True, draws_skipped=498)
    outcome = judge(fit, targets=Targets(epsilon_cap=10.0, require_well_fit=False), search=SEARCH)
    assert outcome.unmeasured == ("f1_macro", "f1_weighted")
    assert (outcome.constraints["fit_spread"], outcome.constraints["fit_spikes"]) == (0.0, 0.0)
    assert outcome.constraints["f1_macro"] == 1.0


def test_a_training_failure_violates_everything_and_is_catastrophic() -> None:
    fit = result([], f1_macro=[], f1_weighted=[], failure="stage2 fine-tune, epoch 3: loss is nan")
    outcome = judge(fit, targets=TARGETS, search=SEARCH)
    assert outcome.catastrophic and not outcome.feasible
    assert outcome.constraints == dict.fromkeys(CONSTRAINT_KEYS, scorers.CONSTRAINT_CAP)
    assert outcome.recommendation.action == "restart_lower_lr"
    assert "catastrophic" in outcome.line()


def test_a_collapsed_utility_is_catastrophic() -> None:
    outcome = judge(result(tight(), f1=0.05), targets=TARGETS, search=SEARCH)
    assert outcome.catastrophic
    assert all(v == scorers.CONSTRAINT_CAP for v in outcome.constraints.values())


def test_without_the_fit_requirement_an_underfit_fit_can_be_feasible() -> None:
    wide = list(3.0 * (1 + 0.2 * np.random.default_rng(3).standard_normal(500)))
    strict = judge(result(wide), targets=TARGETS, search=SEARCH)
    assert strict.label == "underfit" and strict.constraints["fit_spread"] > 0 and not strict.feasible
    assert strict.recommendation.action == "add_epochs" and strict.recommendation.epochs == 10
    loose = judge(result(wide), targets=Targets(epsilon_cap=10.0, require_well_fit=False), search=SEARCH)
    assert loose.feasible and loose.constraints["fit_spread"] == 0.0
    assert loose.recommendation.action == "stop"


def test_q10_statistic_and_flowchart_steps_come_from_the_study() -> None:
    fit = result(tight(), f1=0.74, f1_macro=[0.6] * 4 + [0.8] * 26)
    median = judge(fit, targets=Targets(epsilon_cap=10.0), search=SEARCH)
    q10 = judge(fit, targets=Targets(epsilon_cap=10.0, statistic="q10"), search=SEARCH)
    assert median.constraints["f1_macro"] <= 0 < q10.constraints["f1_macro"]
    wide = list(3.0 * (1 + 0.2 * np.random.default_rng(3).standard_normal(500)))
    steps = judge(result(wide), targets=TARGETS, search=SearchSpace(epochs_step=2))
    assert steps.recommendation.epochs == 9


def test_attributes_are_json_and_hold_no_per_record_values() -> None:
    attrs = judge(result(tight()), targets=TARGETS, search=SEARCH).attributes()
    json.dumps(attrs, allow_nan=False)
    assert len(attrs["max_delta_series"]) == 500 and len(attrs["f1_macro_draws"]) == 30  # per draw, not per record
    assert {f"constraint_{k}" for k in CONSTRAINT_KEYS} <= set(attrs)
    for key in ("epsilon", "f1_macro_median", "f1_macro_q10", "f1_weighted_median", "f1_weighted_q10", "diagnosis",
                "reasons", "recommendation", "epsilon_is_lower_bound", "timings", "draws_skipped"):
        assert key in attrs
    assert not set(attrs) & {"texts", "labels", "risks", "risk", "weights", "losses", "record_max", "argmax"}


def test_a_series_too_short_to_judge_is_infeasible_when_a_good_fit_is_required() -> None:
    short = judge(result(tight(n=MIN_DRAWS - 1)), targets=TARGETS, search=SEARCH)
    assert not short.feasible and short.label == "not_judged"
    assert short.constraints["fit_spread"] > 0 and short.constraints["fit_spikes"] > 0
    assert short.constraints["epsilon"] <= 0 and short.constraints["f1_macro"] <= 0  # the rest is still measured
    assert any(f"fewer than {MIN_DRAWS}" in reason and "require_well_fit" in reason for reason in short.reasons)
    assert short.recommendation.action != "stop" and "infeasible" in short.line()
    loose = judge(result(tight(n=MIN_DRAWS - 1)), targets=Targets(epsilon_cap=10.0, require_well_fit=False),
                  search=SEARCH)
    assert loose.feasible
    assert judge(result(tight(n=MIN_DRAWS)), targets=TARGETS, search=SEARCH).feasible


def test_attributes_record_the_cpu_thread_count() -> None:
    assert judge(result(tight(), threads=3), targets=TARGETS, search=SEARCH).attributes()["threads"] == 3
