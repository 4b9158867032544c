"""The exact lines the verbs print about a study: the best trial, the closest one, and the warnings on stderr."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from tests.tuner.helpers import result, tight
from tuner import StudyConfig
from tuner.cli.messages import best_line, print_closest, warn_at_edge, warn_mixed_stage1
from tuner.config import Targets
from tuner.outcome import judge
from tuner.record import constraint_attrs

DISTRIBUTIONS = {"c": FloatDistribution(0.1, 2.0), "ft_epochs": IntDistribution(1, 20)}


@pytest.fixture
def config(study_file: Callable[..., Path]) -> StudyConfig:
    """The small study: c in [0.3, 1.2], 4 to 8 epochs, epsilon target 50."""
    return StudyConfig.from_toml(study_file())


def new_study() -> optuna.Study:
    return optuna.create_study(storage=InMemoryStorage())


def judged(config: StudyConfig, c: float, epochs: int, *, targets: Targets | None = None,
           state: TrialState = TrialState.COMPLETE, **fields: Any) -> FrozenTrial:
    """A trial judged from a made-up fit (epsilon 6.186, F1 macro 0.799), stored as a run stores it; no fit."""
    outcome = judge(result(tight(), c=c, epochs=epochs, **fields), targets=targets or config.targets,
                    search=config.search)
    epsilon = outcome.objective_values("epsilon")
    assert isinstance(epsilon, float)
    return create_trial(state=state, params={"c": c, "ft_epochs": epochs}, distributions=DISTRIBUTIONS,
                        value=None if state == TrialState.PRUNED else epsilon,
                        user_attrs=outcome.attributes(), system_attrs=constraint_attrs(outcome.constraints))


def added(study: optuna.Study, *trials: FrozenTrial) -> optuna.Study:
    for trial in trials:
        study.add_trial(trial)
    return study


# --- best_line --------------------------------------------------------------------------------------------------


def test_the_best_line_states_the_trial_its_epsilon_and_its_f1_against_the_baseline(config: StudyConfig) -> None:
    study = added(new_study(), judged(config, 0.876543, 7))
    assert best_line(study.trials[0]) == (
        "best feasible: trial 0: c = 0.8765, 7 epochs, epsilon = 6.186 (an estimate from 500 privacy draws, not a "
        "bound; swagppm-tune audit checks it), F1 macro median 0.799 (baseline 0.820), weighted 0.852 (baseline "
        "0.870)")


def test_the_best_line_counts_one_epoch_as_one(config: StudyConfig) -> None:
    study = added(new_study(), judged(config, 1.0, 6), judged(config, 1.0, 1))
    assert best_line(study.trials[1]).startswith("best feasible: trial 1: c = 1, 1 epoch, epsilon = 6.186 ")


# --- print_closest ----------------------------------------------------------------------------------------------


def test_a_study_without_a_finished_trial_says_so(config: StudyConfig, capsys: pytest.CaptureFixture[str]) -> None:
    print_closest(new_study())
    study = added(new_study(), create_trial(state=TrialState.FAIL, params={"c": 1.0, "ft_epochs": 6},
                                            distributions=DISTRIBUTIONS))
    print_closest(study)  # a failed trial measured nothing
    assert capsys.readouterr() == ("no finished trial yet\nno finished trial yet\n", "")


def test_the_closest_trial_is_printed_with_its_violations_and_the_guide_s_next_move(
        config: StudyConfig, capsys: pytest.CaptureFixture[str]) -> None:
    strict = dataclasses.replace(config.targets, epsilon_cap=1.0)
    study = added(new_study(), judged(config, 0.8, 6, targets=strict, f1=0.2), judged(config, 0.9, 6, targets=strict))
    print_closest(study)
    assert capsys.readouterr() == (
        "no feasible trial; closest: trial 1 (c = 0.9, 6 epochs, well_fit) violates: epsilon +5.186\n"
        "  the guide's next move from there: well fit but epsilon above target: lower c by 0.15 and restart at "
        "6 epochs\n", "")


def test_a_closest_trial_without_a_record_is_printed_without_a_next_move(
        capsys: pytest.CaptureFixture[str]) -> None:
    constraints = {"epsilon": 0.5, "f1_macro": -0.1, "f1_weighted": -0.1, "fit_spread": 0.25, "fit_spikes": -1.0}
    study = added(new_study(), create_trial(params={"c": 0.5, "ft_epochs": 5}, distributions=DISTRIBUTIONS,
                                            value=2.0, system_attrs=constraint_attrs(constraints)))
    print_closest(study)
    assert capsys.readouterr() == (
        "no feasible trial; closest: trial 0 (c = 0.5, 5 epochs, ?) violates: epsilon +0.500, fit_spread +0.250\n", "")


# --- warn_at_edge -----------------------------------------------------------------------------------------------


def test_a_choice_inside_the_ranges_prints_nothing(config: StudyConfig, capsys: pytest.CaptureFixture[str]) -> None:
    study = added(new_study(), judged(config, 0.75, 6))
    warn_at_edge(study.trials[0], config)
    assert capsys.readouterr() == ("", "")


def test_a_choice_on_the_edges_names_each_one_on_stderr(config: StudyConfig,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    study = added(new_study(), judged(config, 0.305, 8), judged(config, 1.2, 4))
    warn_at_edge(study.trials[0], config)  # within 1% of the c range counts as its edge
    warn_at_edge(study.trials[1], config)
    out, err = capsys.readouterr()
    advice = f"a better one may lie further out; widen [search] in {config.path} and run again"
    assert out == "" and err.splitlines() == [
        "warning: the chosen configuration sits at the edge of the search ranges (c = 0.305 at c_min = 0.3; "
        f"8 epochs at ft_epochs_max): {advice}",
        "warning: the chosen configuration sits at the edge of the search ranges (c = 1.2 at c_max = 1.2; "
        f"4 epochs at ft_epochs_min): {advice}",
    ]


# --- warn_mixed_stage1 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fingerprints", [[], ["", ""], ["aaaa", "aaaa", ""]])
def test_one_stage_1_or_none_recorded_prints_nothing(config: StudyConfig, fingerprints: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    study = added(new_study(), *(judged(config, 0.9, 6, stage1_fingerprint=fp) for fp in fingerprints))
    warn_mixed_stage1(study)
    assert capsys.readouterr() == ("", "")


def test_several_stage_1s_are_listed_with_their_trials_on_stderr(config: StudyConfig,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    study = added(new_study(), *(judged(config, 0.9, 6, stage1_fingerprint=fp)
                                 for fp in ("aaaa", "bbbb", "aaaa", "", "cccc")))
    study.add_trial(judged(config, 0.9, 6, stage1_fingerprint="dddd", state=TrialState.PRUNED))  # finished too
    study.add_trial(create_trial(state=TrialState.FAIL, params={"c": 1.0, "ft_epochs": 6},
                                 distributions=DISTRIBUTIONS, user_attrs={"stage1_fingerprint": "eeee"}))
    warn_mixed_stage1(study)
    assert capsys.readouterr() == ("", (
        "warning: the trials used 4 different stage 1s (aaaa: trials 0, 2; bbbb: trials 1; cccc: trials 4; dddd: "
        "trials 5), so their epsilon and F1 do not compare; give every worker one cache_dir and thread count, and "
        "rerun the choice in a new study\n"))
